package pacer

import (
	"math"
	"testing"
	"time"

	"github.com/ratepace/pace/internal/fakeclock"
)

// fixedModel is a fixed-window counter aligned to the clock: at most
// limit calls from each multiple of window to the next, refused calls not
// counted, the reset the exact time to the window's end, and no
// Retry-After (as X-RateLimit-Reset in epoch milliseconds with none).
type fixedModel struct {
	limit  int64
	window time.Duration
	start  time.Time
	count  int64
}

func (m *fixedModel) call(now time.Time) Signal {
	if start := now.Truncate(m.window); !start.Equal(m.start) {
		m.start, m.count = start, 0
	}
	s := Signal{Limit: m.limit, HasRemaining: true, Reset: m.start.Add(m.window).Sub(now)}
	if m.count < m.limit {
		m.count++
	} else {
		s.Throttled = true
	}
	s.Remaining = m.limit - m.count
	return s
}

// fixedRun is what clients clients of a fixed window of limit calls a
// 10 s window got, window by window, over windows windows: accepted[w][i]
// and refused[w].
type fixedRun struct {
	accepted [][]int
	refused  []int
}

// sum returns the calls accepted and refused in windows [from, to), and
// the calls accepted per client.
func (r fixedRun) sum(from, to int) (accepted, refused int, per []float64) {
	per = make([]float64, len(r.accepted[0]))
	for w := from; w < to; w++ {
		refused += r.refused[w]
		for i, n := range r.accepted[w] {
			accepted += n
			per[i] += float64(n)
		}
	}
	return accepted, refused, per
}

// runFixed runs clients Pacers against a fixedModel, each Pacer on a clock
// of its own set to the time of each of its events, with round trips of a
// millisecond (the server decides at half of it). They start within the
// first 60th of a window.
func runFixed(clients int, limit int64, windows int) fixedRun {
	const window = 10 * time.Second
	const rtt = time.Millisecond
	m := &fixedModel{limit: limit, window: window}
	type client struct {
		c    *fakeclock.Clock
		p    *Pacer
		send time.Time // the next call's time; zero while one is in flight
		resp time.Time // the response's time, while one is in flight
		sig  Signal
	}
	cs := make([]*client, clients)
	for i := range cs {
		c := fakeclock.New(ownT0)
		cs[i] = &client{c: c, p: MustNew(WithClock(c), WithSeed(uint64(i+1))),
			send: ownT0.Add(time.Duration(i) * window / 60 / time.Duration(clients))}
	}
	end := ownT0.Add(time.Duration(windows) * window)
	r := fixedRun{accepted: make([][]int, windows), refused: make([]int, windows)}
	for w := range r.accepted {
		r.accepted[w] = make([]int, clients)
	}
	for {
		// The earliest event: a call going, or a response coming.
		var next *client
		var at time.Time
		for _, cl := range cs {
			t := cl.send
			if t.IsZero() {
				t = cl.resp
			}
			if next == nil || t.Before(at) {
				next, at = cl, t
			}
		}
		if !at.Before(end) {
			return r
		}
		next.c.Set(at)
		if !next.send.IsZero() {
			next.sig = m.call(at.Add(rtt / 2))
			w := int(at.Sub(ownT0) / window)
			if next.sig.Throttled {
				r.refused[w]++
			} else {
				for i, cl := range cs {
					if cl == next {
						r.accepted[w][i]++
					}
				}
			}
			next.send, next.resp = time.Time{}, at.Add(rtt)
			next.sig.Reset -= rtt / 2
			continue
		}
		next.p.Observe(next.sig)
		next.send = at.Add(next.p.Reserve())
	}
}

// TestSmallFixedWindowTakesTurns: four clients of a fixed window of 5
// calls a 10 s window, refused calls not counted, no Retry-After. Each
// makes one regular call a window at a random point, and the one whose
// call the count shows first takes the fifth call at the end of the
// window, after every regular call: once the first two windows have
// shown the window fixed, nothing is refused, the window is used, and the
// shares are even. Before,
// the clients paced by rate and whoever came after the window had filled
// was refused (9% of calls, Jain's index 0.63 in the zoo).
func TestSmallFixedWindowTakesTurns(t *testing.T) {
	const windows = 20
	r := runFixed(4, 5, windows)
	accepted, refused, per := r.sum(2, windows)
	if refused > 0 {
		t.Errorf("refused after the first two windows: %d of %d calls (per window %v); want none", refused, accepted+refused, r.refused)
	}
	if u := float64(accepted) / (5 * (windows - 2)); u < 0.9 {
		t.Errorf("utilisation after the first two windows = %.2f; want 0.9 or more", u)
	}
	if j := jain(per); j < 0.95 {
		t.Errorf("accepted calls per client = %v: Jain's index %.3f; want 0.95 or more", per, j)
	}
}

