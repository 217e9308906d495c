// Package pacer paces calls to a remote API whose rate limit the caller
// shares with other processes and learns only from response headers.
//
// A Pacer holds one client's view of one limit. Wait blocks until the next
// call may go; Observe feeds it what the response said (a Signal, which
// ParseHeader and FromResponse build from RateLimit, X-RateLimit-* and
// Retry-After headers). Transport does both around an http.RoundTripper,
// and Group keeps one Pacer per key for APIs with several limits.
package pacer

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"time"
)

// ErrWouldExceedDeadline is returned by Wait when the context's deadline
// comes before the wait would end. The returned error also matches
// context.DeadlineExceeded under errors.Is.
var ErrWouldExceedDeadline = errors.New("pacer: wait would exceed context deadline")

// Pacer decides when one client may make its next call to a rate-limited
// API, so that all the clients sharing the limit together use a target
// fraction of it, share it equally, and are rarely refused.
//
// The algorithm has four parts, every period in them measured in windows
// so that the same defaults work for a 3-second window and an hourly one:
//
//   - A proportional barrier. With L the limit, U the calls the server
//     counted in its window (everyone's, predicted forward by this
//     client's calls still in flight) and W the window, the gap between two
//     calls is W / (g × (L − U)). The closer the shared count is to the
//     limit, the slower every client goes, and the brake acts on the next
//     call, not a window later.
//   - An AIMD gain g, updated once per control period (W/60) rather than per
//     response: it grows additively while the predicted utilisation U/L is
//     below the target and the client is actually waiting on the pacer, and
//     shrinks multiplicatively while it is above. The barrier alone settles
//     at U/L = G/(1+G) for G the sum of the clients' gains, so a share that
//     depends on the number of clients; the AIMD loop moves G until U/L sits
//     at the target whatever that number, and, because every client sees
//     the same shared count, additive increase with multiplicative
//     decrease equalises the gains and so the shares (Chiu and Jain). A
//     client that is not using its allowance does not grow its gain.
//   - Bounded sleeps. No single gap exceeds the maximum delay (W/8 by
//     default), so one stale or noisy sample cannot park a client for a
//     window.
//   - Retry-After always wins: no call goes before it has elapsed. After a
//     refusal the gain is cut and the client resumes at a random point
//     within about one of its fair gaps, so that clients refused together do
//     not return together.
//
// On an idle key (a predicted count below a quarter of the target, or no
// information at all) calls go without delay: the initial burst.
//
// The limit and window come from the signals when they carry them; until
// then the window is the one given by WithWindow. A server that sends no
// rate-limit headers at all gets no pacing beyond its Retry-After.
//
// New is required; the zero Pacer is not usable. Most callers want Wait
// before each call and Observe after it, or Transport, which does both.
// A Pacer is safe for concurrent use by multiple goroutines; concurrent
// callers are spaced one gap apart.
type Pacer struct {
	mu    sync.Mutex
	clock Clock
	cfg   config
	rng   *rand.Rand

	latest time.Time // the latest clock reading, against time going backwards

	limit     float64       // L; zero while unknown
	window    time.Duration // W
	winSet    bool          // whether a signal gave the window (w=)
	used      float64       // U at obsAt
	hasUsed   bool
	obsAt     time.Time
	remaining float64   // quota fallback when the limit is unknown
	resetAt   time.Time // end of the quota fallback; zero when unused

	ctlAt       time.Time // start of the current control period
	waitedUntil time.Time // the latest slot for which a caller had to wait

	last    time.Time   // the latest slot handed out
	hold    time.Time   // no slot before this (Retry-After, plus jitter)
	pending []time.Time // slots handed out and not yet observed
	own     []time.Time // this client's accepted calls within the window
	strikes int         // consecutive refusals without Retry-After
	gain    float64     // g
}

// New returns a Pacer configured by opts. Options with invalid values
// (NaN, infinities, out of range) are ignored and the documented default
// is used instead.
func New(opts ...Option) *Pacer {
	cfg := defaults()
	for _, o := range opts {
		o(&cfg)
	}
	seed := cfg.seed
	if !cfg.seeded {
		seed = rand.Uint64()
	}
	return &Pacer{
		clock:  cfg.clock,
		cfg:    cfg,
		rng:    rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		window: cfg.window,
		gain:   cfg.initialGain,
	}
}

