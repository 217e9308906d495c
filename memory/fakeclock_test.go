package memory_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/internal/fakeclock"
	"github.com/ratepace/pace/memory"
	"github.com/ratepace/pace/storetest"
)

// TestStoreFakeClock runs the contract with the store's clock driven by the
// suite, which then never sleeps.
func TestStoreFakeClock(t *testing.T) {
	clk := newFakeClock()
	storetest.Run(t, func(t *testing.T) pace.Store { return memory.New(memory.WithClock(clk.Now)) }, storetest.WithAdvance(clk.Advance))
	storetest.RunTaker(t, func(t *testing.T) storetest.TakeStore { return memory.New(memory.WithClock(clk.Now)) }, storetest.WithAdvance(clk.Advance))
}

// newFakeClock returns a fake clock at the start of 2026.
func newFakeClock() *fakeclock.Clock {
	return fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
}

// TestManyShapes: every bucket shape decides as its own, however the shape
// cache is shared.
func TestManyShapes(t *testing.T) {
	s := memory.New()
	for round := range 2 {
		for i := 1; i <= 100; i++ {
			k := fmt.Sprintf("k%d-%d", round, i)
			n := 0
			for range i + 2 {
				ok, _, err := s.TokenBucket(context.Background(), k, float64(i), 1.0/3600, 1)
				if err != nil {
					t.Fatal(err)
				}
				if ok {
					n++
				}
			}
			if n != i {
				t.Fatalf("TokenBucket(%q, %d, 1/3600, 1) admitted %d of %d; want %d", k, i, n, i+2, i)
			}
		}
	}
}
