package pacer

import (
	"testing"
	"time"

	"github.com/ratepace/pace/internal/fakeclock"
)

// TestBurstReadsTheWindow: a client shares a 20 s sliding log of 200 that
// sends no reset with another calling 7.5 times a second, which keeps the
// count flat. Its window was bounded at 47 s (it saw the first calls leave
// only long after they did, having been held at a full count), and a flat
// count reads the same over 47 s as over 20 s: it kept 47 s, and the
// share it believed in was two and a half times the one it held. It sends
// a burst, sees it leave the count 20 s later, and learns the window;
// then it holds about a newcomer's share of the count, not the share a
// 47 s window gave it.
func TestBurstReadsTheWindow(t *testing.T) {
	l := &logModel{limit: 200, window: 20 * time.Second}
	o := &others{next: ownT0.Add(-20 * time.Second), stop: ownT0.Add(time.Hour), gap: 133 * time.Millisecond}
	o.until(l, ownT0)
	c := fakeclock.New(ownT0)
	p := MustNew(WithClock(c), WithSeed(1))
	var own []time.Time // this client's calls counted
	for i := 0; c.Now().Before(ownT0.Add(90 * time.Second)); i++ {
		c.Advance(p.Reserve() + 20*time.Millisecond)
		o.until(l, c.Now())
		ok := l.call(c.Now())
		if ok {
			own = append(own, c.Now())
		}
		p.Observe(l.signal(ok))
		if i == 0 {
			p.mu.Lock()
			p.lw.bound = 47 * time.Second
			p.mu.Unlock()
		}
	}
	p.mu.Lock()
	w := p.window
	p.mu.Unlock()
	if w != 20*time.Second {
		t.Errorf("window after 90 s on a 20 s log kept flat by another client, bounded at 47 s = %v; want 20s", w)
	}
	n := 0
	for _, at := range own {
		if at.After(c.Now().Add(-20 * time.Second)) {
			n++
		}
	}
	if n < 25 {
		t.Errorf("calls counted in the last 20 s = %d of %d; want 25 or more (a newcomer's share of a count near 170)", n, len(l.at))
	}
}
