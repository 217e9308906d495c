package pacer_test

import (
	"math"
	"testing"
	"time"

	"github.com/ratepace/pace/internal/fakeclock"
	"github.com/ratepace/pace/pacer"
)

// TestShortResetSetsWindow: a server that resets every 2 s (and says so
// only in X-RateLimit-Reset) is paced over 2 s, not over the default
// minute. Before, the default acted as a floor: the gap came out 30 times
// too long.
func TestShortResetSetsWindow(t *testing.T) {
	gapWith := func(reset time.Duration) time.Duration {
		c := newFakeClock(t0)
		p := newPacer(c)
		p.Observe(pacer.Signal{Limit: 100, Used: 80, HasUsed: true, Reset: reset})
		return gap(p)
	}
	short, def := gapWith(2*time.Second), gapWith(0)
	if ratio := float64(def) / float64(short); ratio < 29 || ratio > 31 {
		t.Fatalf("gap with a 2s reset = %v, with none = %v: ratio %.1f; want 30 (the window learned from the reset)", short, def, ratio)
	}
}

// TestLongestResetWins: a reset read late in a window underestimates it;
// the longest seen is the window.
func TestLongestResetWins(t *testing.T) {
	c := newFakeClock(t0)
	p := newPacer(c)
	p.Observe(pacer.Signal{Limit: 100, Used: 80, HasUsed: true, Reset: 3 * time.Second})
	p.Observe(pacer.Signal{Limit: 100, Used: 80, HasUsed: true, Reset: 500 * time.Millisecond})
	q := newPacer(newFakeClock(t0))
	q.Observe(pacer.Signal{Limit: 100, Used: 80, HasUsed: true, Reset: 3 * time.Second})
	if g, want := gap(p), gap(q); g != want {
		t.Fatalf("gap after resets 3s then 0.5s = %v; want %v, as after 3s alone", g, want)
	}
}

// TestPolicyWindowWinsOverResets: RateLimit-Policy "w" is the server's
// word; resets do not move it.
func TestPolicyWindowWinsOverResets(t *testing.T) {
	c := newFakeClock(t0)
	p := newPacer(c)
	p.Observe(pacer.Signal{Limit: 100, Used: 80, HasUsed: true, Window: 10 * time.Second, Reset: 2 * time.Second})
	p.Observe(pacer.Signal{Limit: 100, Used: 80, HasUsed: true, Reset: time.Minute})
	q := newPacer(newFakeClock(t0))
	q.Observe(pacer.Signal{Limit: 100, Used: 80, HasUsed: true, Window: 10 * time.Second})
	if g, want := gap(p), gap(q); g != want {
		t.Fatalf("gap with w=10 and later resets = %v; want %v (w=10 alone)", g, want)
	}
}

// TestNoBurstAfterFixedWindowTurnsOver: on a fixed window shared with
// others, the first response after the window turns over shows a small
// count. Before, the client subtracted its own calls of the previous window,
// took the key for idle and fired its burst.
func TestNoBurstAfterFixedWindowTurnsOver(t *testing.T) {
	c := newFakeClock(t0)
	p := newPacer(c)
	// A 3 s fixed window, limit 30, four clients: this one sees its share
	// of the count grow with the others' calls.
	used := int64(0)
	for i := 0; i < 12; i++ {
		d := p.Reserve()
		c.Advance(d + 200*time.Millisecond)
		used += 4
		p.Observe(pacer.Signal{Limit: 30, Remaining: 30 - min(used, 30), HasRemaining: true, Reset: t0.Add(3 * time.Second).Sub(c.Now())})
		if !c.Now().Before(t0.Add(2900 * time.Millisecond)) {
			break
		}
	}
	c.Set(t0.Add(3*time.Second + 50*time.Millisecond)) // the window turned over
	p.Reserve()
	c.Advance(20 * time.Millisecond)
	// The first response of the new window: this call and one other.
	p.Observe(pacer.Signal{Limit: 30, Remaining: 28, HasRemaining: true, Reset: t0.Add(6 * time.Second).Sub(c.Now())})
	if g := gap(p); g <= 0 {
		t.Fatalf("gap right after a shared fixed window turned over = %v; want pacing, not a burst", g)
	}
}