// Wait blocks until the next call may go, and books that slot. It returns
// nil when the caller may proceed, ctx.Err() as soon as the context ends
// (the slot is then given back if nobody booked after it), and an error
// matching ErrWouldExceedDeadline and context.DeadlineExceeded, without
// waiting, when the context's deadline comes before the slot.
func (p *Pacer) Wait(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p.mu.Lock()
	now := p.nowLocked()
	slot := p.slotLocked(now)
	if dl, ok := ctx.Deadline(); ok && slot.After(now) && dl.Before(slot) {
		p.mu.Unlock()
		return errors.Join(ErrWouldExceedDeadline, context.DeadlineExceeded)
	}
	prev := p.bookLocked(now, slot)
	p.mu.Unlock()

	d := slot.Sub(now)
	if d <= 0 {
		return nil
	}
	c, stop := p.clock.After(d)
	defer stop()
	select {
	case <-c:
		return nil
	case <-ctx.Done():
		p.mu.Lock()
		p.unbookLocked(slot, prev)
		p.mu.Unlock()
		return ctx.Err()
	}
}

// Reserve books the next call and returns how long the caller must wait
// before making it (zero to go now). It never blocks; it is Wait for
// callers that schedule their own work, such as simulations. The slot
// cannot be given back.
func (p *Pacer) Reserve() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.nowLocked()
	slot := p.slotLocked(now)
	p.bookLocked(now, slot)
	return slot.Sub(now)
}

// Observe feeds the Pacer what a response said. Call it once per completed
// call, after Wait or Reserve; absent fields change nothing, invalid ones
// (negative, absurdly large) are ignored or clamped, and a Retry-After is
// honoured whatever else the signal says.
func (p *Pacer) Observe(s Signal) {
	s = s.clean()
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.nowLocked()
	p.control(now)
	p.prune(now)
	if len(p.pending) > 0 {
		p.pending = p.pending[1:]
	}
	if s.Window > 0 {
		p.window, p.winSet = s.Window, true
	} else if s.Reset > p.window && !p.winSet {
		// A fixed window's reset never exceeds the window: the longest
		// reset seen is the best estimate of it.
		p.window = s.Reset
	}
	if s.Limit > 0 {
		p.limit = float64(s.Limit)
	}
	switch {
	case s.HasUsed:
		p.used, p.hasUsed, p.obsAt = float64(s.Used), true, now
	case s.HasRemaining && p.limit > 0:
		p.used, p.hasUsed, p.obsAt = math.Max(0, p.limit-float64(s.Remaining)), true, now
	}
	if s.HasRemaining && s.Reset > 0 {
		p.remaining, p.resetAt = float64(s.Remaining), now.Add(s.Reset)
	}
	if !s.Throttled {
		p.strikes = 0
		if s.HasUsed || s.HasRemaining || s.Limit > 0 {
			p.own = append(p.own, now)
		}
		if s.RetryAfter > 0 {
			p.holdUntil(now.Add(s.RetryAfter), now)
		}
		return
	}
	// Refused: cut the gain, and wait at least Retry-After; without one,
	// back off exponentially from W/60, bounded by the maximum delay.
	p.gain = math.Max(p.cfg.minGain, p.gain*p.cfg.throttleCut)
	wait := s.RetryAfter
	if wait <= 0 {
		wait = p.window / 60 << min(p.strikes, 10)
		if m := p.maxDelay(); wait > m {
			wait = m
		}
		p.strikes++
	}
	p.holdUntil(now.Add(wait), now)
}

// holdUntil forbids slots before t, plus a random part of this client's
// fair gap so that clients refused together spread out. It must be called
// with p.mu held.
func (p *Pacer) holdUntil(t, now time.Time) {
	jitter := time.Duration(p.rng.Float64() * float64(p.fairGap(now)))
	if t = t.Add(jitter); t.After(p.hold) {
		p.hold = t
	}
}

// fairGap estimates the gap this client would keep at its current share
// of the target: W / (share × target × L), bounded by the maximum delay.
// It must be called with p.mu held.
func (p *Pacer) fairGap(now time.Time) time.Duration {
	if p.limit <= 0 {
		return p.window / 60
	}
	share := 1.0
	if p.hasUsed && p.used > 0 {
		share = float64(len(p.own)) / p.used
	}
	share = math.Min(1, math.Max(share, 1.0/64))
	g := time.Duration(float64(p.window) / (share * p.cfg.target * p.limit))
	return min(g, p.maxDelay())
}

// nowLocked reads the clock once and never lets it move backwards.
func (p *Pacer) nowLocked() time.Time {
	now := p.clock.Now()
	if now.Before(p.latest) {
		return p.latest
	}
	p.latest = now
	return now
}

