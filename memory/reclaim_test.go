package memory_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/internal/benchkit"
	"github.com/ratepace/pace/memory"
)

var ctx = context.Background()

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// touchAll runs a call on enough distinct keys that every shard decides at
// least once, so every due sweep runs. A take of cost 0 and a Get of an
// absent key leave no row.
func touchAll(t *testing.T, s *memory.Store) {
	t.Helper()
	for i := range 10000 {
		k := fmt.Sprintf("touch-%d", i)
		if _, _, err := s.TokenBucket(ctx, k, 1, 1, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctx, k); err == nil {
			t.Fatalf("Get(%q) found a value never set", k)
		}
	}
}

// flood fills every namespace with n keys: a spent bucket, a slot, a burst
// slot above sustained (so with a budget deficit) and a value, all with
// one-second lifetimes.
func flood(t *testing.T, s *memory.Store, prefix string, n int) {
	t.Helper()
	for i := range n {
		k := fmt.Sprintf("%s-%d", prefix, i)
		_, _, err := s.TokenBucket(ctx, k, 1, 1, 1)
		must(t, err)
		_, _, err = s.AcquireSlot(ctx, k, 1, time.Second)
		must(t, err)
		for range 2 {
			_, _, err = s.AcquireSlotBurst(ctx, k, 1, 2, time.Minute, time.Second)
			must(t, err)
		}
		must(t, s.Set(ctx, k, []byte("value"), time.Second))
	}
}

func TestRowsReclaimedAfterHorizon(t *testing.T) {
	clk := newFakeClock()
	s := memory.New(memory.WithClock(clk.Now))
	const n = 5000
	flood(t, s, "k", n)
	if got := s.Len(); got != 4*n {
		t.Fatalf("Len() = %d after %d keys in four namespaces; want %d", got, n, 4*n)
	}

	// A burst slot that was above sustained is kept two refill windows
	// after its expiry: until then its debt is owed.
	clk.Advance(time.Hour)
	touchAll(t, s)
	if got := s.Len(); got != n {
		t.Fatalf("Len() = %d an hour later; want %d (the burst slots still owing budget)", got, n)
	}
	clk.Advance(2*pace.BurstRefillWindow + time.Second)
	touchAll(t, s)
	if got := s.Len(); got != 0 {
		t.Fatalf("Len() = %d after every horizon passed; want 0", got)
	}
}

// TestReleasedRowsDoNotAccumulate: rows that are indistinguishable from
// absent ones (released slots, values deleted) are reclaimed by the doubling
// rule even when no time passes.
func TestReleasedRowsDoNotAccumulate(t *testing.T) {
	clk := newFakeClock()
	s := memory.New(memory.WithClock(clk.Now))
	const n = 50000
	for i := range n {
		k := fmt.Sprintf("k-%d", i)
		_, _, err := s.AcquireSlot(ctx, k, 1, time.Hour)
		must(t, err)
		must(t, s.ReleaseSlot(ctx, k))
		_, _, err = s.AcquireSlotBurst(ctx, k, 1, 1, time.Minute, time.Hour)
		must(t, err)
		must(t, s.ReleaseSlotBurst(ctx, k))
	}
	// Each namespace of each of the 64 shards holds at most twice what its
	// last pass left (nothing), with a floor of 8 rows.
	if got, limit := s.Len(), 2*64*2*8; got > limit {
		t.Fatalf("Len() = %d after %d released slots; want at most %d", got, 2*n, limit)
	}
}

// TestHeapReturnsAfterFlood: Go maps never shrink, so the sweep rebuilds
// them; the heap must come back after a flood of distinct keys.
func TestHeapReturnsAfterFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("floods 50,000 keys")
	}
	clk := newFakeClock()
	s := memory.New(memory.WithClock(clk.Now))
	before := benchkit.Heap()
	const n = 50000
	flood(t, s, "flood", n)
	peak := benchkit.Heap()
	clk.Advance(3*pace.BurstRefillWindow + time.Second)
	touchAll(t, s)
	after := benchkit.Heap()
	runtime.KeepAlive(s)
	t.Logf("heap: %d KiB before, %d KiB after %d keys, %d KiB once reclaimed", before>>10, peak>>10, n, after>>10)
	if grown := peak - before; after > before+grown/10 {
		t.Fatalf("heap %d KiB after reclamation; want at most a tenth of the flood's %d KiB above the %d KiB before", after>>10, grown>>10, before>>10)
	}
}

// TestKeysDoNotPinCallerBuffers stores keys cut from large strings, both on
// insert and on updates of an existing row (assigning to an existing map key
// would store the caller's string in place of the clone).
func TestKeysDoNotPinCallerBuffers(t *testing.T) {
	s := memory.New()
	const n, size = 16, 1 << 20
	for i := range n {
		k := fmt.Sprintf("key-%d", i)
		_, _, err := s.AcquireSlot(ctx, k, 10, time.Hour)
		must(t, err)
	}
	before := benchkit.Heap()
	for i := range n {
		big := strings.Repeat("x", size) + fmt.Sprintf("key-%d", i)
		k := big[size:] // shares big's memory
		_, _, err := s.AcquireSlot(ctx, k, 10, time.Hour)
		must(t, err)
		must(t, s.Set(ctx, k, []byte("v"), time.Hour))
		_, _, err = s.AcquireSlotBurst(ctx, k, 1, 2, time.Minute, time.Hour)
		must(t, err)
	}
	after := benchkit.Heap()
	runtime.KeepAlive(s)
	if after > before+n*size/4 {
		t.Fatalf("heap grew by %d KiB storing %d short keys cut from %d MiB strings; the store pins its callers' buffers", (after-before)>>10, 3*n, size>>20)
	}
}

// TestClockBackwardsIsClamped: a reading earlier than one already seen is
// taken as that later one, so an expiry is never undone.
func TestClockBackwardsIsClamped(t *testing.T) {
	clk := newFakeClock()
	s := memory.New(memory.WithClock(clk.Now))
	if ok, cur, err := s.AcquireSlot(ctx, "k", 1, time.Second); !ok || cur != 1 || err != nil {
		t.Fatalf("AcquireSlot(\"k\", 1, 1s) = %v, %d, %v; want true, 1, nil", ok, cur, err)
	}
	clk.Advance(2 * time.Second)
	if _, err := s.Get(ctx, "k"); err == nil { // same shard: a reading at t+2s
		t.Fatal("Get(\"k\") found a value never set")
	}
	clk.Advance(-2 * time.Second)
	if ok, cur, err := s.AcquireSlot(ctx, "k", 1, time.Second); !ok || cur != 1 || err != nil {
		t.Fatalf("AcquireSlot(\"k\", 1, 1s) with the clock moved back = %v, %d, %v; want true, 1, nil (the slot expired)", ok, cur, err)
	}
}

func TestCloseIsIdempotentAndDropsRows(t *testing.T) {
	s := memory.New()
	_, _, err := s.AcquireSlot(ctx, "k", 1, time.Hour)
	must(t, err)
	must(t, s.Set(ctx, "k", []byte("v"), 0))
	must(t, s.Close(ctx))
	must(t, s.Close(ctx))
	if got := s.Len(); got != 0 {
		t.Fatalf("Len() = %d after Close; want 0", got)
	}
}
