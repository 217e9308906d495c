package pacer_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/ratepace/pace/internal/fakeclock"
	"github.com/ratepace/pace/pacer"
)

// waitQueued returns once n callers are blocked in p.Wait.
func waitQueued(t *testing.T, p *pacer.Pacer, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for pacer.Queued(p) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d callers queued in Wait; want %d", pacer.Queued(p), n)
		}
		runtime.Gosched()
	}
}

// settle returns once the head of the queue has set its timer (the other
// callers wait for their turn, not for the clock), and drains c.Started().
func settle(t *testing.T, c *fakeclock.Clock) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, ok := c.Next(); !ok; _, ok = c.Next() {
		if time.Now().After(deadline) {
			t.Fatal("no caller set a timer")
		}
		runtime.Gosched()
	}
	for len(c.Started()) > 0 {
		<-c.Started()
	}
}

// waitTimer returns once the earliest timer set on c is at want.
func waitTimer(t *testing.T, c *fakeclock.Clock, want time.Time) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		at, ok := c.Next()
		if ok && at.Equal(want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("earliest timer at +%v (set: %v); want +%v", at.Sub(t0), ok, want.Sub(t0))
		}
		runtime.Gosched()
	}
}

// advanceToNext moves c to the earliest timer not yet fired, firing it.
func advanceToNext(t *testing.T, c *fakeclock.Clock) {
	t.Helper()
	at, ok := c.Next()
	if !ok {
		t.Fatal("callers are waiting but no timer is set")
	}
	c.Advance(at.Sub(c.Now()))
}

// startWaits starts n callers of p.Wait, one after the other (so that
// they queue in that order), each with its own context, and returns their
// cancel functions and the channel on which each reports its result and
// when (on c) it came.
func startWaits(t *testing.T, c *fakeclock.Clock, p *pacer.Pacer, n int) ([]context.CancelFunc, chan waitResult) {
	t.Helper()
	done := make(chan waitResult, n)
	cancels := make([]context.CancelFunc, n)
	base := pacer.Queued(p)
	for i := range cancels {
		cancels[i] = goWait(c, p, i, done)
		waitQueued(t, p, base+i+1)
	}
	settle(t, c)
	t.Cleanup(func() {
		for _, cancel := range cancels {
			cancel()
		}
	})
	return cancels, done
}

type waitResult struct {
	caller int
	err    error
	at     time.Time
}

// goWait starts caller i of p.Wait, which reports to done, and returns
// the cancel function of its context.
func goWait(c *fakeclock.Clock, p *pacer.Pacer, i int, done chan<- waitResult) context.CancelFunc {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		err := p.Wait(ctx)
		done <- waitResult{i, err, c.Now()}
	}()
	return cancel
}

// TestRetryAfterHoldsCallersAlreadyWaiting pins a bug: a Retry-After
// observed while callers wait held back only the callers that came after it;
// the 8 already waiting went at their old slots, within 440 ms, through a
// Retry-After of 5 s.
func TestRetryAfterHoldsCallersAlreadyWaiting(t *testing.T) {
	c := newFakeClock(t0)
	p := newPacer(c, pacer.WithWindow(1250*time.Millisecond))
	p.Observe(state(100, 90)) // one call every 55 ms
	p.Reserve()               // the call whose response will say Retry-After
	const n = 8
	_, done := startWaits(t, c, p, n)

	c.Advance(50 * time.Millisecond)
	p.Observe(pacer.Signal{Limit: 100, Used: 100, HasUsed: true, RetryAfter: 5 * time.Second, Throttled: true})
	end := c.Now().Add(5 * time.Second)

	// Step the clock from timer to timer. Only the head of the queue
	// sleeps on the clock: once it has set its timer and every caller that
	// left the queue has reported, nothing moves until the clock does.
	var went []time.Time
	record := func(r waitResult) {
		t.Helper()
		if r.err != nil {
			t.Fatalf("caller %d: Wait() = %v; want nil", r.caller, r.err)
		}
		if r.at.Before(end) {
			t.Fatalf("caller %d went at +%v, before the Retry-After observed at +50ms ended (+%v)",
				r.caller, r.at.Sub(t0), end.Sub(t0))
		}
		went = append(went, r.at)
	}
	timeout := time.After(10 * time.Second)
	advanceToNext(t, c)
	for len(went) < n {
		select {
		case r := <-done:
			record(r)
		case <-c.Started():
			for pacer.Queued(p)+len(went) < n {
				record(<-done)
			}
			if len(went) < n {
				advanceToNext(t, c)
			}
		case <-timeout:
			t.Fatalf("%d of %d callers went, and the others neither went nor set a timer", len(went), n)
		}
	}
	for i := 1; i < n; i++ {
		if !went[i].After(went[i-1]) {
			t.Fatalf("callers went at %v; want them spaced after the Retry-After, not together", went)
		}
	}
}

