package pacer_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/ratepace/pace/internal/fakeclock"
	"github.com/ratepace/pace/pacer"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newPacer(c *fakeclock.Clock, opts ...pacer.Option) *pacer.Pacer {
	return pacer.MustNew(append([]pacer.Option{pacer.WithClock(c), pacer.WithSeed(1)}, opts...)...)
}

func state(limit, used int64) pacer.Signal {
	return pacer.Signal{Limit: limit, Used: used, HasUsed: true}
}

func TestFreshPacerBursts(t *testing.T) {
	c := newFakeClock(t0)
	p := newPacer(c)
	for i := 0; i < 5; i++ {
		if d := p.Reserve(); d != 0 {
			t.Fatalf("call %d on a fresh pacer: Reserve() = %v; want 0", i, d)
		}
	}
}

func TestIdleKeyBursts(t *testing.T) {
	c := newFakeClock(t0)
	p := newPacer(c)
	// The count is low and all of it is this client's own: an idle key.
	for i := int64(1); i <= 10; i++ {
		if d := p.Reserve(); d != 0 {
			t.Fatalf("call %d on an idle key: Reserve() = %v; want 0 (burst)", i, d)
		}
		c.Advance(100 * time.Millisecond)
		p.Observe(state(120, i))
	}
}

func TestNoBurstWhenOthersCall(t *testing.T) {
	c := newFakeClock(t0)
	p := newPacer(c)
	p.Reserve()
	c.Advance(100 * time.Millisecond)
	p.Observe(state(120, 5)) // four of the five are somebody else's
	if g := gap(p); g <= 0 {
		t.Fatalf("gap with others counted = %v; want pacing from the start (no race for the burst)", g)
	}
}

// gap books two slots and returns the interval between them.
func gap(p *pacer.Pacer) time.Duration {
	a := p.Reserve()
	return p.Reserve() - a
}

func TestBusyKeyIsPaced(t *testing.T) {
	c := newFakeClock(t0)
	p := newPacer(c)
	p.Observe(state(120, 100))
	// The first report on a busy key starts the rate at a fair share among
	// four clients: a quarter of the count (25 calls) over the 60 s window.
	if g, want := gap(p), 2400*time.Millisecond; g < want*9/10 || g > want*11/10 {
		t.Fatalf("gap at used 100/120 = %v; want about %v", g, want)
	}
}

func TestFullWindowWaitsBounded(t *testing.T) {
	c := newFakeClock(t0)
	p := newPacer(c, pacer.WithWindow(time.Minute))
	p.Observe(state(120, 50))
	p.Observe(state(120, 120)) // the window is full
	d := p.Reserve()
	if d < time.Second || d > 30*time.Second {
		t.Fatalf("Reserve() with the window full = %v; want a wait in [1s, 30s] (one control period to half a window)", d)
	}
}

func TestLimitChangeScalesRate(t *testing.T) {
	c := newFakeClock(t0)
	p := newPacer(c)
	// The gap between the second and the third call booked at once: the
	// first may fill a hole below the target, faster than the rate.
	steady := func() time.Duration {
		p.Reserve()
		return gap(p)
	}
	p.Observe(state(120, 60))
	before := steady()
	p.Observe(state(40, 20))
	after := steady()
	if ratio := float64(after) / float64(before); ratio < 2.9 || ratio > 3.1 {
		t.Fatalf("gap %v at limit 120, %v at limit 40: ratio %.2f; want 3", before, after, ratio)
	}
}

// drive makes calls as a greedy client would for d, reporting report()
// after each, and returns the last gap.
func drive(c *fakeclock.Clock, p *pacer.Pacer, d time.Duration, report func() pacer.Signal) time.Duration {
	end := c.Now().Add(d)
	var g time.Duration
	for c.Now().Before(end) {
		g = p.Reserve()
		c.Advance(g + 200*time.Millisecond)
		p.Observe(report())
	}
	return g
}

func TestAboveTargetSlowsDown(t *testing.T) {
	c := newFakeClock(t0)
	p := newPacer(c)
	p.Observe(state(120, 100))
	first := gap(p)
	last := drive(c, p, 2*time.Minute, func() pacer.Signal { return state(120, 118) })
	if last <= first {
		t.Fatalf("gap after two windows at used 118/120 = %v; want above the first gap %v", last, first)
	}
}