// TestSmallFixedWindowManyClientsShare: sixteen clients of a fixed window
// of 5 calls a 10 s window, no Retry-After. Each calls in a share of the
// windows, set from the count at its calls so that the regular calls of a
// window come to about the limit: after the first windows, most calls are
// accepted and every client gets in. Before, every client called every
// window and most calls were refused (46% over the run; Jain's index
// 0.15).
func TestSmallFixedWindowManyClientsShare(t *testing.T) {
	const windows = 30
	r := runFixed(16, 5, windows)
	accepted, refused, per := r.sum(10, windows)
	if ratio := float64(refused) / float64(accepted+refused); ratio > 0.25 {
		t.Errorf("429 ratio over windows 10-29 = %.2f (%d of %d); want 0.25 at most", ratio, refused, accepted+refused)
	}
	if u := float64(accepted) / (5 * (windows - 10)); u < 0.8 {
		t.Errorf("utilisation over windows 10-29 = %.2f; want 0.8 or more", u)
	}
	for i, n := range per {
		if n < 1 {
			t.Errorf("client %d got no call in windows 10-29 (per client %v)", i, per)
		}
	}
}

// TestSmallFixedWindowLoneClientUsesIt: a lone client of the same window
// takes the whole limit: its regular call is counted first, and no other
// client's calls were ever seen.
func TestSmallFixedWindowLoneClientUsesIt(t *testing.T) {
	r := runFixed(1, 5, 10)
	for w := 2; w < 10; w++ {
		if r.accepted[w][0] != 5 || r.refused[w] != 0 {
			t.Fatalf("window %d: %d accepted, %d refused; want 5 and none (per window %v, %v)", w, r.accepted[w][0], r.refused[w], r.accepted, r.refused)
		}
	}
}

func jain(xs []float64) float64 {
	var s, s2 float64
	for _, x := range xs {
		s += x
		s2 += x * x
	}
	return s * s / (float64(len(xs)) * s2)
}

// TestRefusalWithoutRetryAfterWaitsForReset: a refusal that carries no
// Retry-After (nor a count) but a reset says when calls go again: the next
// call waits for it, and goes at a random point of the window after it,
// not W/60 later into the same full window.
func TestRefusalWithoutRetryAfterWaitsForReset(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		c := fakeclock.New(ownT0)
		p := MustNew(WithClock(c), WithSeed(seed))
		p.Observe(Signal{Limit: 100, Remaining: 40, HasRemaining: true, Reset: 20 * time.Second})
		c.Advance(time.Second)
		p.Reserve()
		p.Observe(Signal{Reset: 4 * time.Second, Throttled: true})
		if d := p.Reserve(); d < 4*time.Second || d >= 24*time.Second {
			t.Errorf("seed %d: refused with reset 4 s and no Retry-After, window 20 s: next call in %v; want within [4s, 24s)", seed, d)
		}
		if p.window != 20*time.Second {
			t.Errorf("seed %d: window after the refusal = %v; want the 20 s the reset read (a wait for the reset is no misreading)", seed, p.window)
		}
	}
}

// TestSmallLimitFirstTakesTheRest: on a limit of 5 whose window is not
// known to be fixed yet, a client whose count shows its calls alone (it
// may be alone, or the first of several) takes the rest of the window as
// the client counted first does once the window is known: in its last
// tenth, one call at a time, once the others' first calls are in. Not at
// its first count, though: a client that joins a busy key as its window
// turns over is counted alone before anybody else could call, and took
// the rest of a window the others were about to fill, to be refused at
// its end (5/10 s, N=4 with a newcomer: 429 ratio 4.95% before, with the
// other rules of the reservation). Its first count alone, it calls next
// at a random point of the next window; a count alone there takes the
// rest. On a limit of 100, nothing changes (the idle-key burst).
func TestSmallLimitFirstTakesTheRest(t *testing.T) {
	// The first call is counted 1 ms in, the window ends 9 s later.
	if d := afterFirstCall(5, 1); d < 9*time.Second || d >= 18*time.Second {
		t.Fatalf("after a first call counted alone on a limit of 5, reset 9 s: next call in %v; want in the next window, [9s, 18s)", d)
	}
	if d := afterFirstCall(100, 1); d != 0 {
		t.Fatalf("after a first call counted alone on a limit of 100: Reserve() = %v; want the burst", d)
	}
	// The second call, 2 s into the next window of 10 s, is counted alone
	// too: the rest of that window, in its last tenth.
	c := fakeclock.New(ownT0)
	p := MustNew(WithClock(c), WithSeed(1))
	p.Reserve()
	c.Advance(time.Millisecond)
	p.Observe(Signal{Limit: 5, Remaining: 4, HasRemaining: true, Reset: 9 * time.Second})
	c.Set(ownT0.Add(11 * time.Second))
	p.Reserve()
	c.Advance(time.Millisecond)
	p.Observe(Signal{Limit: 5, Remaining: 4, HasRemaining: true, Reset: 8*time.Second - time.Millisecond})
	if d := p.Reserve(); d < 6900*time.Millisecond || d >= 8*time.Second {
		t.Fatalf("a second call counted alone, 8 s before the reset: next call in %v; want in the last tenth of the window, [6.9s, 8s)", d)
	}
}