// TestResetToNextTokenIsNotAWindow: a token bucket whose reset names its
// next token (W/L away), written as a date rounded to the second, reads as
// a reset of a few milliseconds. Before, that was taken for the window:
// the one client that happened to read it believed in a window of
// milliseconds and took most of the limit from the others (J 0.27).
func TestResetToNextTokenIsNotAWindow(t *testing.T) {
	p := newPacer(newFakeClock(t0))
	p.Observe(pacer.Signal{Limit: 300, Used: 290, HasUsed: true, Reset: 40 * time.Millisecond})
	q := newPacer(newFakeClock(t0))
	q.Observe(pacer.Signal{Limit: 300, Used: 290, HasUsed: true})
	if g, want := gap(p), gap(q); g != want {
		t.Fatalf("gap after a 40ms reset = %v; want %v, as with no reset (the default window)", g, want)
	}
}

// TestFixedWindowTurnoverIsSpread: clients held by a full fixed window
// until it turns over each go at their own point after the turnover.
// Before, every client held there called at the turnover itself, and with
// 4 clients the window was full again before the others' calls showed
// (429 ratio 4.8%, J 0.82 on a 30/3s clock-aligned window).
func TestFixedWindowTurnoverIsSpread(t *testing.T) {
	held := func(seed uint64) time.Duration {
		c := newFakeClock(t0)
		p := newPacer(c, pacer.WithSeed(seed))
		// A 3 s fixed window: the first turnover is seen (count drop at
		// the named instant), then the next window fills up.
		p.Observe(pacer.Signal{Limit: 30, Remaining: 10, HasRemaining: true, Reset: 3 * time.Second})
		c.Set(t0.Add(3*time.Second + 20*time.Millisecond))
		p.Observe(pacer.Signal{Limit: 30, Remaining: 28, HasRemaining: true, Reset: 3*time.Second - 20*time.Millisecond})
		c.Set(t0.Add(5 * time.Second))
		p.Observe(pacer.Signal{Limit: 30, Remaining: 0, HasRemaining: true, Reset: time.Second})
		return p.Reserve()
	}
	a, b := held(1), held(2)
	if a < time.Second || b < time.Second {
		t.Fatalf("waits on a full fixed window 1s before it turns over = %v, %v; want at least 1s", a, b)
	}
	if a == b {
		t.Fatalf("two clients held until the turnover both wait %v; want each its own point after it", a)
	}
}

// TestRefusalsAloneTeachTheRate: a server that sends no count, only a
// Retry-After when it refuses (here 40 calls per 2 s window), tells a lone
// client how many calls its window takes: those accepted before the
// refusal, over the time until its Retry-After ends. The client then
// spreads about that many over the next window instead of calling back to
// back into the next refusal, one per window.
func TestRefusalsAloneTeachTheRate(t *testing.T) {
	c := newFakeClock(t0)
	p := newPacer(c)
	for i := 0; i < 40; i++ {
		if d := p.Reserve(); d != 0 {
			t.Fatalf("call %d before any refusal: Reserve() = %v; want 0 (nothing known)", i, d)
		}
		c.Advance(5 * time.Millisecond)
		p.Observe(pacer.Signal{})
	}
	p.Reserve()
	c.Advance(5 * time.Millisecond)
	// Refused 0.205 s into a window of 2 s: Retry-After until it ends.
	p.Observe(pacer.Signal{Throttled: true, RetryAfter: 2*time.Second - 205*time.Millisecond})
	next := t0.Add(2 * time.Second)
	if d := p.Reserve(); c.Now().Add(d).Before(next) {
		t.Fatalf("after Retry-After: Reserve() = %v; want no call before the window ends", d)
	}
	n := 1
	for ; n <= 1000; n++ {
		if d := p.Reserve(); !c.Now().Add(d).Before(next.Add(2 * time.Second)) {
			break
		}
	}
	if n > 40 || n < 34 {
		t.Fatalf("calls booked in the window after the refusal = %d; want 34..40 (about 0.95 of the 40 the window took)", n)
	}
}

