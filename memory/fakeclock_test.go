package memory_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/memory"
	"github.com/ratepace/pace/storetest"
)

// TestStoreFakeClock runs the contract with the store's clock driven by the
// suite, which then never sleeps.
func TestStoreFakeClock(t *testing.T) {
	clk := newFakeClock()
	storetest.Run(t, func(t *testing.T) pace.Store { return memory.New(memory.WithClock(clk.Now)) }, storetest.WithClock(clk.Advance))
}

// fakeClock is a clock that moves only when told, safe for concurrent use.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
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
