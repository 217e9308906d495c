package memory_test

import (
	"fmt"
	"github.com/ratepace/pace/driver"
	"github.com/ratepace/pace/internal/fakeclock"
	"github.com/ratepace/pace/memory"
	"testing"
	"time"
)

func mustShape(t *testing.T, capacity, perSecond, cost float64) []driver.Shape {
	t.Helper()
	b, err := driver.NewShape(capacity, perSecond, cost)
	if err != nil {
		t.Fatal(err)
	}
	return []driver.Shape{b}
}

func mustTake(t *testing.T, s *memory.Store, k string, shapes []driver.Shape) driver.Grant {
	t.Helper()
	g, err := s.Take(ctx, k, shapes)
	if err != nil {
		t.Fatalf("Take(%q) = %v", k, err)
	}
	return g
}

// TestTakeRowsReclaimed: a Take key holds a row only while one of its
// shapes is not full. A refund that fills it deletes the row at once, a
// take of cost zero never makes one, and the sweep reclaims the rest one
// horizon (the longest Tolerance) after they are full.
func TestTakeRowsReclaimed(t *testing.T) {
	clk := newFakeClock()
	s := memory.New(memory.WithClock(clk.Now))
	second := mustShape(t, 1, 1, 1) // full again a second after a take
	g := mustTake(t, s, "returned", second)
	must(t, s.Refund(ctx, "returned", second, g.Receipt))
	mustTake(t, s, "free", mustShape(t, 1, 1, 0))
	if n := s.Len(); n != 0 {
		t.Fatalf("Len() = %d after a take given back and a take of cost 0; want 0", n)
	}

	const n = 5000
	for i := range n {
		if g := mustTake(t, s, fmt.Sprintf("k%d", i), second); !g.OK {
			t.Fatalf("Take(k%d) = %+v on a new key; want OK", i, g)
		}
	}
	if got := s.Len(); got != n {
		t.Fatalf("Len() = %d after %d keys took; want %d", got, n, n)
	}
	clk.Advance(2 * time.Second) // full after 1 s; a pass is due within twice the time rows have left
	touchAll(t, s)
	if got := s.Len(); got != 0 {
		t.Fatalf("Len() = %d two seconds later (every key full); want 0", got)
	}
}

// TestRefundCopyAfterReorder: a receipt whose first refund gave back a take
// that was not the key's latest (so it reordered, and the receipt is no
// longer intact) gives nothing when refunded again through a copy: the key
// remembers its latest reordering refund, as pace.Buckets does per shard.
func TestRefundCopyAfterReorder(t *testing.T) {
	clk := newFakeClock()
	s := memory.New(memory.WithClock(clk.Now))
	hour := mustShape(t, 3, 1.0/3600, 1)
	mustTake(t, s, "k", hour)
	a := mustTake(t, s, "k", hour)
	mustTake(t, s, "k", hour)
	must(t, s.Refund(ctx, "k", hour, a.Receipt))
	must(t, s.Refund(ctx, "k", hour, a.Receipt)) // a copy
	if g := mustTake(t, s, "k", hour); !g.OK || g.Remaining != 0 {
		t.Fatalf("Take(%q) = %+v after 3 takes, one given back twice; want OK with Remaining 0", "k", g)
	}
	if g := mustTake(t, s, "k", hour); g.OK {
		t.Fatalf("Take(%q) = %+v: the copy gave back a second take; want refused", "k", g)
	}
}

// TestTakeClockOutOfRange: a clock before 1970 or past 2116 is clamped, not
// trusted: arrival times never overflow, and a new key is full.
func TestTakeClockOutOfRange(t *testing.T) {
	for _, at := range []time.Time{
		time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC),
	} {
		s := memory.New(memory.WithClock(fakeclock.New(at).Now))
		year := mustShape(t, 2, 1.0/(365*24*3600), 1)
		for i, want := range []bool{true, true, false} {
			g := mustTake(t, s, "k", year)
			if g.OK != want || g.OK && (g.Receipt.At <= 0 || g.Reset <= 0 || g.Receipt.Reserved[0] <= g.Receipt.At) {
				t.Errorf("clock at %v: Take #%d = %+v; want OK %v, with positive times that do not overflow", at.Year(), i+1, g, want)
			}
		}
	}
}