// A slot that a Retry-After moves beyond the caller's deadline fails the
// wait at once, as a slot beyond the deadline does from the start.
func TestRetryAfterBeyondDeadlineFailsWaitingCaller(t *testing.T) {
	start := time.Now() // the context's deadline is on the real clock
	c := newFakeClock(start)
	p := newPacer(c, pacer.WithWindow(1250*time.Millisecond))
	p.Observe(state(100, 90))
	p.Reserve()
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(time.Minute))
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Wait(ctx) }()
	waitQueued(t, p, 1)
	settle(t, c)
	p.Observe(pacer.Signal{RetryAfter: time.Hour, Throttled: true})
	advanceToNext(t, c)
	err := <-done
	if !errors.Is(err, pacer.ErrWouldExceedDeadline) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait() with its slot moved beyond its deadline = %v; want ErrWouldExceedDeadline", err)
	}
	if got := c.Now().Sub(start); got >= time.Second {
		t.Fatalf("Wait() failed at +%v; want at its old slot (+55ms), long before the deadline", got)
	}
	if q := pacer.Queued(p); q != 0 {
		t.Fatalf("%d callers queued after the only one failed; want 0", q)
	}
}

// twins returns two pacers in the same state, each on its own clock: one
// for the story under test, one for what would have happened without it.
func twins(opts ...pacer.Option) (c, qc *fakeclock.Clock, p, q *pacer.Pacer) {
	c, qc = newFakeClock(t0), newFakeClock(t0)
	p, q = newPacer(c, opts...), newPacer(qc, opts...)
	for _, x := range []*pacer.Pacer{p, q} {
		x.Observe(state(100, 90)) // one call every 2.4 s
		x.Reserve()
	}
	return c, qc, p, q
}

// TestCancelledWaitsInArrivalOrderGiveSlotsBack pins a bug: a cancelled wait
// gave its slot back only if nobody had booked after it. 20 callers
// cancelled in arrival order (as timeouts and disconnects come) pushed the
// next call to +43 s, against +2.15 s without them.
func TestCancelledWaitsInArrivalOrderGiveSlotsBack(t *testing.T) {
	c, _, p, q := twins()
	cancels, done := startWaits(t, c, p, 20)
	for _, cancel := range cancels {
		cancel()
		if r := <-done; !errors.Is(r.err, context.Canceled) {
			t.Fatalf("caller %d: Wait() after cancel = %v; want context.Canceled", r.caller, r.err)
		}
	}
	if got, want := p.Reserve(), q.Reserve(); got != want {
		t.Fatalf("Reserve() after 20 cancelled waits = %v; want %v, as if they had never waited", got, want)
	}
}

