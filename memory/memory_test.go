package memory_test

import (
	"sync"
	"testing"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/memory"
	"github.com/ratepace/pace/storetest"
)

func TestStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) pace.Store { return memory.New() })
}

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
