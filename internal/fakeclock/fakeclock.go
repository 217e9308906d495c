// Package fakeclock provides the one fake clock that the tests of every
// package in this repository use.
//
// A Clock stands still until a test moves it with Advance, Set or Step.
// Its Now method has the signature of every clock option in the
// repository (pace.WithClock, memory.WithClock,
// instrument.WithClock), its Advance method that of storetest.WithClock,
// and its Now and After methods make it a pacer.Clock, whose timers fire
// when the clock passes their deadline.
package fakeclock

import (
	"sync"
	"sync/atomic"
	"time"
)

// Clock is a fake clock that moves only when told. The zero value is not
// usable: call New. All its methods are safe for concurrent use by
// multiple goroutines. Now takes no lock, nor does Advance while no timer
// is pending, and only After allocates (and Set, to a time more than 292
// years away or in another location), so that the clock adds neither
// contention nor allocations to the code under test, even under -race.
type Clock struct {
	start time.Time

	// The time is st.base + st.ns. Advance adds to st.ns with a
	// compare-and-swap; st is replaced (with mu held) only by a Set too far
	// from st.base for a Duration.
	st      atomic.Pointer[state]
	pending atomic.Int64 // len(timers), or one more while After reads the time

	mu      sync.Mutex
	timers  []timer
	started chan struct{} // one value per timer started, while there is room
}

type state struct {
	base time.Time
	ns   atomic.Int64
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
	c := &Clock{start: start, started: make(chan struct{}, startedRoom)}
	c.st.Store(&state{base: start})
	return c
}

// Now returns the clock's current time.
func (c *Clock) Now() time.Time {
	st := c.st.Load()
	return st.base.Add(time.Duration(st.ns.Load()))
}

// Elapsed returns how far the clock has moved since New: Now minus the
// start time (negative if it was set before the start).
func (c *Clock) Elapsed() time.Duration { return c.Now().Sub(c.start) }

// Advance moves the clock by d, which may be negative (a clock stepped
// back), and fires the timers that are then due.
func (c *Clock) Advance(d time.Duration) {
	if _, ok := c.add(d); !ok {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.setLocked(c.Now().Add(d))
		return
	}
	// After counts its timer before it reads the time: either it read the
	// time moved by d, or this sees the count and fires what is due.
	if c.pending.Load() > 0 {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.fireLocked(c.Now())
	}
}

// add adds d to the time, without a lock, and returns the new time; false
// (and nothing added) if the sum would overflow. An add racing a Set that
// replaces c.st is lost, as if it had come before the Set.
func (c *Clock) add(d time.Duration) (time.Time, bool) {
	st := c.st.Load()
	for {
		n := st.ns.Load()
		m := n + int64(d)
		if (d > 0 && m < n) || (d < 0 && m > n) {
			return time.Time{}, false
		}
		if st.ns.CompareAndSwap(n, m) {
			return st.base.Add(time.Duration(m)), true
		}
	}
}

// Set moves the clock to t, even backwards, and fires the timers that are
// then due. A concurrent Advance is applied before or after t.
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
	t, ok := c.add(d) // c.st cannot change: mu is held
	if !ok {
		return c.setLocked(c.Now().Add(d))
	}
	c.fireLocked(t)
	return t
}

// setLocked stores t and fires the timers due at t. c.mu must be held.
func (c *Clock) setLocked(t time.Time) time.Time {
	st := c.st.Load()
	if d := t.Sub(st.base); st.base.Add(d) == t { // Now will return t exactly: same wall, monotonic and location
		st.ns.Store(int64(d))
	} else { // too far from base for a Duration, or another monotonic reading
		c.st.Store(&state{base: t})
	}
	c.fireLocked(t)
	return t
}

// fireLocked fires the timers due at now. c.mu must be held.
func (c *Clock) fireLocked(now time.Time) {
	kept := c.timers[:0]
	for _, tm := range c.timers {
		if tm.at.After(now) {
			kept = append(kept, tm)
			continue
		}
		tm.c <- now // buffered, and each timer fires once
		c.pending.Add(-1)
	}
	clear(c.timers[len(kept):])
	c.timers = kept
}

// After returns a channel that receives the clock's time once the clock
// has moved d past the current time (at once if d <= 0), and a stop
// function that cancels the timer if it has not fired; calling stop after
// the timer fired, or twice, is harmless. This is the pacer.Clock method.
// Each call sends a value on Started.
func (c *Clock) After(d time.Duration) (<-chan time.Time, func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending.Add(1) // before reading the time: see Advance
	now := c.Now()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- now
		c.pending.Add(-1)
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
			c.pending.Add(-1)
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