// TestRefusedSlowClientReturnsAfterTurnover: a client of a clock-aligned
// fixed window of 10 s that calls about once a window, refused just
// before the window turns over, calls again within the window after the
// turnover, at a random point of its regular span (a limit of 5 is paced
// window by window, see sparse). A gap after the refused call (which spent
// nothing) would put it near the same late point of the next window,
// which fills before it, every window.
func TestRefusedSlowClientReturnsAfterTurnover(t *testing.T) {
	c := newFakeClock(t0)
	p := newPacer(c)
	// The window [0, 10 s) is full when this client first calls.
	turnOver10s(c, p, 5, 5, 2)
	call(c, p, t0.Add(19*time.Second), pacer.Signal{Limit: 5, Remaining: 0, HasRemaining: true, Reset: time.Second, RetryAfter: time.Second, Throttled: true})
	got := c.Now().Add(p.Reserve())
	turn := t0.Add(20 * time.Second)
	if got.Before(turn) || !got.Before(turn.Add(9*time.Second)) {
		t.Fatalf("refused 1 s before a 10 s window turns over: next call at %v; want within the regular span of the window after the turnover at 20s", got.Sub(t0))
	}
}

// TestSlotPastFullFixedWindowWaitsForTurnover: on a fixed window of 10 s
// that others fill at about 3 calls a second, a client that calls about
// once a second books its next call for a point of the window that the
// count will have filled before it: the call goes after the turnover
// instead, rather than into a refusal.
func TestSlotPastFullFixedWindowWaitsForTurnover(t *testing.T) {
	c := newFakeClock(t0)
	p := newPacer(c)
	turnOver10s(c, p, 30, 20, 2)
	call(c, p, t0.Add(18*time.Second), pacer.Signal{Limit: 30, Remaining: 3, HasRemaining: true, Reset: 2 * time.Second})
	if got := c.Now().Add(p.Reserve()); got.Before(t0.Add(20 * time.Second)) {
		t.Fatalf("next call on a window three calls from full, 2 s before it turns over = %v; want after the turnover at 20s", got.Sub(t0))
	}
}

// turnOver10s shows p a fixed window of 10 s: a count of used0 at 0.1 s,
// then a count of used1 at 10.1 s, after the window turned over at the
// instant named.
func turnOver10s(c *fakeclock.Clock, p *pacer.Pacer, limit, used0, used1 int64) {
	for i, used := range []int64{used0, used1} {
		at := t0.Add(time.Duration(i)*10*time.Second + 100*time.Millisecond)
		call(c, p, at, pacer.Signal{Limit: limit, Remaining: limit - used, HasRemaining: true, Reset: 9900 * time.Millisecond})
	}
}

// call has p make a call at at whose response says s.
func call(c *fakeclock.Clock, p *pacer.Pacer, at time.Time, s pacer.Signal) {
	c.Set(at)
	p.Reserve()
	p.Observe(s)
}

// TestRefusedBeforeItsFirstCallDoesNotBurstAgain: sixteen clients start
// together, 2 ms apart (a round trip is 5 ms), on a server that sends only
// a Retry-After. The first window fills within a few round trips: some
// clients get one call in, some none, before they are refused. Each
// refusal is a reading, so that none of them calls back to back into the
// next window, which would fill it before the others' first call there
// and get them all refused again: after the first window, the clients are
// refused less than three times a window between them (not all sixteen;
// the clients left with a floor grow back to their share, and overshoot
// it once or twice), and none takes more than a quarter of a window.
func TestRefusedBeforeItsFirstCallDoesNotBurstAgain(t *testing.T) {
	const clients, windows = 16, 10
	starts := make([]time.Time, clients)
	for i := range starts {
		starts[i] = t0.Add(time.Duration(i) * 2 * time.Millisecond)
	}
	took, refused := retryAfterOnly(starts, windows)
	later := 0
	for w := 1; w < windows; w++ {
		later += refused[w]
		for i, n := range took[w] {
			if n > retryOnlyLimit/4 {
				t.Errorf("client %d took %d calls of window %d; want at most a quarter of the %d (no burst)", i, n, w, retryOnlyLimit)
			}
		}
	}
	if later >= 3*(windows-1) {
		t.Errorf("refusals after the first window = %d over %d windows (%v); want fewer than three a window", later, windows-1, refused)
	}
}

