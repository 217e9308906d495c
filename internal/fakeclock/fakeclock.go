// Package fakeclock provides the one fake clock that the tests of every
// package in this repository use.
//
// A Clock stands still until a test moves it with Advance, Set or Step.
// Its Now method has the signature of every clock option in the
// repository (pace.WithClock, pace.WithSharedClock, memory.WithClock,
// instrument.WithClock), its Advance method that of storetest.WithClock,
// and its Now and After methods make it a pacer.Clock, whose timers fire
// when the clock passes their deadline.
package fakeclock

import (
	"sync"
	"time"
)

// Clock is a fake clock that moves only when told. The zero value is not
// usable: call New. All its methods are safe for concurrent use by
// multiple goroutines, and none of them allocates but After (so that
// a test counting allocations counts the code under test only).
type Clock struct {
	start time.Time

	mu      sync.RWMutex // readers: Now
	now     time.Time
	timers  []timer
	started chan struct{} // one value per timer started, while there is room
}

type timer struct {
	at time.Time
	c  chan time.Time
}

// startedRoom is how many timer starts Started holds before it drops
// further ones.
const startedRoom = 1024

// New returns a Clock that reads start until moved. The time keeps its
// monotonic reading, if any, and its location.
func New(start time.Time) *Clock {
	return &Clock{start: start, now: start, started: make(chan struct{}, startedRoom)}
}

// Now returns the clock's current time.
func (c *Clock) Now() time.Time {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.now
}

// Elapsed returns how far the clock has moved since New: Now minus the
// start time (negative if it was set before the start).
func (c *Clock) Elapsed() time.Duration { return c.Now().Sub(c.start) }

// Advance moves the clock by d, which may be negative (a clock stepped
// back), and fires the timers that are then due.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setLocked(c.now.Add(d))
}

// Set moves the clock to t, even backwards, and fires the timers that are
// then due.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setLocked(t)
}

// Step moves the clock by d and returns the new time, in one step: a clock
// option given func() time.Time { return c.Step(d) } reads a time d later
// at every reading, so that a call timed by two readings lasts exactly d.
func (c *Clock) Step(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.setLocked(c.now.Add(d))
}

// setLocked stores t and fires the timers due at t. c.mu must be held.
func (c *Clock) setLocked(t time.Time) time.Time {
	c.now = t
	kept := c.timers[:0]
	for _, tm := range c.timers {
		if tm.at.After(t) {
			kept = append(kept, tm)
			continue
		}
		tm.c <- t // buffered, and each timer fires once
	}
	clear(c.timers[len(kept):])
	c.timers = kept
	return t
}

// After returns a channel that receives the clock's time once the clock
// has moved d past the current time (at once if d <= 0), and a stop
// function that cancels the timer if it has not fired; calling stop after
// the timer fired, or twice, is harmless. This is the pacer.Clock method.
// Each call sends a value on Started.
func (c *Clock) After(d time.Duration) (<-chan time.Time, func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- now
	} else {
		c.timers = append(c.timers, timer{at: now.Add(d), c: ch})
	}
	select {
	case c.started <- struct{}{}:
	default: // a test that never reads Started: drop rather than block
	}
	return ch, func() { c.stop(ch) }
}

// stop forgets the timer whose channel is ch, if it has not fired.
func (c *Clock) stop(ch chan time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, tm := range c.timers {
		if tm.c == ch {
			c.timers = append(c.timers[:i], c.timers[i+1:]...)
			return
		}
	}
}

// Next returns the earliest deadline of the timers not yet fired nor
// stopped, and false if there is none.
func (c *Clock) Next() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var next time.Time
	for i, tm := range c.timers {
		if i == 0 || tm.at.Before(next) {
			next = tm.at
		}
	}
	return next, len(c.timers) > 0
}

// Started returns a channel that receives a value each time After starts
// a timer, so that a test can wait until the code under test is blocked
// on the clock. It holds up to 1024 values not yet received; the starts
// beyond those are not reported.
func (c *Clock) Started() <-chan struct{} { return c.started }