// A caller behind cancelled ones moves up to the slot the first of them
// held, whichever of them leaves first.
func TestCallerBehindCancelledWaitsMovesUp(t *testing.T) {
	for _, order := range [][]int{{0, 1}, {1, 0}} {
		c, qc, p, q := twins()
		first := t0.Add(q.Reserve()) // the slot of the first caller to wait
		cancels, done := startWaits(t, c, p, 3)
		for _, i := range order {
			cancels[i]()
			if r := <-done; r.caller != i || !errors.Is(r.err, context.Canceled) {
				t.Fatalf("cancel %d: caller %d returned %v; want caller %d, context.Canceled", i, r.caller, r.err, i)
			}
		}
		waitTimer(t, c, first)
		advanceToNext(t, c)
		r := <-done
		if r.err != nil || !r.at.Equal(first) {
			t.Fatalf("cancel order %v: the third caller went at +%v (%v); want +%v, the first waiter's slot",
				order, r.at.Sub(t0), r.err, first.Sub(t0))
		}
		qc.Set(c.Now())
		if got, want := p.Reserve(), q.Reserve(); got != want {
			t.Fatalf("cancel order %v: Reserve() after = %v; want %v, as if the cancelled callers had never waited", order, got, want)
		}
	}
}

// Many callers waiting while others give up and responses move slots
// later, all at once (run it under -race): every Wait returns, nil or the
// context's error for those that gave up, and none is left in the queue.
func TestWaitUnderCancelsAndRetryAfters(t *testing.T) {
	c := newFakeClock(t0)
	p := newPacer(c, pacer.WithWindow(1250*time.Millisecond))
	p.Observe(state(100, 90))
	const n = 200
	done := make(chan waitResult, n)
	cancels := make([]context.CancelFunc, n)
	for i := range cancels {
		cancels[i] = goWait(c, p, i, done)
	}
	defer func() {
		for _, cancel := range cancels {
			cancel()
		}
	}()
	went := 0
	deadline := time.Now().Add(20 * time.Second)
	for returned, i := 0, 0; returned < n; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d Waits returned; %d callers still queued", returned, n, pacer.Queued(p))
		}
		switch {
		case i%13 == 3:
			cancels[(i*31)%n]()
		case i%400 == 0:
			p.Observe(pacer.Signal{Limit: 100, Used: 100, HasUsed: true, RetryAfter: 500 * time.Millisecond, Throttled: true})
		case i%3 == 0:
			p.Observe(state(100, 95))
		}
		c.Advance(5 * time.Millisecond)
		runtime.Gosched()
		for len(done) > 0 {
			r := <-done
			returned++
			switch {
			case r.err == nil:
				went++
			case !errors.Is(r.err, context.Canceled):
				t.Fatalf("caller %d: Wait() = %v; want nil or context.Canceled", r.caller, r.err)
			}
		}
	}
	if q := pacer.Queued(p); q != 0 {
		t.Fatalf("%d callers queued after every Wait returned; want 0", q)
	}
	if went < n/10 { // about 50 go, the others give up first
		t.Fatalf("%d of %d callers went; want a good part of them", went, n)
	}
}

// Reserve's slots do not move, but a Retry-After observed while some are
// still ahead holds every call booked after it: none of the next ones comes
// before the Retry-After ends, however many were booked ahead of it.
func TestRetryAfterHoldsReservesBookedAfterIt(t *testing.T) {
	c := newFakeClock(t0)
	p := newPacer(c, pacer.WithWindow(time.Second))
	p.Observe(state(100, 90))
	for i := 0; i < 5; i++ {
		p.Reserve()
	}
	if d := p.Reserve(); d <= 0 {
		t.Fatalf("sixth call booked on a busy key: Reserve() = %v; want a slot ahead (the test needs some)", d)
	}
	const ra = 3 * time.Second
	p.Observe(pacer.Signal{Limit: 100, Used: 100, HasUsed: true, RetryAfter: ra, Throttled: true})
	for i := 0; i < 20; i++ {
		if d := p.Reserve(); d < ra {
			t.Fatalf("call %d booked after a Retry-After of %v: Reserve() = %v; want >= %v", i, ra, d, ra)
		}
	}
}
