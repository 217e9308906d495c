package pace_test

import (
	"flag"
	"strconv"
	"testing"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/driver"
	"github.com/ratepace/pace/internal/fakeclock"
)

// reclaimFlood is the size of the floods below. For figures at 200,000 keys:
// go test -run 'LongShape|LenReclaims' -v . -args -flood=200000
var reclaimFlood = flag.Int("flood", 20_000, "keys in the floods of the reclamation tests")

// floodAfterLongShape reproduces a bug of the sweep, which once kept every
// row for the longest refill the table had seen: one take of a long-refill
// shape (100 tokens at one per hour), then a flood of n keys of one-second
// buckets, on a fresh table. It returns the table and its clock.
func floodAfterLongShape(t *testing.T, n int, long bool) (*pace.Buckets, *fakeclock.Clock) {
	t.Helper()
	c := newClock()
	tb := pace.NewBuckets(c.Now)
	if long {
		slow, err := driver.NewShape(100, 1.0/3600, 1)
		if err != nil {
			t.Fatal(err)
		}
		if ok, _ := tb.Take("slow", slow); !ok {
			t.Fatal("the first take of a new key was refused")
		}
	}
	second, err := driver.NewShape(1, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if ok, _ := tb.Take(key(i), second); !ok {
			t.Fatalf("new key %d refused", i)
		}
	}
	if got := tb.Len(); got != n+btoi(long) {
		t.Fatalf("Len() = %d after the flood; want %d", got, n+btoi(long))
	}
	return tb, c
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestLongShapeDoesNotStopReclamation: the sweep's cadence was the longest
// refill time ever used, so one take of a shape that refills in 100 hours
// kept a flood of one-second buckets for 100 hours. Each row must be
// reclaimed within a bounded time after it is full, whatever other shapes
// the table has seen: here, after 10 s of light traffic (10 new keys every
// 100 ms), no more rows than that traffic's own last second plus the slow
// key.
func TestLongShapeDoesNotStopReclamation(t *testing.T) {
	flood := *reclaimFlood
	for _, long := range []bool{false, true} {
		tb, c := floodAfterLongShape(t, flood, long)
		light, err := driver.NewShape(1, 1, 1)
		if err != nil {
			t.Fatal(err)
		}
		for step := range 100 {
			c.Advance(100 * time.Millisecond)
			for j := range 10 {
				tb.Take("light-"+strconv.Itoa(step*10+j), light)
			}
		}
		got := tb.Len()
		t.Logf("long-refill take first: %v; rows 10 s after a flood of %d one-second buckets: %d", long, flood, got)
		if limit := 2*100 + btoi(long); got > limit {
			t.Errorf("long-refill take first: %v; Len() = %d after 10 s of light traffic; want at most %d", long, got, limit)
		}
	}
}

// TestLenReclaimsWithoutTraffic: a table that sees no decision at all after
// a flood gave nothing back, since passes ran only on decisions. Len, which
// a metrics scrape calls, now runs the passes that are due.
func TestLenReclaimsWithoutTraffic(t *testing.T) {
	flood := *reclaimFlood
	tb, c := floodAfterLongShape(t, flood, true)
	c.Advance(time.Second)
	if got := tb.Len(); got != 1 {
		t.Fatalf("Len() = %d a second after a flood of %d one-second buckets, with no traffic since; want 1 (the slow key)", got, flood)
	}
	p, pc := newPaceT(t, 20)
	for i := range flood {
		p.Allow(key(i))
	}
	pc.Advance(time.Second)
	if got := p.Len(); got != 0 {
		t.Fatalf("Pace.Len() = %d a second after a flood of %d keys, with no traffic since; want 0", got, flood)
	}
}
