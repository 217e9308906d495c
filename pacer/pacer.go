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
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/ratepace/pace"
)

// ErrWouldExceedDeadline is returned by Wait when the context's deadline
// comes before the wait would end. The returned error also matches
// context.DeadlineExceeded under errors.Is.
var ErrWouldExceedDeadline = errors.New("pacer: wait would exceed context deadline")

// Tuning that is not worth an option; each is in windows or fractions of
// the limit, so it holds for any window.
const (
	// periods is the number of control periods per window: the AIMD
	// update runs every W/periods.
	periods = 60
	// shareGrowth is how fast, below the target, the rate grows in
	// proportion to the client's share of the total: a fraction of the
	// gap to the target per window, the same for the total whatever the
	// number of clients.
	shareGrowth = 1.5
	// catchup is how many windows a hole below the target takes to fill.
	catchup = 0.5
	// lookahead is how far ahead, in windows, the hole below the target
	// counts the calls that will leave the window: a client plans
	// against the headroom the window will have, not the one it has, so
	// the calls expiring soon are replaced as they go rather than after
	// the count has dropped.
	lookahead = 0.1
	// newcomerShare is the share of the current count a client arriving
	// on a busy key starts with: a fair share among a handful of clients.
	newcomerShare = 0.25
	// throttleCut multiplies the rate after a refusal.
	throttleCut = 0.7
	// smoothing is the time constant, in windows, of the estimate of the
	// other clients' rate.
	smoothing = 1.0 / 12
	// weightedAhead: on a limit of tokens, the others' calls are counted
	// on from the latest report for W/weightedAhead at most.
	weightedAhead = 4
	// tokenWait is the longest the barrier waits, in windows, on a server
	// whose resets are all short (see shortResets): two time constants of
	// the estimate of the others (smoothing), by when the counts since
	// have renewed most of the estimate the wait rests on.
	tokenWait = 2 * smoothing
	// settle is how long, in windows, after a fixed window's turnover a
	// client that calls less than sparseCalls times a window takes to
	// grow its rate at the full step (see settled).
	settle = 0.25
	// sparseCalls: a client that calls fewer times a window than this
	// gets too few counts to correct its estimate of the others within a
	// fixed window (twice per time constant of the estimate, smoothing).
	sparseCalls = 24
	// skipBelow: a sample of the others' arrivals below −skipBelow times
	// the expected number is taken for a reconstruction error and skipped.
	skipBelow = 0.25
	// joinShare: a newcomer that holds more than this share of the
	// count in its first window, while others call too, is held to a
	// newcomer's share (see settleJoin).
	joinShare = 0.4
	// fairPenalty inflates the projected utilisation a client compares
	// with the target by fairPenalty·√(s(1−s)) for a client with share s
	// of the total: a client with more than the others sees itself above
	// the target first and gives way, whatever the number of clients; a
	// lone client (s = 1) pays nothing.
	fairPenalty = 0.18
	// sparseBlend is how far, from 0 to 1, a count seen a window or
	// more after the previous one (but within two) moves the estimate of
	// the others' rate towards what it alone says.
	sparseBlend = 0.8
	// refusedSpan is how many of the latest responses refShare averages
	// over.
	refusedSpan = 64
	// onceAWindow is the most calls a client that calls about once a
	// window has counted in one: one, or two when its gap is just under
	// a window.
	onceAWindow = 2
	// entryQuiet: a first count of at most this fraction of the limit
	// finds a key quiet enough that the clients on it are starting
	// together (see entryRate).
	entryQuiet = 0.4
	// entryKeep is the fraction of its calls in the first window of a
	// quiet key that a client held there goes on with (see entryRate).
	entryKeep = 0.85
	// steadyOthers: others calling at no more than this many times the
	// limit's rate (the limit per window, with a fifth for the noise of
	// the estimate) are a key in steady use, not a start in a rush.
	steadyOthers = 1.2
)

// Pacer decides when one client may make its next call to a rate-limited
// API, so that all the clients sharing the limit together aim to use a
// target fraction of it (95% by default), share it equally, and are rarely
// refused. It needs no coordination: each client runs its own Pacer and
// learns about the others only from the shared count the server reports
// (a server that sends only Retry-After is paced at what it accepted
// between refusals). It keeps a rate in calls per second, adjusted once per
// 1/60 of the limit's window by additive increase and multiplicative
// decrease, and always honours Retry-After. docs/pacer.md describes the
// algorithm, how it learns the window, and what it reaches against each
// kind of server.
//
// New is required; the zero Pacer is not usable. Most callers want Wait
// before each call and Observe after it, or Transport, which does both.
// A Pacer is safe for concurrent use by multiple goroutines; concurrent
// callers are handed slots one gap apart. It takes about 17 KiB (an 18 KiB
// allocation) whatever the number of calls in the window, and as much
// again for each further limit it paces (see ObserveLimits).
type Pacer struct {
	mu    sync.Mutex
	clock Clock
	cfg   config
	rng   *rand.Rand

	latest time.Time // the latest clock reading, against time going backwards

	limit      float64       // L; zero while unknown
	window     time.Duration // W
	winSet     bool          // whether a signal gave the window (w=)
	used       float64       // the count reported at obsAt
	othersUsed float64       // the part of used that was other clients' calls
	hasUsed    bool
	obsAt      time.Time
	remaining  float64   // quota fallback when the limit is unknown
	resetAt    time.Time // end of the quota fallback; zero when unused

	rate        float64   // r, this client's calls per second; zero until the first report
	others      float64   // R_o, the other clients' current calls per second
	hist        history   // when the others' counted calls arrived
	ctlAt       time.Time // start of the current control period
	waitedUntil time.Time // the latest slot outside the queue for which a caller had to wait

	last   time.Time        // the latest slot handed out outside the queue
	hold   time.Time        // no slot before this (Retry-After, plus jitter)
	ahead  deque[time.Time] // slots handed out outside the queue, still to come
	aheadW deque[int64]     // the weight of each slot of ahead
	// weighted reports whether a call of a weight other than one was
	// ever booked (a limit of tokens): until then every weight is one,
	// and counts of calls are their weights.
	weighted bool
	lastW    int64   // the weight of the call booked at last; one until weighted
	queue    queue   // the callers blocked in Wait and their slots
	own      own     // this client's calls counted within the window, and in flight
	lw       learner // what the responses said about the window
	strikes  int     // consecutive refusals without Retry-After
	// refShare is the share of the responses refused, a moving average
	// over about the latest refusedSpan of them (see control).
	refShare float64
	ownNew   float64      // this client's counted calls since the latest count
	ownAll   float64      // this client's counted calls, ever
	dep      departed     // the counts seen, to tell when calls left the window
	ro       refusalsOnly // what refusals alone taught, on a server that sends no count
	// A first count that looked quiet, a window just begun, may have come
	// from a busy key whose fixed window had just turned over: joinedAt is
	// its time (zero once settled), joinOthers the others' calls
	// seen since, from their estimated rate.
	joinedAt   time.Time
	joinOthers float64
	// A quiet first count may come from a key that other clients start
	// on at the same moment (see crowdedStart): crowdAt is its time (zero
	// once the crowd's window is over), crowdUsed the count, crowdEnd
	// when the calls it counted leave the window, crowdOwn this client's
	// counted calls before the first count that showed others (-1 until
	// then), crowdCap the rate its share of the headroom allows (zero:
	// not held), crowdPhase where in its gap after crowdEnd it calls.
	crowdAt    time.Time
	crowdUsed  float64
	crowdEnd   time.Time
	crowdOwn   float64
	crowdCap   float64
	crowdPhase float64
	counts     int    // the counts learned so far
	sp         sparse // the window-by-window plan of a small fixed window
	// quietAt is the time of the first count, when it was a quarter of
	// the limit or less: on a sliding log, the calls counted from then on
	// leave a window later (see anniversary).
	quietAt time.Time
	lookAt  time.Time // the latest slot set by an anniversary
	pr      probe     // a burst sent to read the window (see probe)
	// turnHeld is the latest slot that a full fixed window held until
	// after its turnover (see rateBound).
	turnHeld time.Time
	// entryAt is the time of the first count when it found the key
	// quiet (see entryRate), zero once that window is over; entryHeld
	// reports whether entryRate held this client within it.
	entryAt   time.Time
	entryHeld bool
	busyAt    time.Time // the time of the first count, when it found the key busy
	// lim holds the limits beyond this Pacer's own, once a response
	// reported some (see limits); nil until then.
	lim      *limits
	resource string // the resource whose counts it learns (see Signal.Resource)
}