// afterFirstCall returns how long a fresh Pacer waits for its second call
// when its first is counted used of limit, with a reset of 9 s.
func afterFirstCall(limit, used int64) time.Duration {
	c := fakeclock.New(ownT0)
	p := MustNew(WithClock(c), WithSeed(1))
	p.Reserve()
	c.Advance(time.Millisecond)
	p.Observe(Signal{Limit: limit, Remaining: limit - used, HasRemaining: true, Reset: 9 * time.Second})
	return p.Reserve()
}

// TestSmallLimitOthersSeenWaitForReset: on a limit of 5 whose window is
// not known to be fixed yet, a count that shows two other clients' calls
// right after this client's first: the others may have filled the window,
// and a call before the instant the reset names is likely refused. The
// next call goes after it, at a random point of the next window.
func TestSmallLimitOthersSeenWaitForReset(t *testing.T) {
	if d := afterFirstCall(5, 3); d < 9*time.Second || d > 19*time.Second {
		t.Fatalf("count 3 of 5, two of them others', reset 9 s: next call in %v; want after the reset, within the next window", d)
	}
}

// TestSmallFixedWindowRecognisedByAnyDrop: on a limit of 5, counts of 3
// and then 2 after the instant the server named moved on by exactly the
// 10 s window: the window turned over, though the count did not halve.
func TestSmallFixedWindowRecognisedByAnyDrop(t *testing.T) {
	c := fakeclock.New(ownT0)
	p := MustNew(WithClock(c), WithSeed(1))
	for _, step := range []struct {
		at   time.Duration
		used int64
	}{{4 * time.Second, 2}, {5 * time.Second, 3}, {16 * time.Second, 2}} {
		c.Set(ownT0.Add(step.at))
		p.Reserve()
		end := c.Now().Truncate(10 * time.Second).Add(10 * time.Second)
		p.Observe(Signal{Limit: 5, Remaining: 5 - step.used, HasRemaining: true, Reset: end.Sub(c.Now())})
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.lw.fixed || p.lw.period < 9*time.Second || p.lw.period > 11*time.Second {
		t.Fatalf("counts 2, 3 then 2 across a turnover of a 10 s window: fixed %v, period %v; want fixed, 10s", p.lw.fixed, p.lw.period)
	}
}

// TestSmallFixedWindowRecognisedFromRefusals: a client refused at the
// limit of 5 in two windows, each time after the window had filled, so
// that it never saw the count drop, by resets naming instants exactly a
// window apart: the ends of a fixed window. The late start is a client
// whose first call came 300 ms into its window, so that the longest reset
// it read (9.7 s) falls short of the window by that much: refusals at
// instants exactly 10 s apart are still the ends of a fixed window.
// Before, the spacing had to be within a tenth of instantSlack of the
// longest reading: clients that start a 60th of a window apart read
// 9.86 s of a 10 s window, and a client refused in every window never
// recognised it (5/10 s, N=16: three of sixteen clients kept calling at
// the end of full windows, refused every time).
func TestSmallFixedWindowRecognisedFromRefusals(t *testing.T) {
	for _, first := range []time.Duration{100 * time.Millisecond, 300 * time.Millisecond} {
		c := fakeclock.New(ownT0)
		p := MustNew(WithClock(c), WithSeed(1))
		for _, at := range []time.Duration{first, 6 * time.Second, 17 * time.Second} {
			c.Set(ownT0.Add(at))
			p.Reserve()
			end := c.Now().Truncate(10 * time.Second).Add(10 * time.Second)
			p.Observe(Signal{Limit: 5, Remaining: 0, HasRemaining: true, Reset: end.Sub(c.Now()), Throttled: at > time.Second})
		}
		p.mu.Lock()
		fixed, period := p.lw.fixed, p.lw.period
		p.mu.Unlock()
		if !fixed || math.Abs(period.Seconds()-10) > 0.5 {
			t.Errorf("first call %v into the window, then refused at the limit by instants 10 s apart: fixed %v, period %v; want fixed, 10s", first, fixed, period)
		}
	}
}

// TestSmallFixedWindowReservesWindows: more clients than the limit of a
// fixed window of 5 calls a 10 s window, no Retry-After. Each holds one
// window in a period (a power of two) and keeps it while its calls there
// are accepted; a refused client moves to another window of its period,
// and one refused about as often as it calls doubles it. The windows'
// regular calls then stay where they fit: over windows 10-29, 8.7% of
// sixteen clients' calls are refused and 2% of eight's. Before, each
// client chose its windows by a credit of q a window, its windows
// drifting against the others' as the shares moved, and as many were
// refused as when they choose at random (24% and 12%).
func TestSmallFixedWindowReservesWindows(t *testing.T) {
	for _, c := range []struct {
		clients int
		most    float64
	}{{16, 0.15}, {8, 0.06}} {
		r := runFixed(c.clients, 5, 30)
		accepted, refused, _ := r.sum(10, 30)
		if ratio := float64(refused) / float64(accepted+refused); ratio > c.most {
			t.Errorf("%d clients: 429 ratio over windows 10-29 = %.3f (%d of %d, per window %v); want %.2f at most", c.clients, ratio, refused, accepted+refused, r.refused, c.most)
		}
	}
}

// TestSmallFixedWindowAsManyAsTheLimit: five clients of a fixed window of
// 5 calls. The regular calls fill every window, and the client counted
// first must take no extra call: it knows the others from the counts of
// windows where it was not first. Taken for alone because no count had
// shown it others for two windows (it had been first in both), it took
// the extra call and was refused: 6 refusals over windows 10-29, 2 now.
func TestSmallFixedWindowAsManyAsTheLimit(t *testing.T) {
	r := runFixed(5, 5, 30)
	accepted, refused, _ := r.sum(10, 30)
	if refused > 3 {
		t.Errorf("refused over windows 10-29: %d of %d (per window %v); want 3 at most", refused, accepted+refused, r.refused)
	}
}

// TestSmallFixedWindowFirstCountSetsPeriod: a client refused before the
// plan (one call accepted of three: a period of 2) whose first count in
// the plan, a third of the way into the regular span, shows the limit of
// 5 reached, four of them others': about 13 regular calls a window, a
// period of 3 rounded up to 4. The share of its calls the server took
// before the plan counts the burst of the first window, in which every
// client called at once, and says little of how many clients there are.
func TestSmallFixedWindowFirstCountSetsPeriod(t *testing.T) {
	c := fakeclock.New(ownT0)
	p := MustNew(WithClock(c), WithSeed(1))
	p.mu.Lock()
	defer p.mu.Unlock()
	p.window, p.limit = 10*time.Second, 5
	p.lw.fixed, p.lw.period, p.lw.instant = true, 10*time.Second, ownT0.Add(10*time.Second)
	p.sp.accepted, p.sp.refused = 0, 1
	if !p.sparseOn() || p.sp.period != 2 {
		t.Fatalf("plan on %v, period %d; want on, 2 (one call in two accepted)", p.sp.on, p.sp.period)
	}
	now := ownT0.Add(3 * time.Second)
	c.Set(now)
	p.sparseObserve(now, Signal{Limit: 5, Remaining: 0, HasRemaining: true, Reset: 7 * time.Second})
	if p.sp.period != 4 {
		t.Fatalf("first count of the plan 5 of 5, a third of the regular span in: period %d; want 4", p.sp.period)
	}
}

// TestSparseFirstConcurrentOneAWindow: a lone client of a 5-per-10 s fixed
// window (resets exact, no Retry-After) that has called a few times, then
// has twenty callers book at once (concurrent Reserve calls). sparseFirst
// handed each a random point of the next window's regular span,
// independently, past the barrier and the gap (slotLocked uses its slot
// as it is): twenty calls in windows of five, fifteen refused. Now they go
// one a window.
func TestSparseFirstConcurrentOneAWindow(t *testing.T) {
	c := fakeclock.New(ownT0)
	p := MustNew(WithClock(c), WithSeed(1))
	m := &fixedModel{limit: 5, window: 10 * time.Second}
	for i := 0; i < 3; i++ {
		c.Advance(p.Reserve())
		p.Observe(m.call(c.Now()))
		c.Advance(100 * time.Millisecond)
	}
	perWindow := map[time.Time]int{}
	var ds []time.Duration
	for i := 0; i < 20; i++ {
		d := p.Reserve()
		ds = append(ds, d)
		perWindow[c.Now().Add(d).Truncate(10*time.Second)]++
	}
	for w, n := range perWindow {
		if n > 5 {
			t.Errorf("%d of 20 calls booked at once fall in the fixed window from %v, of 5 calls: %v", n, w.Sub(ownT0), ds)
		}
	}
}