func TestBelowTargetSpeedsUp(t *testing.T) {
	c := newFakeClock(t0)
	p := newPacer(c)
	p.Observe(state(120, 100))
	first := gap(p)
	last := drive(c, p, 2*time.Minute, func() pacer.Signal { return state(120, 60) })
	if last >= first {
		t.Fatalf("gap after two windows at used 60/120 = %v; want below the first gap %v", last, first)
	}
}

func TestIdleCallerDoesNotGrow(t *testing.T) {
	c := newFakeClock(t0)
	p := newPacer(c)
	p.Observe(state(120, 100))
	first := gap(p)
	// A caller that calls far less often than allowed never waits.
	for i := 0; i < 20; i++ {
		c.Advance(30 * time.Second)
		p.Reserve()
		p.Observe(state(120, 60))
	}
	c.Advance(30 * time.Second)
	if got := gap(p); got < first {
		t.Fatalf("gap after 10 minutes of calling every 30s = %v; want no growth beyond the first gap %v", got, first)
	}
}

func TestRetryAfterWins(t *testing.T) {
	c := newFakeClock(t0)
	p := newPacer(c)
	p.Observe(pacer.Signal{Limit: 120, Used: 0, HasUsed: true, RetryAfter: 42 * time.Second, Throttled: true})
	if d := p.Reserve(); d < 42*time.Second {
		t.Fatalf("after Retry-After 42s: Reserve() = %v; want >= 42s", d)
	}
}

func TestRetryAfterWinsEvenWhenLongerThanMaxDelay(t *testing.T) {
	c := newFakeClock(t0)
	p := newPacer(c, pacer.WithWindow(2*time.Second))
	p.Observe(pacer.Signal{RetryAfter: time.Hour, Throttled: true})
	if d := p.Reserve(); d < time.Hour {
		t.Fatalf("after Retry-After 1h with a 2s window: Reserve() = %v; want >= 1h", d)
	}
}

func TestThrottleWithoutRetryAfterBacksOff(t *testing.T) {
	c := newFakeClock(t0)
	p := newPacer(c)
	p.Observe(pacer.Signal{Throttled: true})
	d := p.Reserve()
	if d <= 0 || d > 30*time.Second {
		t.Fatalf("after a 429 without Retry-After: Reserve() = %v; want in (0, 30s]", d)
	}
}

func TestWindowFromSignalScalesGaps(t *testing.T) {
	gapAt := func(window time.Duration) time.Duration {
		c := newFakeClock(t0)
		p := newPacer(c)
		p.Observe(pacer.Signal{Limit: 100, Used: 80, HasUsed: true, Window: window})
		return gap(p)
	}
	short, long := gapAt(3*time.Second), gapAt(time.Hour)
	ratio := float64(long) / float64(short)
	if math.Abs(ratio-1200) > 1 {
		t.Fatalf("gap with w=1h / gap with w=3s = %v / %v = %.1f; want 1200", long, short, ratio)
	}
}

func TestClockGoingBackwardsIsClamped(t *testing.T) {
	c := newFakeClock(t0)
	p := newPacer(c)
	p.Observe(pacer.Signal{RetryAfter: 10 * time.Second, Throttled: true})
	c.Set(t0.Add(-time.Hour))
	if d := p.Reserve(); d < 10*time.Second || d > 20*time.Second {
		t.Fatalf("with the clock an hour back: Reserve() = %v; want about the 10s Retry-After (plus jitter), not 1h more", d)
	}
}

func TestWaitReturnsWhenSlotComes(t *testing.T) {
	c := newFakeClock(t0)
	p := newPacer(c)
	p.Observe(pacer.Signal{RetryAfter: 5 * time.Second, Throttled: true})
	done := make(chan error, 1)
	go func() { done <- p.Wait(context.Background()) }()
	<-c.Started()
	select {
	case err := <-done:
		t.Fatalf("Wait returned %v before the clock moved", err)
	default:
	}
	c.Advance(time.Minute)
	if err := <-done; err != nil {
		t.Fatalf("Wait() = %v; want nil", err)
	}
}