// New returns a Pacer configured by opts. An option given an invalid value
// (NaN, an infinity, outside its documented range) or a nil option makes it
// fail with an error wrapping pace.ErrInvalidArgument. It never panics.
func New(opts ...Option) (*Pacer, error) {
	cfg, err := configure(opts)
	if err != nil {
		return nil, err
	}
	return newPacer(cfg), nil
}

// configure applies opts to the defaults.
func configure(opts []Option) (config, error) {
	cfg := defaults()
	for _, o := range opts {
		if o == nil {
			return cfg, fmt.Errorf("pacer: nil option: %w", pace.ErrInvalidArgument)
		}
		if err := o(&cfg); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

func newPacer(cfg config) *Pacer {
	seed := cfg.seed
	if !cfg.seeded {
		seed = rand.Uint64()
	}
	return &Pacer{
		clock:  cfg.clock,
		cfg:    cfg,
		rng:    rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		window: cfg.window,
	}
}

// Wait blocks until the next call may go, and books that slot. It returns
// nil when the caller may proceed, ctx.Err() as soon as the context ends,
// and an error matching ErrWouldExceedDeadline and
// context.DeadlineExceeded, without waiting longer, when the context's
// deadline comes before the slot.
//
// Waiting callers queue in arrival order. A signal that moves slots later
// (a Retry-After, a rate cut, a full window) moves the slots of the
// callers already waiting too; a caller that gives up gives its slot
// back, and the callers behind it move up, as if it had never waited.
func (p *Pacer) Wait(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p.mu.Lock()
	if p.lim != nil {
		p.mu.Unlock()
		return p.waitLimits(ctx, costOf(ctx))
	}
	now := p.nowLocked()
	slot := p.slotLocked(now, 1)
	if !slot.After(now) {
		p.bookLocked(now, slot, 1)
		p.mu.Unlock()
		return nil
	}
	if beyondDeadline(ctx, slot) {
		p.mu.Unlock()
		return errWouldExceedDeadline()
	}
	w := &waiter{turn: make(chan struct{}, 1)}
	head := p.queue.push(w, slot)
	p.mu.Unlock()
	if !head {
		select {
		case <-w.turn:
		case <-ctx.Done():
			p.leave(w)
			return ctx.Err()
		}
	}
	return p.waitHead(ctx, w)
}

// waitHead sleeps until the first slot of the queue, w being its head,
// and takes that slot. The slot may move later while w sleeps; w then
// sleeps again.
func (p *Pacer) waitHead(ctx context.Context, w *waiter) error {
	for {
		p.mu.Lock()
		now := p.nowLocked()
		slot := p.queue.first()
		if !slot.After(now) {
			_, next := p.queue.pop()
			p.bookLocked(now, slot, 1)
			if slot.After(p.waitedUntil) && p.rateBound(slot) {
				p.waitedUntil = slot // it had to wait for it
			}
			p.mu.Unlock()
			next.wake()
			return nil
		}
		if beyondDeadline(ctx, slot) {
			next := p.queue.leave(w)
			p.mu.Unlock()
			next.wake()
			return errWouldExceedDeadline()
		}
		p.mu.Unlock()
		c, stop := p.clock.After(slot.Sub(now))
		select {
		case <-c:
		case <-ctx.Done():
			stop()
			p.leave(w)
			return ctx.Err()
		}
	}
}

// leave takes w out of the queue, giving back the last slot, and wakes
// the new head if w was the head.
func (p *Pacer) leave(w *waiter) {
	p.mu.Lock()
	next := p.queue.leave(w)
	p.mu.Unlock()
	next.wake()
}

// wake tells w, nil or not, that it is now the head of the queue.
func (w *waiter) wake() {
	if w != nil {
		w.turn <- struct{}{}
	}
}

func beyondDeadline(ctx context.Context, slot time.Time) bool {
	dl, ok := ctx.Deadline()
	return ok && dl.Before(slot)
}

func errWouldExceedDeadline() error {
	return errors.Join(ErrWouldExceedDeadline, context.DeadlineExceeded)
}

// Reserve books the next call and returns how long the caller must wait
// before making it (zero to go now). It never blocks; it is Wait for
// callers that schedule their own work, such as simulations. The slot
// cannot be given back, and unlike a waiting caller's it does not move: a
// Retry-After observed before it comes holds only the calls booked after.
func (p *Pacer) Reserve() time.Duration { return p.ReserveAt(p.clock.Now()) }

// ReserveAt is Reserve at now instead of the clock's reading, as
// x/time/rate's ReserveN(t, n): a now before one the Pacer has already
// seen is taken as that one.
func (p *Pacer) ReserveAt(now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	now = p.advanceLocked(now)
	if p.lim != nil {
		return p.reserveLimitsLocked(now, cost{}).Sub(now)
	}
	slot := p.slotLocked(now, 1)
	p.bookLocked(now, slot, 1)
	return slot.Sub(now)
}

// Observe feeds the Pacer what a response said. Call it once per completed
// call, after Wait or Reserve; absent fields change nothing, invalid ones
// (negative, absurdly large) are ignored or clamped, and a Retry-After is
// honoured whatever else the signal says. A reported count above the limit
// is believed (servers that lower their limit report exactly that): the
// Pacer then holds its rate and lets the count drain.
func (p *Pacer) Observe(s Signal) { p.ObserveAt(p.clock.Now(), s) }

// ObserveAt is Observe at now instead of the clock's reading; a now before
// one the Pacer has already seen is taken as that one.
func (p *Pacer) ObserveAt(now time.Time, s Signal) { p.settle(now, s, nil, nil) }

// settle takes in a response's limits, first and more (see
// ObserveLimits), for a call whose cost is used (nil: the estimate it was
// booked with, see WithCost).
func (p *Pacer) settle(now time.Time, first Signal, more []Signal, used *cost) {
	first = first.clean()
	p.mu.Lock()
	defer p.mu.Unlock()
	now = p.advanceLocked(now)
	if !p.ownResource(first) {
		// Another resource's counts (see Signal.Resource): only its wait.
		first, more = Signal{RetryAfter: first.RetryAfter}, nil
	}
	w := int64(-1)
	if len(more) > 0 || first.Unit != Requests || p.lim != nil {
		first, w = p.observeLimitsLocked(now, first, more, used)
	}
	p.observeLocked(now, first, w)
}

// observeLocked takes in what a response said of this Pacer's own limit,
// for a call that cost used of it (negative: what it was booked with). It
// must be called with p.mu held.
func (p *Pacer) observeLocked(now time.Time, s Signal, used int64) {
	p.control(now)
	p.prune(now)
	sent, w, landed := p.own.land()
	if !landed {
		w = 1
		if p.weighted {
			w = 0
		}
	}
	if !landed && p.ahead.len() > 0 {
		slot := p.ahead.popFront() // observed before its slot
		w = p.aheadW.popFront()
		if p.sp.on {
			p.sparseUnbook(slot)
		}
	}
	if used >= 0 {
		w = used
	}
	if s.Window > 0 {
		p.setWindow(s.Window)
		p.winSet = true
	}
	p.learnWindow(now, s, sent, landed)

	if s.Limit > 0 {
		l := float64(s.Limit)
		if p.limit > 0 && l != p.limit {
			// Every client sees the new limit at once and scales by the
			// same factor: the shares stay, the total moves at once.
			k := l / p.limit
			p.rate *= k
			p.others *= k
		}
		p.limit = l
	}
	if s.HasUsed || s.HasRemaining {
		t := 0.0
		if s.Throttled {
			t = 1
		}
		p.refShare += (t - p.refShare) / refusedSpan
	}
	if !s.Throttled && (s.HasUsed || s.HasRemaining || s.Limit > 0) {
		p.own.count(w)
		p.ownNew += float64(w)
		p.ownAll += float64(w)
	}
	// A look at a full count (see anniversary) that was refused: the
	// count is the limit it was at the previous response, nobody could be
	// counted in between, and it says nothing of the others' rate. Taken
	// as a count, it said they had stopped, and the one client that looked
	// came back with a larger share than those only refused.
	looked := s.Throttled && landed && !p.lookAt.IsZero() && !sent.After(p.lookAt) && p.lookAt.Sub(sent) <= p.window/ownBuckets
	switch {
	case looked:
	case s.HasUsed:
		p.learn(now, float64(s.Used))
	case s.HasRemaining && p.limit > 0:
		p.learn(now, math.Max(0, p.limit-float64(s.Remaining)))
	}
	if s.HasRemaining && s.Reset > 0 {
		p.remaining, p.resetAt = float64(s.Remaining), now.Add(s.Reset)
	}
	if p.limit <= 0 && !s.HasUsed && !s.HasRemaining {
		p.ro.observe(now, s)
	}
	p.sparseWait(now)
	p.sparseCount(s)
	if p.sparseOn() {
		p.sparseObserve(now, s)
		if s.Throttled {
			// The plan moves the next call to the next window; a
			// Retry-After still holds every call until it has passed.
			if t := now.Add(s.RetryAfter); t.After(p.hold) {
				p.hold = t
			}
			p.replanLocked(now)
			return
		}
	}
	if !s.Throttled {
		p.strikes = 0
		if s.RetryAfter > 0 {
			p.holdUntil(now.Add(s.RetryAfter), now)
		}
		p.replanLocked(now)
		return
	}
	// Refused: cut the rate, and wait at least Retry-After; without one,
	// back off exponentially from W/60, bounded by the maximum delay.
	p.refused(now, s)
	if p.rate > 0 {
		p.rate *= throttleCut
		if n := p.own.counted(); p.secondResets() && n <= onceAWindow {
			// A client that calls about once a window, where the
			// resets say nothing (see secondResets): its rate, set in
			// a burst or grown on a window a refusal wave had emptied,
			// comes down only slowly through the damped loop (see
			// gain), and every such client back a window later at that
			// rate fills the window at once and is refused again. A
			// full window holds its share: the calls it had counted in
			// the window that refused it (one at least), at the target
			// fraction.
			p.rate = math.Min(p.rate, p.cfg.target*p.perWindow(now, n)/p.window.Seconds())
		}
		p.clampRate()
	}
	// A refusal within the first window of a quiet key (see entryRate)
	// ends the hold: the window is full, and the refusal rules take over.
	p.entryAt, p.entryHeld = time.Time{}, false
	if _, ok := p.untilTurnover(now); ok && p.fixedSure() && !p.last.After(now) {
		// A fixed window full until it turns over: the next call goes
		// at this client's point after the turnover, not a gap after
		// the refused one (a client that calls about once a window
		// would come back at the same late point of every window, and
		// find it full every time).
		p.last = time.Time{}
		if p.rate*p.window.Seconds() < sparseCalls {
			// Its point, drawn once, came after the window was
			// full: a client that calls a few times a window (at
			// the floor rate, once) would be refused at it every
			// window. Each refusal moves it to a random part of
			// the one before, towards the turnover.
			p.lw.phase *= p.rng.Float64()
		}
	}
	wait := s.RetryAfter
	if wait <= 0 && p.noRetryAfter(s) {
		// No Retry-After: the reset is the server's only word on when
		// calls go again (a fixed window's end, a sliding log's oldest
		// call leaving it), and the more conservative reading wins over
		// backing off by W/60 into the same full window. The clients it
		// refused go at random points of their gap after it, not all at
		// once (those that come early see the count drop), and not a
		// gap after the refused call, which spent nothing.
		p.holdUntil(now.Add(s.Reset), now)
		if !p.last.After(now) {
			p.last = time.Time{}
		}
		p.replanLocked(now)
		return
	}
	if wait <= 0 && p.heldFull(now) {
		// No Retry-After, but a fixed window full until the instant
		// its reset has named for a while.
		wait = s.Reset
	}
	if wait <= 0 {
		wait = p.window / periods << min(p.strikes, 10)
		if m := p.maxDelay(); wait > m {
			wait = m
		}
		p.strikes++
	}
	p.holdUntil(now.Add(wait), now)
	p.replanLocked(now)
}

// replanLocked moves the slots of the callers waiting in Wait later where
// what the Pacer now knows forbids them: none before the hold or the
// barrier, and each at least a gap after the one before. A slot never
// moves earlier here. Only the head sleeps on the clock; it finds its new
// slot when it wakes.
func (p *Pacer) replanLocked(now time.Time) {
	if p.queue.len() == 0 {
		return
	}
	p.queue.replan(latest(now.Add(p.barrier(now, 1)), p.hold), p.gap(now))
}

// learn takes in a shared count observed at now: it updates the
// reconstruction of the others' calls and the estimate of their current
// rate, and starts the rate on the first count. It must be called with
// p.mu held.
func (p *Pacer) learn(now time.Time, used float64) {
	others := math.Max(0, used-p.own.counted())
	prev := p.obsAt
	bucket := p.lw.bucket && p.hasUsed && now.Sub(p.obsAt) < p.window
	if others >= 1 && !bucket {
		p.lw.othersAt = now
	}
	switch {
	case bucket:
		p.learnBucket(now, used)
	case !p.hasUsed || !p.hist.valid || now.Sub(p.obsAt) >= p.window:
		sparse := p.hasUsed && p.hist.valid && now.Sub(p.obsAt) < 2*p.window
		p.hist.reset(now, p.window, others)
		if sparse && p.lw.clocked && p.counts >= 2 && p.limit <= 2*sparseCalls {
			// About one count a window, on a limit of a few dozen, and
			// resets that say nothing (see clocked): one count is a
			// handful of calls, and taken alone it swings every
			// client's estimate the same way at once (a full window,
			// then an empty one). Move most of the way, not all of it,
			// once two counts gave an estimate.
			p.others += sparseBlend * (others/p.window.Seconds() - p.others)
		} else {
			p.others = others / p.window.Seconds()
		}
	default:
		since := p.obsAt
		var fresh float64
		if p.lw.counter() {
			// A counter sheds the others' count evenly, whenever their
			// calls came: a fraction dt/W of it left since the previous
			// one, and the reconstruction holds it evenly over the
			// window (a bump in it would leave at once a window later,
			// and come back each window as a phantom surge).
			fresh = others - p.othersUsed*(1-now.Sub(since).Seconds()/p.window.Seconds())
			p.hist.reset(now, p.window, others)
		} else {
			fresh = p.hist.record(now, since, others)
		}
		// One sample is a few calls, too few to trust alone: average them
		// (signed, so that the average stays unbiased). A sample far below
		// zero says the reconstruction's guess of the past was wrong (a
		// burst it had spread over the window left all at once), not that
		// the others stopped: skip it.
		// On an emptied bucket naming its next token (see tokensFull),
		// a count below this client's own calls is tokens refilled, not
		// the others gone: skip it too.
		contradicted := p.lw.tokensFull() && p.own.counted() > used
		// Calls of many tokens leave the window in lumps, as they came:
		// a sample far below zero is one leaving, as often as one far
		// above is one arriving, and skipping the first alone biased the
		// estimate up.
		if dt := now.Sub(since).Seconds(); dt > 0 && (fresh >= -skipBelow*p.others*dt || p.weighted) && !contradicted {
			a := 1 - math.Exp(-dt/(smoothing*p.window.Seconds()))
			p.others = math.Max(0, p.others+a*(fresh/dt-p.others))
		}
	}
	if p.counts == 0 && p.limit > 0 && used <= p.limit/4 {
		p.quietAt = now
	}
	p.used, p.hasUsed, p.obsAt = used, true, now
	p.counts++
	p.othersUsed = others
	p.ownNew = 0
	p.settleJoin(now, prev, used)
	if !p.entryAt.IsZero() && now.Sub(p.entryAt) >= p.window {
		if p.entryHeld {
			// The first window of a quiet key is over: go on at about
			// the calls this client got in it, not at the rate it
			// started with, which every client held there still has
			// (its loop grew it while it waited): all back at it at
			// once, they filled the next window and were refused.
			n := math.Max(1, entryKeep*float64(p.own.counted()))
			p.rate = math.Min(p.rate, n/p.window.Seconds())
			p.clampRate()
		}
		p.entryAt, p.entryHeld = time.Time{}, false
	}
	if p.rate == 0 && p.limit > 0 {
		// Start where a lone client would: the headroom to the target,
		// spread over a window. On a busy key, a fair share among a
		// handful of clients: too much if there are fewer, too little if
		// there are more, and the control loop settles the rest.
		head := p.cfg.target * p.limit
		if used >= head/2 {
			p.busyAt = now
			head = math.Max(p.cfg.target*p.limit-used, newcomerShare*used)
		} else {
			if used <= entryQuiet*p.limit {
				p.entryAt = now
			}
			if p.lw.longest >= minReading && head >= sparseCalls {
				// Quiet, with a reset that reads a window: idle, or a
				// fixed window that has just turned over (settleJoin
				// tells).
				p.joinedAt = now
			}
		}
		if used < p.cfg.target*p.limit/2 && (p.winSet || p.lw.resets) && !p.lw.bucket && p.limit > 2*sparseCalls {
			p.crowdAt, p.crowdUsed, p.crowdOwn = now, used, -1
			p.crowdEnd = now.Add(p.window)
			if i := p.lw.instant; i.After(now) && i.Before(p.crowdEnd) {
				// The first calls leave, or the window turns over, at
				// the reset instant the response named.
				p.crowdEnd = i
			}
		}
		p.rate = head / p.window.Seconds()
		p.clampRate()
	}
	p.crowdedStart(now, used)
}

// crowdedStart holds back a client that starts on a quiet key with a
// crowd. Each client reads its first count as a quiet key and starts at
// the whole target, so that N clients starting together call at N times
// the limit: the window is full within a fraction of itself, and the
// control loop, whose cut acts over a window, is too late (16 clients on a
// counter of 50 calls in 5 s: 16 refusals in the first window, 18 in the
// second, when all come back together). When the count reaches half the
// target within a twentieth of a window of a quiet first count (about ten
// times the rate a lone client starts at), a crowd started together:
// until the calls counted by then leave the window (the reset instant the
// first count named, at most a window after it), the client calls at its
// share of the headroom left below the target, spread over that time, its
// share being its calls among those counted since it first saw others;
// its next call goes at a random point of that gap. The headroom is what
// the count leaves once the others' calls still to come in the rush are
// in it (the rate the count rose at, for half a gap of the start rate).
// When that time is over, it comes back at a random point of the gap its
// calls in it give, however long after its latest call that is, and
// keeps that rate as its share (the loop takes over from there). A
// lone client, and a handful that the loop brings down in time, never
// reach half the target so fast. Only on a limit above 2·sparseCalls (on
// a few dozen calls a window the clients' first calls alone take most of
// it) with a window read from the server (a guessed one may be many
// times the real one). It must be called with p.mu held, after the count
// is learned.
func (p *Pacer) crowdedStart(now time.Time, used float64) {
	if p.crowdAt.IsZero() {
		return
	}
	in := now.Sub(p.crowdAt)
	if !now.Before(p.crowdEnd) || used < p.crowdUsed {
		// A window gone by, or a fixed window that turned over.
		if p.crowdCap > 0 && !now.Before(p.crowdEnd) && !p.lw.fixed {
			// Keep the share the first window gave.
			p.rate = math.Min(p.rate, p.crowdKept())
			p.clampRate()
		}
		p.crowdAt = time.Time{}
		return
	}
	if used-p.own.counted()-float64(p.own.flying) < 1 || p.rate <= 0 {
		return
	}
	first := p.crowdCap == 0
	if first && p.crowdOwn < 0 {
		// This client's calls from the first count that showed others.
		p.crowdOwn = p.ownAll - 1
	}
	if first && (in > p.window/20 || used < p.cfg.target*p.limit/2) {
		if in > p.window/20 {
			// The count did not reach half the target within a
			// twentieth of a window: no crowd the loop cannot bring
			// down in time.
			p.crowdAt = time.Time{}
		}
		return
	}
	mine := p.ownAll - p.crowdOwn + float64(p.own.flying)
	share := math.Min(1, mine/used)
	head := p.cfg.target*p.limit - used
	if first {
		// The count is already old in the crowd's rush: the others
		// call on at the rate it rose at until their own counts show
		// them the crowd, each about half a gap of the start rate
		// away. Read from the count alone, the headroom was shared
		// out as if nobody called after it, and the count went to the
		// limit (16 clients, 50 calls in 5 s: the first to see it at
		// 24 took 2 more calls, the count reached 44 in the rush, and
		// 12 more calls came before the window turned over; 6 were
		// refused).
		head -= (used - p.crowdUsed) / in.Seconds() / p.rate / 2
	}
	allowed := math.Max(0, head) / p.crowdEnd.Sub(now).Seconds()
	if first {
		p.crowdPhase = p.rng.Float64()
	}
	p.crowdCap = math.Max(allowed*share, p.limit/(256*p.window.Seconds()))
	if first && !p.last.After(now) {
		// The next call at a random point of the new gap, not a gap
		// after the latest: the clients cut together made their
		// latest calls together.
		g := time.Duration(float64(time.Second) / math.Min(p.rate, p.crowdCap))
		p.last = now.Add(-time.Duration((1 - p.rng.Float64()) * float64(g)))
	}
}

// crowdKept is the rate that this client's calls since it first saw others
// give over the crowd's window (see crowdedStart): its share of it.
func (p *Pacer) crowdKept() float64 {
	return math.Max(1, p.ownAll-p.crowdOwn) / p.crowdEnd.Sub(p.crowdAt).Seconds()
}

// crowded reports whether crowdedStart holds this client at now (the hole
// below the target is then the crowd's, not this client's to fill).
func (p *Pacer) crowded(now time.Time) bool {
	return p.crowdCap > 0 && !p.crowdAt.IsZero() && now.Before(p.crowdEnd)
}

// settleJoin holds a client whose first count looked quiet (see
// joinedAt) to what a newcomer on a busy key gets, once the count has
// shown the others for a quarter window: while, within its first window,
// it holds more than joinShare of the count and others' calls are in it
// too, its rate is at most the headroom the others' average rate since
// leaves to the target, or a newcomer's share of that rate, whichever is
// more. (The more
// conservative reading wins: a first count just after a fixed window
// turned over says nothing of the others, who called at their usual
// pace in the window before.) A client that holds more than twice
// joinShare of the count is held from one time constant of the estimate
// (smoothing) on: its burst and its calls at the whole target come in a
// rush that the others read as a rate above the limit, and they cut
// theirs hard before a quarter window is out. A lone client sees no
// others, and clients that start together hold about equal shares:
// neither is held. It must be called with p.mu held, prev the time of
// the previous count.
func (p *Pacer) settleJoin(now, prev time.Time, used float64) {
	if p.joinedAt.IsZero() || prev.IsZero() {
		return
	}
	p.joinOthers += p.othersRate() * now.Sub(prev).Seconds()
	in := now.Sub(p.joinedAt)
	if in >= p.window {
		p.joinedAt = time.Time{}
	}
	early := in >= time.Duration(smoothing*float64(p.window)) && p.own.counted() > 2*joinShare*used
	if (in < p.window/4 && !early) || p.rate <= 0 || p.lw.bucket || p.own.counted() <= joinShare*used || used-p.own.counted() < 1 {
		return
	}
	o := p.joinOthers / in.Seconds() * p.window.Seconds()
	p.rate = min(p.rate, math.Max(p.cfg.target*p.limit-o, newcomerShare*o)/p.window.Seconds())
	p.clampRate()
}

// settled returns the fraction, from 0 to 1, of its step by which the
// rate may grow at t. The estimate of the others restarts at a fixed
// window's turnover from the count since (near nothing), and a client
// that calls a few times a window sees little else before the window is
// full: every client, taking the others for gone, would grow its rate at
// every turnover, and the window would fill early with the refusals of
// those who call late. On a confirmed fixed window, such a client grows
// in proportion to the time since the turnover, at the full step from
// settle windows on. It must be called with p.mu held.
func (p *Pacer) settled(t time.Time) float64 {
	if !p.fixedSure() || !p.lw.confirmed || p.lw.boundary.IsZero() || p.rate*p.window.Seconds() >= sparseCalls {
		return 1
	}
	return math.Min(1, math.Max(0, t.Sub(p.lw.boundary).Seconds()/(settle*p.window.Seconds())))
}

// learnBucket takes in a count observed at now on a token bucket: the
// count moved by the calls that came since the previous one, less the
// limit per window it drained, so that the others' calls since are the
// difference less this client's own. When the previous count was below
// what the bucket drains in that time, it may have been full part of the
// time, and the count says nothing of the others. It must be called with
// p.mu held.
func (p *Pacer) learnBucket(now time.Time, used float64) {
	dt := now.Sub(p.obsAt).Seconds()
	if dt <= 0 {
		return
	}
	drain := p.limit / p.window.Seconds() * dt
	fresh := used - p.used + drain - p.ownNew
	if fresh >= 1 {
		p.lw.othersAt = now
	}
	if p.used < drain+1 {
		// The bucket may have been full for part of the time, and then
		// hides any rate below its refill: let the estimate fade, alike
		// for every client, so that the rates grow until the count
		// speaks again.
		p.others *= math.Exp(-dt / p.window.Seconds())
		return
	}
	a := 1 - math.Exp(-dt/(smoothing*p.window.Seconds()))
	p.others = math.Max(0, p.others+a*(fresh/dt-p.others))
}

// othersRate is the other clients' current rate, as the reconstruction
// estimates it. (A floor at their average over the window would be safer
// against a wrong guess of the past, but it depends on the client's own
// count and so rewards whoever got the most calls in early, for good.)
func (p *Pacer) othersRate() float64 {
	return p.others
}

// clampRate keeps the rate within [L/(256 W), L/W]: never more than the
// whole limit, never so little that the client stops probing.
func (p *Pacer) clampRate() {
	w := p.window.Seconds()
	lo, hi := 1/w, 1/w
	if p.limit > 0 {
		lo, hi = p.limit/(256*w), p.limit/w
	}
	if !(p.rate >= lo) { // also NaN
		p.rate = lo
	}
	if p.rate > hi {
		p.rate = hi
	}
}

// holdUntil forbids slots before t, plus a random part of this client's
// gap so that clients refused together spread out. It must be called with
// p.mu held.
func (p *Pacer) holdUntil(t, now time.Time) {
	jitter := time.Duration(p.rng.Float64() * float64(p.spread()))
	if t = t.Add(jitter); t.After(p.hold) {
		p.hold = t
	}
}

// spread is the interval over which a client resumes after a refusal: its
// own gap, bounded by the maximum delay.
func (p *Pacer) spread() time.Duration {
	if p.rate <= 0 && p.ro.implied > 0 {
		return min(time.Duration(float64(time.Second)/p.ro.implied), p.maxDelay())
	}
	if p.rate <= 0 {
		return p.window / periods
	}
	return min(time.Duration(float64(time.Second)/p.rate), p.maxDelay())
}

// maxDelay is the longest wait the barrier imposes on the strength of one
// sample (Retry-After may ask for more, and the rate itself may space
// calls up to a window apart).
func (p *Pacer) maxDelay() time.Duration {
	return time.Duration(float64(p.window) * p.cfg.maxDelay)
}

// nowLocked reads the clock once and never lets it move backwards.
func (p *Pacer) nowLocked() time.Time { return p.advanceLocked(p.clock.Now()) }

// advanceLocked takes now as the time, unless it is before the latest
// the Pacer has seen.
func (p *Pacer) advanceLocked(now time.Time) time.Time {
	if now.Before(p.latest) {
		return p.latest
	}
	p.latest = now
	return now
}

// slotLocked returns the earliest time the next call, of weight w, may go:
// the small fixed window's plan when it holds (see sparse), else the paced
// slot, never before the hold.
func (p *Pacer) slotLocked(now time.Time, w int64) time.Time {
	p.control(now)
	p.prune(now)
	var slot time.Time
	planned := p.sparseOn()
	if planned {
		slot = p.sparseSlot(now)
	} else {
		slot, planned = p.sparseFirst(now)
	}
	if !planned {
		slot = p.pacedSlot(now, w)
	}
	slot = latest(slot, p.hold)
	if a, ok := p.anniversary(now); ok && slot.Equal(a) {
		p.lookAt = slot
	}
	return slot
}

// pacedSlot returns the slot the rate, the barrier and a full fixed
// window allow a call of weight w. The gap after the latest call is its
// weight's: a call of many tokens spends as many calls' worth of the rate.
// It must be called with p.mu held.
func (p *Pacer) pacedSlot(now time.Time, w int64) time.Time {
	g := p.gap(now)
	if p.weighted {
		// As the rate's own gap, a window at most: a client that calls
		// less than once a window sees no count, and its loop, which
		// acts on counts less than a window old, would never grow it.
		g = time.Duration(min(float64(g)*float64(p.lastW), float64(p.window)))
	}
	slot := p.lastSlot().Add(g)
	few := p.fixedSure() && p.limit > 0 && p.rate*p.window.Seconds() < sparseCalls
	if b := now.Add(p.barrier(now, float64(w))); slot.Before(b) {
		slot = b
		if d, ok := p.untilTurnover(now); ok && few && b.Sub(now) >= d {
			p.turnHeld = slot
		}
	}
	if d, ok := p.untilTurnover(now); ok && few {
		// A fixed window predicted full by the time of the slot (a
		// client that calls a few times a window books its next call
		// far ahead, where the barrier, checked now, does not look):
		// the call goes after the turnover, at this client's point.
		if turn := now.Add(d); slot.Before(turn) {
			if u, ok := p.predictedUsed(slot); ok && p.limit-u < min(float64(w), p.limit) {
				slot = turn.Add(time.Duration(p.lw.phase * float64(p.spread())))
				p.turnHeld = slot
			}
		}
	}
	return slot
}

// bookLocked hands out slot, for a call of weight w, outside the queue:
// to Reserve, to a Wait that need not wait, or to the head of the queue
// when it goes.
func (p *Pacer) bookLocked(now, slot time.Time, w int64) {
	if p.sp.on {
		p.sparseBook(slot)
	}
	if w != 1 {
		p.weighted = true
	}
	probing := p.probeArmed(now)
	if slot.After(p.last) {
		p.last = slot
		p.lastW = w
	}
	if probing {
		p.probeBook(slot)
	}
	if slot.After(now) {
		if p.rateBound(slot) {
			p.waitedUntil = slot
		}
		p.ahead.push(slot)
		p.aheadW.push(w)
	} else {
		p.own.fly(slot, w)
	}
}

// lastSlot is the latest slot handed out, in the queue or not.
func (p *Pacer) lastSlot() time.Time {
	if p.queue.len() > 0 && p.queue.last().After(p.last) {
		return p.queue.last()
	}
	return p.last
}

// waited is the latest slot for which a caller had to wait, or is
// waiting, for the rate: a caller that gave up waiting no longer counts,
// nor one held by a full fixed window (see rateBound).
func (p *Pacer) waited() time.Time {
	if p.queue.len() > 0 && p.queue.last().After(p.waitedUntil) && p.rateBound(p.queue.last()) {
		return p.queue.last()
	}
	return p.waitedUntil
}

// rateBound reports whether a caller that waits for slot waits for the
// rate, which may then grow (see control): not when a full fixed window
// held the slot until after its turnover (turnHeld), for a client that
// calls a few times a window. Such a client is held by the window, not
// short of rate; growing its rate then only sends it sooner after the
// next turnover, into the rush that fills the window early and refuses
// whoever calls late (30/3 s, N=16: 429 ratio 8.7% → 8.3%, the worst of
// seeds 13-24 10.4% → 8.2-8.7%). It must be called with p.mu held.
func (p *Pacer) rateBound(slot time.Time) bool {
	return !slot.Equal(p.turnHeld)
}

// prune forgets calls older than the window, and calls in flight for so
// long (a quarter window) that their response will never be observed.
func (p *Pacer) prune(now time.Time) {
	p.own.sync(now, p.window)
	for p.ahead.len() > 0 && !p.ahead.at(0).After(now) {
		p.own.fly(p.ahead.popFront(), p.aheadW.popFront())
	}
}

// inFlight returns how many calls (their weight) were handed a slot at or
// before t and not yet observed (t must not be before the latest prune).
func (p *Pacer) inFlight(t time.Time) float64 {
	return float64(p.own.flying) + p.aheadUntil(t) + float64(p.queue.countUntil(t))
}

// bookedAfter is the calls (their weight) this client has booked for
// after t, which inFlight(t) does not count yet.
func (p *Pacer) bookedAfter(t time.Time) float64 {
	return p.aheadUntil(maxTime) - p.aheadUntil(t) + float64(p.queue.len()-p.queue.countUntil(t))
}

// maxTime is after every slot.
var maxTime = time.Unix(1<<62, 0)

// aheadUntil returns the weight of the slots of ahead at or before t.
func (p *Pacer) aheadUntil(t time.Time) float64 {
	n := until(&p.ahead, t)
	if !p.weighted {
		return float64(n)
	}
	sum := int64(0)
	for i := 0; i < n; i++ {
		sum += p.aheadW.at(i)
	}
	return float64(sum)
}

// predictedUsed is the shared count the server would report at t: the
// last report, plus this client's calls since, plus the others' calls at
// their estimated rate, minus the calls that left the window since (the
// others' from the reconstruction, this client's from its record). A
// report a window old predicts nothing: everything it counted has expired.
func (p *Pacer) predictedUsed(t time.Time) (float64, bool) {
	if !p.hasUsed {
		return 0, false
	}
	if u, ok := p.turnedOver(t); ok {
		return u, true
	}
	age := t.Sub(p.obsAt)
	if age >= p.window {
		// Only this client's calls since, the ones it has booked.
		return p.inFlight(t), true
	}
	u := p.used + p.inFlight(t)
	if p.lw.bucket && age > 0 {
		// A bucket drains at limit per window, whoever's calls it holds.
		u += (p.othersRate() - p.limit/p.window.Seconds()) * age.Seconds()
		return math.Max(0, u), true
	}
	if age > 0 {
		ahead := age
		if p.weighted {
			// The others' calls are a few a window, each held by the
			// same full count as this client's: past a control period
			// or two, counting them on at their rate holds every
			// client at once until the report is a window old.
			ahead = min(age, p.window/weightedAhead)
		}
		u += p.othersRate() * ahead.Seconds()
		if p.lw.fixed {
			// A fixed window sheds nothing until it turns over.
			return math.Max(0, u), true
		}
		u -= p.own.countedBy(t.Add(-p.window))
		u -= p.hist.expiring(t, p.window) - p.hist.expiring(p.obsAt, p.window)
	}
	return math.Max(0, u), true
}

// gap is the interval the pacer imposes between two calls at now.
func (p *Pacer) gap(now time.Time) time.Duration {
	if p.limit <= 0 {
		// Only the draft's "r calls within t" may be known: spread them.
		if p.resetAt.After(now) {
			left := p.remaining - (float64(p.own.flying) + p.aheadUntil(maxTime) + float64(p.queue.len()))
			d := time.Duration(float64(p.resetAt.Sub(now)) / math.Max(1, left))
			return min(d, p.maxDelay())
		}
		if r := p.ro.rate(now); r > 0 {
			// A reading taken over days (one call, then a refusal long
			// after) is no gap of days: at most a window, as the rate's.
			return min(time.Duration(float64(time.Second)/(p.cfg.target*r)), p.window)
		}
		return 0
	}
	u, ok := p.predictedUsed(now)
	if !ok {
		// A limit but no count (a server that sends only its limit, or
		// a refusal without one): nothing tells how much of the window
		// is left, so the limit is spread over it, a window at most.
		return min(time.Duration(float64(p.window)/(p.cfg.target*p.limit)), p.window)
	}
	if p.rate <= 0 {
		return 0
	}
	if p.probeArmed(now) && p.pr.sent+p.queue.len() < p.probeCalls() {
		// A burst to read the window from (see probe): its calls
		// only. A caller waiting in Wait is booked when its slot
		// comes, so that the callers already queued count against the
		// burst too; else every caller that queued before the burst
		// went would get no gap, and all go at once.
		return 0
	}
	// Calls booked past now (callers booking at once, or a hold pushing
	// them there) are not in u: they are the burst's and the hole's too.
	ahead := p.bookedAfter(now)
	if u+ahead < p.cfg.burst*p.cfg.target*p.limit && p.used-p.own.counted() < 1 && !p.othersSeen(now) {
		// The initial burst: the count is low and none of it is anybody
		// else's, nor was within the last two windows (a fixed window
		// that just turned over looks idle). Clients that start together
		// see each other at once and pace from the start, instead of
		// racing for the burst.
		return 0
	}
	r := p.rate
	if p.crowded(now) && p.crowdCap < r {
		// Held to its share of the headroom until the first calls leave
		// the window; then at its own point of its gap after that.
		// Not capped at a window: a client whose latest call went in
		// the rush at the start comes back more than a window after
		// it (capped, every client held came back a window after its
		// latest call, all within the tenth of a second the rush took,
		// into a window the first one's weight still filled).
		g := time.Duration(float64(time.Second) / p.crowdCap)
		kept := time.Duration(float64(time.Second) / math.Min(r, p.crowdKept()))
		last := p.lastSlot()
		if !last.Before(p.crowdEnd) {
			// A slot booked ahead is already past the crowd's
			// window: the next is a gap of the rate it keeps after
			// it, not at once.
			return min(kept, p.window)
		}
		end := p.crowdEnd.Sub(last) + time.Duration(p.crowdPhase*float64(kept))
		return min(g, max(end, 0))
	}
	if hole := p.cfg.target*p.limit - u - ahead + p.expiring(now, lookahead); hole > 0 && !p.lw.bucket && !p.crowded(now) {
		// A hole below the target (calls leaving the window faster than
		// they come, as after a burst or a limit drop), counting the
		// calls that will leave it within the look-ahead: fill it within
		// catchup windows, each client in proportion to its share, so
		// that the total does not depend on the number of clients. A
		// fixed window's hole lasts until it turns over: spread over that
		// time, not rushed into the first half. (A bucket's tokens are a
		// burst to spend once, not a rate.)
		// Right after a fixed window's turnover, the others are at
		// least what the window before showed (see othersBefore).
		share := p.rate / (p.rate + math.Max(p.othersRate(), p.othersBefore(now)))
		within := catchup * p.window.Seconds()
		if d, ok := p.untilTurnover(now); ok {
			within = math.Max(d.Seconds(), p.window.Seconds()/periods)
		}
		fill := share * hole / within
		if hole < 1 {
			// Less than a call is no hole to rush into: on a limit of
			// one, filled at twice the limit's pace, it booked three
			// calls in one window.
			fill = math.Min(fill, p.limit/p.window.Seconds())
		}
		r = math.Max(r, fill)
	}
	if c, left, ok := p.entryRate(now); ok && c < r {
		// The first window of a quiet key: this client's share of the
		// headroom, spread until the first calls leave.
		p.entryHeld = true
		if c*left.Seconds() < 1 {
			// Not one more call before they leave: go at a random
			// point of this client's fair gap after that, so that the
			// clients held together do not all call then.
			// The fair gap, like the rate's, is a window at most:
			// a share made tiny by a count far above the limit
			// gave hours, or overflowed to a negative gap.
			share := p.rate / (p.rate + p.othersRate())
			fair := math.Min(p.window.Seconds()/(share*p.cfg.target*p.limit), p.window.Seconds())
			return left + time.Duration(p.rng.Float64()*fair*float64(time.Second))
		}
		return min(time.Duration(float64(time.Second)/c), left)
	}
	// The rate's own gap is the consensus of many samples: it may be as
	// long as a window (a key shared by as many clients as the limit).
	return min(time.Duration(float64(time.Second)/r), p.window)
}

// entryRate returns the most this client may call at now within the
// first window of a key its first count found quiet (at most entryQuiet
// of the limit), and the time left until that window ends. Clients that
// start together on a quiet key each start at the whole target, and fill
// the window in a fraction of it: the calls in flight when the count
// reaches the limit are refused, and on a server that counts refused
// calls each also holds the window full for a window. Nothing counted
// since the quiet count leaves the window before that window ends, so
// the headroom to the target is all there is until then: each client
// spends its share of it, in proportion to its rate, evenly over the
// time left. A lone client, whose share is the whole headroom, is not
// held, and the rule waits for the others' calls to show. Only while
// every reset that read a window read about a second (from minReading to
// instantSlack) and, from the second count on, the resets say nothing
// else (see secondResets, which needs two responses to tell): there a
// refusal's Retry-After, in whole seconds, costs a whole window.
// Elsewhere the same hold moved the shares of the clients that start
// together and of a newcomer (5/10 s fixed window, N=4 with a join:
// fairness 0.96 to 0.81; 30/3 s, N=16: 0.91 to 0.86), and a token
// bucket whose early resets read a second was held too (20/2 s, N=16:
// 429 13.5% to 15.4%). It must be called with p.mu held.
func (p *Pacer) entryRate(now time.Time) (float64, time.Duration, bool) {
	if p.entryAt.IsZero() || p.limit <= 0 || p.rate <= 0 || p.othersRate() <= 0 || p.lw.longest < minReading || p.lw.longest > instantSlack || (p.counts > 1 && !p.secondResets()) {
		return 0, 0, false
	}
	left := p.entryAt.Add(p.window).Sub(now)
	if left <= 0 {
		return 0, 0, false
	}
	u, ok := p.predictedUsed(now)
	if !ok {
		return 0, 0, false
	}
	share := p.rate / (p.rate + p.othersRate())
	return share * math.Max(0, p.cfg.target*p.limit-u) / left.Seconds(), left, true
}

// perWindow returns how many calls a window the n calls this client had
// counted in the window at now stand for (one at least). A newcomer (its
// first count found the key busy) that has called for less than a
// window, on a key whose others call at no more than about the limit's
// rate (steadyOthers: a key in steady use, which it joined), has counted
// only the calls of the part of the window it was there: n over that
// part. (Clients that start together on a quiet key fill the window in a
// rush, their others far above the limit's rate, and the n calls each got
// in before it was full are all it gets of that window; so do the last of
// them to start, whose first count the others' first calls made busy.)
// It must be called with p.mu held.
func (p *Pacer) perWindow(now time.Time, n float64) float64 {
	m := math.Max(1, n)
	age := now.Sub(p.busyAt)
	if p.busyAt.IsZero() || age <= 0 || age >= p.window || p.othersRate() > steadyOthers*p.limit/p.window.Seconds() {
		return m
	}
	return m * p.window.Seconds() / age.Seconds()
}

// expiring returns how many counted calls leave the window between now and
// ahead windows later: the others' as the reconstruction places them, this
// client's as its record does. It must be called with p.mu held.
func (p *Pacer) expiring(now time.Time, ahead float64) float64 {
	if !p.hasUsed || p.lw.fixed {
		return 0
	}
	t := now.Add(time.Duration(ahead * float64(p.window)))
	n := p.hist.expiring(t, p.window) - p.hist.expiring(now, p.window)
	return n + p.own.countedBy(t.Add(-p.window)) - p.own.countedBy(now.Add(-p.window))
}

// barrier returns how long from now the next call, of weight w, must wait
// because the window is full: until the reconstruction says calls of that
// weight have left it, but no longer than the maximum delay, since this
// wait rests on one sample.
func (p *Pacer) barrier(now time.Time, w float64) time.Duration {
	if p.limit <= 0 {
		return 0
	}
	w = min(w, p.limit) // a call that costs more goes into an empty window
	u, ok := p.predictedUsed(now)
	if !ok || p.limit-u >= w {
		return 0
	}
	if p.lw.bucket {
		// A bucket frees a token every W/limit, whoever takes it: wait
		// for the drain alone (the others' calls compete for the same
		// tokens, and a rate cut settles who takes them).
		d := time.Duration((u - p.limit + w) / p.limit * float64(p.window))
		return min(d, p.maxDelay())
	}
	step := max(p.window/periods, 1)
	t := now
	limit := p.maxDelay()
	if d, ok := p.untilTurnover(now); ok {
		// A fixed window: nothing leaves it before it turns over, which
		// the server named.
		limit = max(limit, d)
	}
	if p.lw.shortResets() {
		// Every response says the next call frees within half a second
		// (a bucket naming its next token): the count is tokens, not
		// calls of a window, and the reconstruction's guess of when
		// calls leave it rests on nothing. Waiting out the maximum
		// delay on it parked some clients for half the default window
		// while another took their share (300/30 s bucket, N=4 with
		// churn: J 0.885).
		limit = min(limit, time.Duration(tokenWait*float64(p.window)))
	}
	for t.Sub(now) < limit {
		t = t.Add(step)
		if v, _ := p.predictedUsed(t); p.limit-v >= w {
			break
		}
	}
	if d, ok := p.untilTurnover(now); ok && t.Sub(now) >= d {
		// Held until a fixed window turns over: go at this client's own
		// point within its gap after it, so that the clients held
		// together do not all call at the turnover.
		t = t.Add(time.Duration(p.lw.phase * float64(p.spread())))
	}
	if a, ok := p.anniversary(now); ok && a.Before(t) {
		t = a
	}
	return t.Sub(now)
}

// anniversary returns the next time after now that a round window
// shorter than the guessed one (and no shorter than the longest
// Retry-After, which reads no longer than the window) has passed since
// this client saw the key quiet. On a sliding log the first calls leave
// exactly a window after they came, and only a client that looks then
// sees them go (see departures): the barrier, which reads the guessed
// window, would hold a client at a full count for half of it, and the
// others, who saw the calls go, fill the room they left by then.
//
// Only a client that a Retry-After told something looks: the wait it
// asks for at a full count is when the oldest call leaves, no longer
// than the window, so that it leaves only the round windows at least as
// long to look at, and none at all on a log whose window is the guessed
// one. A client never refused knows no such thing, and a look there is
// a guess against every round window below the default: on a log of the
// default minute, each was a refusal the barrier would not have risked,
// and it moved the figures of the 60 s reference.
func (p *Pacer) anniversary(now time.Time) (time.Time, bool) {
	if !p.guessed() || p.quietAt.IsZero() || p.lw.longest < minReading {
		return time.Time{}, false
	}
	for _, r := range roundWindows {
		if r >= p.window {
			break
		}
		if a := p.quietAt.Add(r); a.After(now) && r >= p.lw.longest {
			return a, true
		}
	}
	return time.Time{}, false
}

// guessed reports whether the window is still the default guess: no
// policy gave it, no response carried a reset field, and nothing bounded
// it.
func (p *Pacer) guessed() bool {
	return !p.winSet && !p.lw.resetSent && p.lw.bound == 0
}

// control runs the AIMD update of the rate for every control period
// (W/60) that ended by now. It must be called with p.mu held.
func (p *Pacer) control(now time.Time) {
	period := max(p.window/periods, 1)
	if p.sp.on {
		// The share of a small fixed window moves with its counts.
		p.ctlAt = now
		return
	}
	if p.ctlAt.IsZero() || now.Sub(p.ctlAt) > 2*p.window {
		p.ctlAt = now
		return
	}
	w := p.window.Seconds()
	for !now.Before(p.ctlAt.Add(period)) {
		end := p.ctlAt.Add(period)
		if p.rate > 0 && p.limit > 0 && p.hasUsed && p.used <= p.limit && end.Sub(p.obsAt) < p.window {
			target := p.cfg.target
			// Where the count settles if everyone keeps calling at the
			// current rates (with the fairness penalty), or where it is,
			// whichever is higher. (A count above the limit means the
			// limit moved, not the clients; the count drains by itself
			// and the rate holds.)
			share := p.rate / (p.rate + p.othersRate())
			pen := 1 + fairPenalty*math.Sqrt(share*(1-share))
			x := (p.rate + p.othersRate()) * w / p.limit * pen
			over := p.used / p.limit
			if p.fixedSure() && p.rate*w < sparseCalls && p.own.counted() > newcomerShare*p.used && over*pen > target {
				// A fixed window filled to the target every window,
				// by clients that call a few times a window (whose
				// estimate of the others restarts at each turnover
				// from near nothing): the count is then what x reads,
				// the same for every client, and every client cuts by
				// the same factor, so the shares it found stay for
				// good (a newcomer that joined at a turnover and took
				// half the window keeps it). A client that holds more
				// than a newcomer's share of that count pays the
				// fairness penalty on it too, and gives way first.
				over *= pen
			}
			if p.lw.secBucket {
				// A bucket's count is the tokens missing, not calls of a
				// window: held near the limit, it leaves nothing to
				// absorb the calls of clients that each act alone, and
				// with many of them every few calls emptied it and were
				// refused. The count is held lower by the share of the
				// responses refused (refShare): a few clients, rarely
				// refused, keep the whole target; sixteen, refused about
				// one call in eight, hold about an eighth below it. (A
				// fixed reserve of a sixth held it for every client,
				// and a newcomer, who reads the others' calls off a
				// count held lower, took twice its share: churn J 0.72
				// on seeds 7-12.)
				over *= 1 + p.refShare
			}
			x = math.Max(x, over)
			g := p.gain()
			switch {
			case x > target:
				p.rate *= math.Pow(target/x, g*p.cfg.decrease/periods)
			case !p.waited().Before(p.ctlAt):
				p.rate += g * (p.cfg.increase + shareGrowth*share) * (target - x) / target * p.limit / w / periods * p.settled(end)
			}
			p.clampRate()
		}
		p.ctlAt = end
	}
}

// gain returns the fraction, from 0 to 1, of its step that the control
// loop takes each period. The loop acts every W/periods on the latest
// reading, which a count refreshes: a client that sees a count less often
// than once per time constant of the estimate (smoothing) acts on each
// for many periods, a window of them when it calls once a window, a step
// per count many times the one a client that counts often takes. Where
// the resets say nothing of the window (see secondResets), the count is
// all a client reads, and it lags a window: every client, acting on the
// same full window a window late, cuts at once, then grows at once on
// the nearly empty one that follows, an oscillation over about two
// windows that a server counting refused calls keeps going (each refusal
// holds the window full for a window). There the step shrinks in
// proportion to the counts the client sees per time constant, at least
// one a window (its gap is at most a window). It must be called with
// p.mu held.
func (p *Pacer) gain() float64 {
	if !p.secondResets() {
		return 1
	}
	perWindow := math.Max(1, p.rate*p.window.Seconds())
	return math.Min(1, perWindow*smoothing)
}

// secondResets reports whether the resets say nothing of the window but
// that it is a second: the latest read as the one before (see clocked)
// and none ever read longer than a second, as a window of a second
// written in whole seconds always reads. (A longer window's reset reads
// 1 s twice in a row now and then, when its oldest call is about to
// leave.) It must be called with p.mu held.
func (p *Pacer) secondResets() bool {
	return p.lw.clocked && p.lw.longest <= instantSlack
}

// now reads the clock for callers outside the lock (the transport turns
// dates into durations with it).
func (p *Pacer) now() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.nowLocked()
}