// TestRetryAfterOnlyNewcomerGivesWay: four clients share a server that
// sends only a Retry-After, and a fifth joins as a window begins: its
// first calls go back to back and take most of that window, crowding the
// others out. At its next refusal its reading is contradicted and falls
// to about the headroom the others leave it, while the others, whose
// readings had held for windows, keep theirs: over the next eight
// windows the newcomer gets no more than 1.4 times the others' mean (the
// ratio at which Jain's index of five clients falls to 0.97), and no
// fewer than half.
func TestRetryAfterOnlyNewcomerGivesWay(t *testing.T) {
	const windows = 14
	starts := []time.Time{t0, t0.Add(2 * time.Millisecond), t0.Add(4 * time.Millisecond), t0.Add(6 * time.Millisecond),
		t0.Add(5 * retryOnlyWindow)}
	took, _ := retryAfterOnly(starts, windows)
	var newcomer, others float64
	for w := 6; w < windows; w++ {
		for i, n := range took[w] {
			if i == len(starts)-1 {
				newcomer += float64(n)
			} else {
				others += float64(n) / float64(len(starts)-1)
			}
		}
	}
	if newcomer > 1.4*others || newcomer < 0.5*others {
		t.Errorf("windows 6-13: the newcomer took %.0f calls, the others %.1f each (%v); want within [0.5, 1.4] times theirs", newcomer, others, took[6:])
	}
}

// retryOnlyLimit and retryOnlyWindow are the server of retryAfterOnly.
const (
	retryOnlyLimit  = 40
	retryOnlyWindow = 2 * time.Second
)

// retryAfterOnly runs one pacer per start time (each client calls from
// then on, one call at a time, with a round trip of 5 ms) against a
// server that sends nothing but a Retry-After: a fixed window of
// retryOnlyLimit calls per retryOnlyWindow on the clock from t0, refused
// calls counted, a refusal's Retry-After the whole seconds until the
// window ends, rounded up. It returns, per window, the calls each client
// got accepted, and the refusals.
func retryAfterOnly(starts []time.Time, windows int) (took [][]int, refused []int) {
	const rtt = 5 * time.Millisecond
	c := newFakeClock(t0)
	ps := make([]*pacer.Pacer, len(starts))
	send := append([]time.Time(nil), starts...) // each client's next call
	for i := range ps {
		ps[i] = pacer.MustNew(pacer.WithClock(c), pacer.WithSeed(uint64(i+1)))
	}
	count := make([]int, windows)
	refused = make([]int, windows)
	took = make([][]int, windows)
	for w := range took {
		took[w] = make([]int, len(starts))
	}
	end := t0.Add(time.Duration(windows) * retryOnlyWindow)
	for {
		i := 0
		for j := range send {
			if send[j].Before(send[i]) {
				i = j
			}
		}
		at := send[i]
		if !at.Before(end.Add(-rtt)) {
			return took, refused
		}
		arrive := at.Add(rtt / 2)
		w := int(arrive.Sub(t0) / retryOnlyWindow)
		count[w]++
		s := pacer.Signal{}
		if count[w] > retryOnlyLimit {
			left := t0.Add(time.Duration(w+1) * retryOnlyWindow).Sub(arrive)
			s = pacer.Signal{Throttled: true, RetryAfter: time.Duration(math.Ceil(left.Seconds())) * time.Second}
			refused[w]++
		} else {
			took[w][i]++
		}
		c.Set(at.Add(rtt))
		ps[i].Observe(s)
		send[i] = c.Now().Add(ps[i].Reserve())
	}
}

// TestRetryAfterOnlyStarvedClientGrowsBack: on a server that sends only a
// Retry-After, one client's first burst takes the whole first window and
// the three others, starting just after it filled, are refused before any
// call of theirs got in: they read one call per Retry-After, a floor (the
// window was full of another's calls), not their share. Each of them must
// grow back towards its share (10 calls of the 40) within a few windows:
// in the eighth window each takes at least half of it.
func TestRetryAfterOnlyStarvedClientGrowsBack(t *testing.T) {
	const windows = 8
	starts := []time.Time{t0, t0.Add(500 * time.Millisecond), t0.Add(502 * time.Millisecond), t0.Add(504 * time.Millisecond)}
	took, _ := retryAfterOnly(starts, windows)
	half := retryOnlyLimit / len(starts) / 2
	for i := 1; i < len(starts); i++ {
		if n := took[windows-1][i]; n < half {
			t.Errorf("window %d: starved client %d took %d calls (%v); want at least %d, half its share", windows-1, i, n, took, half)
		}
	}
}
