package memory

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratepace/pace/internal/fakeclock"
)

// TestPermanentValuesAreNotSweptOnEveryCall: a namespace's horizon was the
// longest TTL it had seen, and values stored with ttl 0 (never expire) do
// not set it, so a shard holding only such values was due for a pass of
// its whole map again one nanosecond after each pass: every call on the
// shard scanned it (690 µs a Get among 64,000 values, against 0.4 µs). The
// next pass must be at least a second away.
func TestPermanentValuesAreNotSweptOnEveryCall(t *testing.T) {
	clk := fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := New(WithClock(clk.Now))
	ctx := context.Background()
	for i := range 1000 {
		if err := s.Set(ctx, fmt.Sprintf("v-%d", i), []byte("v"), 0); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(time.Millisecond) // every shard's pass is due: run them
	if got := s.Len(); got != 1000 {
		t.Fatalf("Len() = %d; want 1000 values that never expire", got)
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		next, has := sh.values.nextSweep, sh.values.m != nil
		sh.mu.Unlock()
		if has && next.Sub(clk.Now()) < minSweepPeriod {
			t.Fatalf("shard %d: next pass over its values %v after the last; want at least %v", i, next.Sub(clk.Now()), minSweepPeriod)
		}
	}
}