func TestWaitReturnsContextErrorPromptly(t *testing.T) {
	c := newFakeClock(t0)
	p := newPacer(c)
	p.Observe(pacer.Signal{RetryAfter: time.Hour, Throttled: true})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Wait(ctx) }()
	<-c.Started() // Wait is now blocked on the clock
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait() after cancel = %v; want context.Canceled", err)
	}
}

func TestWaitOnEndedContext(t *testing.T) {
	p := newPacer(newFakeClock(t0))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait(cancelled) = %v; want context.Canceled", err)
	}
}

func TestWaitFailsFastBeforeDeadline(t *testing.T) {
	now := time.Now()
	c := newFakeClock(now)
	p := newPacer(c)
	p.Observe(pacer.Signal{RetryAfter: time.Hour, Throttled: true})
	ctx, cancel := context.WithDeadline(context.Background(), now.Add(time.Minute))
	defer cancel()
	err := p.Wait(ctx)
	if !errors.Is(err, pacer.ErrWouldExceedDeadline) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait() with a deadline before the slot = %v; want ErrWouldExceedDeadline and DeadlineExceeded", err)
	}
	if len(c.Started()) != 0 {
		t.Fatalf("Wait() started a timer; want it to fail without waiting")
	}
}

func TestCancelledWaitGivesSlotBack(t *testing.T) {
	c := newFakeClock(t0)
	p := newPacer(c)
	p.Observe(state(100, 90))
	p.Reserve()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Wait(ctx) }()
	<-c.Started()
	cancel()
	<-done
	c2 := newFakeClock(t0)
	q := newPacer(c2)
	q.Observe(state(100, 90))
	q.Reserve()
	if got, want := p.Reserve(), q.Reserve(); got != want || want <= 0 {
		t.Fatalf("Reserve() after a cancelled Wait = %v; want %v, as if it had not happened", got, want)
	}
}

func TestBadSignalsNeverDenyAll(t *testing.T) {
	c := newFakeClock(t0)
	p := newPacer(c)
	for _, s := range []pacer.Signal{
		{Limit: -5, Used: -3, HasUsed: true, Remaining: -1, HasRemaining: true},
		{Limit: math.MaxInt64, Used: math.MaxInt64, HasUsed: true},
		{Window: -time.Hour, Reset: math.MinInt64, RetryAfter: -time.Second},
	} {
		p.Observe(s)
	}
	c.Advance(24 * time.Hour)
	d1, d2 := p.Reserve(), p.Reserve()
	if d1 < 0 || d2 < 0 || d2 > time.Minute {
		t.Fatalf("after nonsense signals and a day: Reserve() = %v, %v; want bounded, non-negative", d1, d2)
	}
}

func TestConcurrentCallersAreSpaced(t *testing.T) {
	c := newFakeClock(t0)
	p := newPacer(c)
	p.Observe(state(100, 90))
	var wg = make(chan time.Duration, 8)
	for i := 0; i < 8; i++ {
		go func() { wg <- p.Reserve() }()
	}
	seen := map[time.Duration]bool{}
	for i := 0; i < 8; i++ {
		d := <-wg
		if seen[d] {
			t.Fatalf("two concurrent callers got the same slot %v", d)
		}
		seen[d] = true
	}
}

func TestGroupKeepsOnePacerPerKey(t *testing.T) {
	g := pacer.MustNewGroup(pacer.WithClock(newFakeClock(t0)))
	a, b := g.Get("core"), g.Get("search")
	if a == b {
		t.Fatal(`Get("core") == Get("search"); want distinct pacers`)
	}
	if g.Get("core") != a {
		t.Fatal(`Get("core") twice gave different pacers`)
	}
	a.Observe(pacer.Signal{RetryAfter: time.Minute, Throttled: true})
	if d := b.Reserve(); d != 0 {
		t.Fatalf("a throttle on core delayed search by %v; want 0", d)
	}
	if g.Len() != 2 {
		t.Fatalf("Len() = %d; want 2", g.Len())
	}
}