// maxDelay is the longest single gap the pacer imposes on its own
// account (Retry-After may ask for more).
func (p *Pacer) maxDelay() time.Duration {
	return time.Duration(float64(p.window) * p.cfg.maxDelay)
}

// slotLocked returns the earliest time the next call may go.
func (p *Pacer) slotLocked(now time.Time) time.Time {
	p.control(now)
	p.prune(now)
	slot := p.last.Add(p.gap(now))
	if slot.Before(now) {
		slot = now
	}
	if slot.Before(p.hold) {
		slot = p.hold
	}
	return slot
}

// bookLocked hands out slot and returns the previous latest slot, for
// unbookLocked.
func (p *Pacer) bookLocked(now, slot time.Time) time.Time {
	prev := p.last
	p.last = slot
	if slot.After(now) {
		p.waitedUntil = slot
	}
	p.pending = append(p.pending, slot)
	return prev
}

// unbookLocked gives back slot if it is still the latest one handed out.
func (p *Pacer) unbookLocked(slot, prev time.Time) {
	if !p.last.Equal(slot) {
		return
	}
	p.last = prev
	if n := len(p.pending); n > 0 && p.pending[n-1].Equal(slot) {
		p.pending = p.pending[:n-1]
	}
}

// prune forgets calls older than the window, and calls in flight for so
// long (a quarter window) that their response will never be observed.
func (p *Pacer) prune(now time.Time) {
	cut := now.Add(-p.window)
	i := 0
	for i < len(p.own) && !p.own[i].After(cut) {
		i++
	}
	p.own = p.own[i:]
	lost := now.Add(-p.window / 4)
	i = 0
	for i < len(p.pending) && p.pending[i].Before(lost) {
		i++
	}
	p.pending = p.pending[i:]
}

// predictedUsed is the shared count the server would report at t: the
// last report plus this client's calls since, or nothing once the report
// is a window old (everything it counted has expired).
func (p *Pacer) predictedUsed(t time.Time) (float64, bool) {
	if !p.hasUsed {
		return 0, false
	}
	age := t.Sub(p.obsAt)
	if age >= p.window {
		return 0, true
	}
	inflight := 0
	for _, s := range p.pending {
		if !s.After(t) {
			inflight++
		}
	}
	return p.used + float64(inflight), true
}

// gap is the interval the barrier imposes between two calls at now.
func (p *Pacer) gap(now time.Time) time.Duration {
	if p.limit <= 0 {
		// Only the draft's "r calls within t" may be known: spread them.
		if p.resetAt.After(now) {
			left := p.remaining - float64(len(p.pending))
			d := time.Duration(float64(p.resetAt.Sub(now)) / math.Max(1, left))
			return min(d, p.maxDelay())
		}
		return 0
	}
	u, ok := p.predictedUsed(now)
	if !ok || u < p.cfg.burst*p.cfg.target*p.limit {
		return 0
	}
	head := p.limit - u
	if head <= 0 {
		return p.maxDelay()
	}
	return min(time.Duration(float64(p.window)/(p.gain*head)), p.maxDelay())
}

// control runs the AIMD update for every control period (W/60) that ended
// by now. It must be called with p.mu held.
func (p *Pacer) control(now time.Time) {
	period := p.window / 60
	if period <= 0 {
		period = 1
	}
	if p.ctlAt.IsZero() || now.Sub(p.ctlAt) > 2*p.window {
		p.ctlAt = now
		return
	}
	up := p.cfg.increase / 60
	down := math.Exp(-p.cfg.decrease / 60)
	for !now.Before(p.ctlAt.Add(period)) {
		end := p.ctlAt.Add(period)
		if u, ok := p.predictedUsed(end); ok && p.limit > 0 && end.Sub(p.obsAt) < p.window {
			r := u / p.limit
			switch {
			case r > 1:
				// Above the limit itself: the limit moved, not the
				// clients. The barrier already stops everyone; the gain
				// keeps what it learned.
			case r > p.cfg.target:
				p.gain = math.Max(p.cfg.minGain, p.gain*down)
			case !p.waitedUntil.Before(p.ctlAt):
				p.gain = math.Min(p.cfg.maxGain, p.gain+up)
			}
		}
		p.ctlAt = end
	}
}

// now reads the clock for callers outside the lock (the transport turns
// dates into durations with it).
func (p *Pacer) now() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.nowLocked()
}
