package pacer

import (
	"testing"
	"time"

	"github.com/ratepace/pace/internal/fakeclock"
)

// lateClient runs one client against a clockWindowModel of 30 calls in 3 s
// whose other clients fill every window rush after it begins, the first
// call of the client going at first. It returns the Pacer and the calls
// accepted in windows 20 to 59.
func lateClient(seed uint64, first, rush time.Duration) (*Pacer, int) {
	return amongFillers(seed, first, rush, 0, 20)
}

// amongFillers runs one client, its first call at first, against a
// clockWindowModel of 30 calls in 3 s whose other clients fill every
// window from window fillFrom on, rush after it begins, for 60 windows;
// each call is answered 10 ms after it goes. It returns the Pacer and the
// calls accepted from window countFrom on.
func amongFillers(seed uint64, first, rush time.Duration, fillFrom, countFrom int) (*Pacer, int) {
	const rtt = 10 * time.Millisecond
	const w = 3 * time.Second
	m := &clockWindowModel{limit: 30, window: w}
	c := fakeclock.New(ownT0)
	p := MustNew(WithClock(c), WithSeed(seed))
	accepted := 0
	for at := ownT0.Add(first); at.Before(ownT0.Add(60 * w)); {
		if !at.Before(ownT0.Add(time.Duration(fillFrom)*w)) && at.Sub(ownT0)%w >= rush {
			m.call(at)
			m.used = m.limit
		}
		s := m.call(at)
		if !s.Throttled && !at.Before(ownT0.Add(time.Duration(countFrom)*w)) {
			accepted++
		}
		c.Set(at.Add(rtt))
		p.Observe(s)
		at = at.Add(rtt + p.Reserve())
	}
	return p, accepted
}

// TestLateOnceAWindowClientLearnsFixed: a client of a 30-call fixed
// window of 3 s whose others fill every window 0.3 s after it begins, its
// first call at 2.4 s. Every count it saw was at the limit: it never saw
// the count drop at a turnover, never learned that the window was fixed,
// and called a window apart at the same late point, refused every time
// (none of eight seeds got in over windows 20 to 59; in the zoo, 16
// clients of 30/3 s, one to three such clients in most runs). Calling
// about once a window, its refusals at the limit, each with a Retry-After
// ending at the instant the reset names, a window apart, now show it the
// window's grid.
func TestLateOnceAWindowClientLearnsFixed(t *testing.T) {
	accepted := 0
	for seed := uint64(1); seed <= 8; seed++ {
		p, n := lateClient(seed, 2400*time.Millisecond, 300*time.Millisecond)
		if !p.fixedSure() {
			t.Errorf("seed %d: the window is not known to be fixed after 60 windows", seed)
		}
		accepted += n
	}
	if accepted < 6 {
		t.Errorf("over windows 20 to 59 and eight seeds, the client got in %d times; want at least 6", accepted)
	}
}

// TestTurnoverHoldIsNoRateWait: sixteen clients of a 30-call fixed window
// of 3 s, 24 runs. A client held by a full window until after its
// turnover counted that wait as one for its rate, which grew while it
// waited: 779 calls refused in windows 2 to 19 over the 24 runs; 704 now
// that the wait does not count (685 without the rule of
// TestTurnoverKeepsOthersOfWindowBefore, which costs these clients a few
// refusals).
func TestTurnoverHoldIsNoRateWait(t *testing.T) {
	refused := 0
	for seed := uint64(1); seed <= 24; seed++ {
		_, ref := crowdRun(&clockWindowModel{limit: 30, window: 3 * time.Second}, 3*time.Second, 20, 16, seed*100)
		for _, n := range ref[2:] {
			refused += n
		}
	}
	if refused > 740 {
		t.Errorf("%d calls refused in windows 2 to 19 over 24 runs; want at most 740", refused)
	}
}

// TestTurnoverKeepsOthersOfWindowBefore: four clients of a 30-call fixed
// window of 3 s start together (joinFixedWindow); all four are refused in
// the first window and held by a Retry-After in whole seconds, rounded up,
// which ends up to a second after the turnover. The first back read the
// count since the turnover, its own calls, as a quiet key, filled the
// window's hole alone and kept the larger share for windows: Jain's index
// over windows 1 to 4, averaged over 20 seeds, 0.959 (3 seeds below
// 0.95). The others' rate the window before showed now bounds the
// estimate the hole is shared by, for the window after the turnover:
// 0.983 (1 seed below 0.95).
func TestTurnoverKeepsOthersOfWindowBefore(t *testing.T) {
	var sum float64
	for seed := uint64(1); seed <= 96; seed += 5 {
		took := make([]float64, 4)
		for i, ws := range joinFixedWindow(seed)[:4] {
			for _, n := range ws[1*12 : 5*12] {
				took[i] += n
			}
		}
		sum += jain(took)
	}
	if mean := sum / 20; mean < 0.97 {
		t.Errorf("Jain's index over windows 1 to 4, averaged over 20 seeds, %.3f; want at least 0.97", mean)
	}
}
