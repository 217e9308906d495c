package memory_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ratepace/pace/internal/fakeclock"
	"github.com/ratepace/pace/memory"
)

// floodAfterSlowRows gives key "slow" an hour-long slot, burst slot and
// value, then floods every namespace but the buckets with n keys whose rows
// live one second.
func floodAfterSlowRows(t *testing.T, n int) (*memory.Store, *fakeclock.Clock) {
	t.Helper()
	clk := newFakeClock()
	s := memory.New(memory.WithClock(clk.Now))
	_, _, err := s.AcquireSlot(ctx, "slow", 1, time.Hour)
	must(t, err)
	_, _, err = s.AcquireSlotBurst(ctx, "slow", 1, 1, 0, time.Hour)
	must(t, err)
	must(t, s.Set(ctx, "slow", []byte("v"), time.Hour))
	for i := range n {
		k := fmt.Sprintf("flood-%d", i)
		_, _, err := s.AcquireSlot(ctx, k, 1, time.Second)
		must(t, err)
		_, _, err = s.AcquireSlotBurst(ctx, k, 1, 1, 0, time.Second) // at sustained: reclaimable at expiry
		must(t, err)
		must(t, s.Set(ctx, k, []byte("v"), time.Second))
	}
	return s, clk
}

// TestLongLifetimeDoesNotStopReclamation pins, in the memory store's other
// namespaces, the bug floodAfterLongShape pins in the root package's table:
// each was swept once per the longest lifetime it had ever given a row, so
// one hour-long row kept a flood of one-second rows for an hour (two more
// for burst slots). After 10 s of light traffic (Gets of 10 absent keys
// every 100 ms) only the slow key's three rows may be left.
func TestLongLifetimeDoesNotStopReclamation(t *testing.T) {
	const n = 20000
	s, clk := floodAfterSlowRows(t, n)
	for step := range 100 {
		clk.Advance(100 * time.Millisecond)
		for j := range 10 {
			if _, err := s.Get(ctx, fmt.Sprintf("light-%d", step*10+j)); err == nil {
				t.Fatal("Get found a value never set")
			}
		}
	}
	if got := s.Len(); got != 3 {
		t.Fatalf("Len() = %d 10 s after a flood of %d keys of one-second rows; want 3 (the hour-long rows)", got, n)
	}
}

// TestStoreLenReclaimsWithoutTraffic: with no call at all after a flood,
// nothing ran the passes; Len now does.
func TestStoreLenReclaimsWithoutTraffic(t *testing.T) {
	const n = 20000
	s, clk := floodAfterSlowRows(t, n)
	clk.Advance(2 * time.Second)
	if got := s.Len(); got != 3 {
		t.Fatalf("Len() = %d 2 s after a flood of %d keys of one-second rows, with no traffic since; want 3 (the hour-long rows)", got, n)
	}
}
