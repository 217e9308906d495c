package pacer_test

import (
	"sync"
	"time"
)

// fakeClock is a Clock that moves only when told to. After registers a
// waiter that fires when Advance passes its deadline.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []fakeWaiter
	added   chan struct{} // receives once per After
}

type fakeWaiter struct {
	at time.Time
	c  chan time.Time
}

func newFakeClock(start time.Time) *fakeClock {
	return &fakeClock{now: start, added: make(chan struct{}, 1024)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) (<-chan time.Time, func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := fakeWaiter{at: c.now.Add(d), c: make(chan time.Time, 1)}
	c.waiters = append(c.waiters, w)
	c.added <- struct{}{}
	return w.c, func() { c.stop(w.c) }
}

// stop forgets the timer whose channel is ch, if it has not fired.
func (c *fakeClock) stop(ch chan time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, w := range c.waiters {
		if w.c == ch {
			c.waiters = append(c.waiters[:i], c.waiters[i+1:]...)
			return
		}
	}
}

// Next returns the earliest deadline of the timers not yet fired.
func (c *fakeClock) Next() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var next time.Time
	for _, w := range c.waiters {
		if next.IsZero() || w.at.Before(next) {
			next = w.at
		}
	}
	return next, !next.IsZero()
}

// Advance moves the clock by d and fires the waiters that are due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if !w.at.After(c.now) {
			w.c <- c.now
			continue
		}
		kept = append(kept, w)
	}
	c.waiters = kept
}

// Set moves the clock to t, even backwards, firing nothing.
func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}
