package pacer

import (
	"testing"
	"time"

	"github.com/ratepace/pace/internal/fakeclock"
)

// logModel is a sliding log of limit calls per window that reports the
// limit and what is left, never a reset, and refuses without counting.
type logModel struct {
	limit  int
	window time.Duration
	at     []time.Time // the calls counted, oldest first
}

// call decides a call arriving at now and reports whether it was counted.
func (l *logModel) call(now time.Time) bool {
	for len(l.at) > 0 && !l.at[0].After(now.Add(-l.window)) {
		l.at = l.at[1:]
	}
	if len(l.at) >= l.limit {
		return false
	}
	l.at = append(l.at, now)
	return true
}

func (l *logModel) signal(ok bool) Signal {
	return modelSignal(float64(l.limit), float64(l.limit-len(l.at)), 0, ok)
}

// others calls the log at rate per second from start until stop, with
// the calls up to now not yet made.
type others struct {
	next, stop time.Time
	gap        time.Duration
}

func (o *others) until(l *logModel, now time.Time) {
	for !o.next.After(now) && o.next.Before(o.stop) {
		l.call(o.next)
		o.next = o.next.Add(o.gap)
	}
}

// runLog paces one client against l, shared with o, until end, each call
// answered at once, and returns the window the client believes in.
func runLog(t *testing.T, l *logModel, o *others, end time.Time) time.Duration {
	t.Helper()
	c := fakeclock.New(ownT0)
	p := MustNew(WithClock(c), WithSeed(1))
	for c.Now().Before(end) {
		d := p.Reserve()
		c.Advance(d + 100*time.Millisecond)
		o.until(l, c.Now())
		p.Observe(l.signal(l.call(c.Now())))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.window
}

// TestOthersCallsLeavingBoundTheWindow: a client sharing a 20 s sliding
// log that sends no reset with another calling 4 times a second. Its own
// calls never outnumber the count, so that the bound from its own calls
// leaving the count never comes, and it kept the default minute. From the count it saw at its first call (nearly nothing)
// and the calls that left the count later (more than it held then), the
// window is shorter than the time since that first call.
func TestOthersCallsLeavingBoundTheWindow(t *testing.T) {
	l := &logModel{limit: 200, window: 20 * time.Second}
	o := &others{next: ownT0.Add(50 * time.Millisecond), stop: ownT0.Add(time.Hour), gap: 250 * time.Millisecond}
	if got := runLog(t, l, o, ownT0.Add(30*time.Second)); got != 20*time.Second {
		t.Errorf("window after 30 s on a 20 s log shared with another client = %v; want 20s", got)
	}
	// A log of a minute keeps every call of the first minute: the
	// default stands.
	l = &logModel{limit: 600, window: time.Minute}
	o = &others{next: ownT0.Add(50 * time.Millisecond), stop: ownT0.Add(time.Hour), gap: 125 * time.Millisecond}
	if got := runLog(t, l, o, ownT0.Add(55*time.Second)); got != time.Minute {
		t.Errorf("window after 55 s on a log of a minute = %v; want the default minute", got)
	}
}

// TestFullCountLooksAtRoundWindows: others fill a 20 s sliding log that
// sends no reset within 8 s and stop; the client, held by the full count,
// would sleep for half the window it guesses (30 s) and miss the first
// calls leaving. It calls again when a round window has passed since it
// saw the key quiet, sees the calls of the first second gone, and learns
// the window; before, it woke 30 s later, when everything had left, and
// read a bound of 30 s.
func TestFullCountLooksAtRoundWindows(t *testing.T) {
	l := &logModel{limit: 100, window: 20 * time.Second}
	o := &others{next: ownT0.Add(50 * time.Millisecond), stop: ownT0.Add(8 * time.Second), gap: 80 * time.Millisecond}
	if got := runLog(t, l, o, ownT0.Add(21*time.Second)); got != 20*time.Second {
		t.Errorf("window after 21 s on a 20 s log filled at 8 s = %v; want 20s", got)
	}
}

// TestBucketWithPassedResetIsNoLog: a token bucket of 300 refilled over
// 30 s whose reset, its next token written as a date to the second, has
// always passed when read, shared with a client that calls 20 times a
// second for 10 s. Its count drains from the first call on, so that
// calls seem to leave the count within seconds of the key's start:
// read as a sliding log, that bounded the window at a few seconds. The
// reset field is there, empty or not: the server is no sliding log
// without a reset, and the window stays the default.
func TestBucketWithPassedResetIsNoLog(t *testing.T) {
	c := fakeclock.New(ownT0)
	p := MustNew(WithClock(c), WithSeed(1))
	b := &bucketModel{limit: 300, window: 30 * time.Second, tokens: 300, at: ownT0}
	o := ownT0.Add(20 * time.Millisecond)
	for c.Now().Before(ownT0.Add(40 * time.Second)) {
		c.Advance(p.Reserve() + 50*time.Millisecond)
		for ; o.Before(c.Now()) && o.Before(ownT0.Add(10*time.Second)); o = o.Add(50 * time.Millisecond) {
			b.call(o) // another client, 20 calls a second for 10 s
		}
		s := b.call(c.Now())
		s.Reset, s.HasReset = 0, true
		p.Observe(s)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.window < 30*time.Second {
		t.Errorf("window on a 30 s bucket whose reset has passed = %v; want 30s or more", p.window)
	}
}

// TestRefusedLookLeavesTheOthersRate: on a sliding log of a minute that
// sends no reset, another client fills the count within 5 s and is then
// held by it. This client, held too, looks when 10 s have passed since its
// first call (a window of 10 s would have let calls go by then) and is
// refused: the count is the limit, as at its previous response, and
// nobody could be counted in between. Taken as a count, that said the
// others had stopped, and the client that looked came back at the next
// window with a larger share than those that were only refused.
func TestRefusedLookLeavesTheOthersRate(t *testing.T) {
	c := fakeclock.New(ownT0)
	p := MustNew(WithClock(c), WithSeed(1))
	l := &logModel{limit: 100, window: time.Minute}
	o := &others{next: ownT0.Add(50 * time.Millisecond), stop: ownT0.Add(time.Hour), gap: 50 * time.Millisecond}
	for i := 0; i < 200; i++ {
		d := p.Reserve()
		c.Advance(d + 20*time.Millisecond)
		o.until(l, c.Now())
		ok := l.call(c.Now())
		if !ok && c.Now().Sub(ownT0) >= 10*time.Second {
			p.mu.Lock()
			before := p.others
			p.mu.Unlock()
			p.Observe(l.signal(ok))
			p.mu.Lock()
			after := p.others
			p.mu.Unlock()
			if after != before {
				t.Errorf("others' rate after a refused look at +%v = %.2f/s; want %.2f/s as before", c.Now().Sub(ownT0), after, before)
			}
			return
		}
		p.Observe(l.signal(ok))
	}
	t.Fatal("no refusal 10 s or more in")
}

// TestBoundFromLeavingKeepsOwnPace: a bound from calls leaving the count
// comes to each client when its own counts show it, not to all at once as
// a reset does. A client that read a window three times shorter used to
// call three times as fast at once (the same share of a shorter window),
// filling the room the calls left before the others could see them go;
// the one that saw it last kept the default minute and a small share. It
// keeps its own calls per second, and its control loop grows them.
func TestBoundFromLeavingKeepsOwnPace(t *testing.T) {
	c := fakeclock.New(ownT0)
	p := MustNew(WithClock(c), WithSeed(1))
	l := &logModel{limit: 200, window: 20 * time.Second}
	o := &others{next: ownT0.Add(50 * time.Millisecond), stop: ownT0.Add(time.Hour), gap: 250 * time.Millisecond}
	for c.Now().Before(ownT0.Add(30 * time.Second)) {
		c.Advance(p.Reserve() + 100*time.Millisecond)
		o.until(l, c.Now())
		s := l.signal(l.call(c.Now()))
		p.mu.Lock()
		before, w := p.rate, p.window
		p.mu.Unlock()
		p.Observe(s)
		p.mu.Lock()
		after, shorter := p.rate, p.window < w
		p.mu.Unlock()
		if shorter {
			if after > 1.1*before {
				t.Errorf("rate when the window went from %v to %v = %.2f/s; want about %.2f/s as before", w, p.window, after, before)
			}
			return
		}
	}
	t.Fatal("the window never shortened")
}

// TestNoLookWithoutRetryAfter: others fill a sliding log of the default
// minute that sends no reset within 4 s and stop. The client, which saw
// the key quiet and was never refused, knows nothing that rules out a
// round window below the minute, and every one it could look at (5 s,
// 10 s, 15 s…) is a refusal here: it waits at the full count as the
// barrier says (half the window), as it did before it looked.
func TestNoLookWithoutRetryAfter(t *testing.T) {
	c := fakeclock.New(ownT0)
	p := MustNew(WithClock(c), WithSeed(1))
	l := &logModel{limit: 120, window: time.Minute}
	o := &others{next: ownT0.Add(50 * time.Millisecond), stop: ownT0.Add(3 * time.Second), gap: 30 * time.Millisecond}
	var full time.Time // when this client first saw the count full
	for c.Now().Before(ownT0.Add(50 * time.Second)) {
		c.Advance(p.Reserve() + 20*time.Millisecond)
		o.until(l, c.Now())
		if !full.IsZero() {
			if d := c.Now().Sub(full); d < 20*time.Second {
				t.Fatalf("called %v after the count of a minute's log was full, never refused before; want no call within 20s", d)
			}
			return
		}
		ok := l.call(c.Now())
		if !ok {
			t.Fatalf("refused at +%v before the count was seen full (%d)", c.Now().Sub(ownT0), len(l.at))
		}
		if len(l.at) >= l.limit {
			full = c.Now()
		}
		p.Observe(l.signal(ok))
	}
	t.Fatal("the count was never full")
}
