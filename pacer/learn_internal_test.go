package pacer

import (
	"testing"
	"time"

	"github.com/ratepace/pace/internal/fakeclock"
)

// TestOwnCallsGoneBoundTheWindow: a lone client of a server that sends a
// limit and a count but no reset (a 20 s sliding log). Its own calls leave
// the count after 20 s, which bounds the window; before, it kept the
// default minute and used a third of the limit. A count that keeps every
// call (a window longer than the default) moves nothing.
func TestOwnCallsGoneBoundTheWindow(t *testing.T) {
	run := func(window time.Duration) time.Duration {
		c := fakeclock.New(ownT0)
		p := New(WithClock(c), WithSeed(1))
		var sent []time.Time
		for i := 0; i < 120; i++ {
			c.Advance(p.Reserve() + 400*time.Millisecond)
			sent = append(sent, c.Now())
			used := int64(0)
			for _, s := range sent {
				if c.Now().Sub(s) < window {
					used++
				}
			}
			p.Observe(Signal{Limit: 200, Remaining: 200 - used, HasRemaining: true})
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.window
	}
	if got := run(20 * time.Second); got != 20*time.Second {
		t.Errorf("window learned from own calls leaving a 20 s count = %v; want 20s", got)
	}
	if got := run(time.Hour); got != time.Minute {
		t.Errorf("window with a count that keeps every call = %v; want the default minute", got)
	}
}

// TestLowCountAtCeilingShortensWindow: clients of a token bucket of 20
// refilled over 2 s, pacing at the default minute, keep it nearly full:
// its count stays at 0 or 1 and its time to full reads under half a
// second, so that nothing else says the window is short. Before, they
// stayed at 20 calls a minute (utilisation 0.22 with 4 clients). A
// client calling at its ceiling with the count below its own calls halves
// the window, at most once a quarter window.
func TestLowCountAtCeilingShortensWindow(t *testing.T) {
	c := fakeclock.New(ownT0)
	p := New(WithClock(c), WithSeed(1))
	// Others' calls in the first count: a shared key, no idle burst.
	p.Observe(Signal{Limit: 20, Remaining: 17, HasRemaining: true, Reset: 300 * time.Millisecond})
	for i := 0; i < 40; i++ {
		c.Advance(p.Reserve() + 10*time.Millisecond)
		p.Observe(Signal{Limit: 20, Remaining: 19, HasRemaining: true, Reset: 100 * time.Millisecond})
	}
	p.mu.Lock()
	w := p.window
	p.mu.Unlock()
	if w > 15*time.Second {
		t.Fatalf("window after 40 calls that a 20-call bucket never counted past 1 = %v; want 15s or less", w)
	}
}
