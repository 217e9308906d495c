package httplimit

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/driver"
)

// Limiter decides requests against a list of limits, all or nothing,
// whatever carries the requests: it is the machinery under Middleware, for
// other transports (package grpclimit) to reuse with keys of their own.
//
// Limits are decided in the order given; the first refusal stops the
// decision and gives back what the earlier limits took (Pace and Shared
// events, Bucket tokens through Store.Refund, slots), so a refused request
// spends nothing. A Limiter is safe for concurrent use by multiple
// goroutines; each request has its own Ticket.
type Limiter struct {
	limits []limit // in the order given to NewLimiter
	order  []int   // decision order: indexes into limits
	names  []string
	policy []string // the RateLimit-Policy field, shared by every response; nil for none
	cfg    config
	obs    Observer
	slots  bool // some limit is Slots
	minTTL time.Duration
}

// NewLimiter returns a Limiter deciding limits, whose KeyFuncs it ignores
// (they may be nil): the caller gives the keys to Decide. The options that
// concern HTTP answers (OnRefusal, OnKeyError, OnStoreError, LegacyHeaders)
// are ignored too. The error wraps pace.ErrInvalidArgument when the list is
// empty, a limit or an option is invalid (see the Limit constructors and
// their options), or two Pace limits have the same *pace.Pace (a Pace keeps
// one table of keys, so a client id could then spend an address's pace);
// or it is the error of the WithObserver function.
func NewLimiter(limits []Limit, opts ...Option) (*Limiter, error) {
	return newLimiter(limits, opts, false)
}

func newLimiter(limits []Limit, opts []Option, needKey bool) (*Limiter, error) {
	cfg := newConfig(opts)
	if cfg.err != nil {
		return nil, cfg.err
	}
	if len(limits) == 0 {
		return nil, invalidf("no limits")
	}
	l := &Limiter{cfg: cfg, limits: make([]limit, len(limits))}
	seen := make(map[string]bool, len(limits))
	paces := make(map[*pace.Pace]string, len(limits))
	var policy []string
	for i, lim := range limits {
		c, err := compile(lim, i, needKey)
		if err != nil {
			return nil, err
		}
		for _, name := range append([]string{c.name}, c.quotas...) {
			if seen[name] {
				return nil, invalidf("two limits (or a limit and a quota of a Shared limit) named %q", name)
			}
			seen[name] = true
		}
		if c.kind == kindPace {
			if other, ok := paces[c.pace]; ok {
				return nil, invalidf("limits %q and %q share one *pace.Pace, so their keys would share one table: give each its own", other, c.name)
			}
			paces[c.pace] = c.name
		}
		l.limits[i] = c
		l.names = append(l.names, c.name)
		if c.policy != "" {
			policy = append(policy, c.policy)
		}
		if c.kind == kindSlots {
			l.slots = true
			if l.minTTL == 0 || c.ttl < l.minTTL {
				l.minTTL = c.ttl
			}
		}
	}
	if len(policy) > 0 {
		l.policy = []string{strings.Join(policy, ", ")}
	}
	for _, undoable := range []bool{true, false} {
		for i := range l.limits {
			if l.limits[i].undoable() == undoable {
				l.order = append(l.order, i)
			}
		}
	}
	if cfg.newObserver != nil {
		o, err := cfg.newObserver(append([]string(nil), l.names...))
		if err != nil {
			return nil, err
		}
		l.obs = o
	}
	return l, nil
}

// Names returns the names of the limits, in the order given to NewLimiter
// (the index of a name is the limit's index in Observer and Ticket).
func (l *Limiter) Names() []string { return append([]string(nil), l.names...) }

// Policy returns the RateLimit-Policy field of the limits: one item per
// limit that is a quota (Pace, Shared, Bucket), as in `"per-ip";q=20;w=1`,
// and one per pace.WithQuota of a Shared (see Shared), or "" when no limit
// is a quota (Slots only).
func (l *Limiter) Policy() string {
	if l.policy == nil {
		return ""
	}
	return l.policy[0]
}

// DryRun reports whether the Limiter was built with the DryRun option: its
// caller then serves refused requests as if admitted.
func (l *Limiter) DryRun() bool { return l.cfg.dryRun }

func (l *Limiter) observe(i int, o Outcome) {
	if l.obs != nil {
		l.obs.Observe(i, o)
	}
}

// Outcome is what happened to a request, or to one limit of it.
type Outcome uint8

const (
	// Admitted: the limit took (an event of a Pace, a token of a Bucket, a
	// slot); for a Ticket, every limit did.
	Admitted Outcome = iota + 1
	// Refused: the limit had nothing left; for a Ticket, one limit refused
	// and the earlier ones were given back.
	Refused
	// Returned: what the limit took was given back (after a later limit
	// refused, by ReturnOn, or by Return). Admitted − Returned is spent.
	Returned
	// KeyFailed: the limit's key could not be read from the request.
	KeyFailed
	// StoreFailed: the limit's Store returned an error.
	StoreFailed
)

var outcomeNames = [...]string{
	Admitted:    "admitted",
	Refused:     "refused",
	Returned:    "returned",
	KeyFailed:   "key_error",
	StoreFailed: "store_error",
}

// String returns admitted, refused, returned, key_error or store_error (the
// value of the outcome label of package instrument's metrics).
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) && o > 0 {
		return outcomeNames[o]
	}
	return "unknown"
}

// Outcomes lists every Outcome, in order.
var Outcomes = []Outcome{Admitted, Refused, Returned, KeyFailed, StoreFailed}

// Observer receives the decisions of a Limiter (and so of a Middleware),
// for metrics: see WithObserver and package instrument. Observe is called
// on the decision path, once per limit and outcome, with the limit's index
// in the list given to New; it must be fast and safe for concurrent use by
// multiple goroutines.
type Observer interface {
	Observe(limit int, o Outcome)
}

// holdState is what a Ticket holds of one limit.
type holdState uint8

const (
	holdNone     holdState = iota // nothing, or given back
	holdTaken                     // a Pace, Shared or Bucket reservation, returnable
	holdPeeked                    // DecideAfterVerify: looked at, not taken
	holdSlot                      // a slot, released by Finish
	holdReturned                  // a reservation given back: reported as the next request sees it
	holdSettled                   // a reservation of a Cost settled (Settle): reported as the next request sees it
)

type hold struct {
	state  holdState
	res    pace.Reservation        // holdTaken, of a Pace
	shared *pace.SharedReservation // holdTaken, of a Shared: kept apart, so that a Ticket of Pace limits stays small
	key    string                  // holdPeeked: the key; holdSlot, and holdTaken of a Bucket: the store key
	bucket *bucketHold             // holdTaken, of a Bucket: kept apart too
	left   int                     // holdReturned, holdSettled: the whole events left after the return
	full   int64                   // holdReturned, holdSettled: the seconds, rounded up, until the bucket is full after it
	n      int                     // the units reserved by a Cost; 0 for one
}

// bucketHold is what a Ticket keeps of a Bucket limit's take.
type bucketHold struct {
	receipt driver.Receipt // what Store.Refund needs
	left    int            // the whole tokens the store reported left
	reset   time.Duration  // the time the store reported until the bucket is full
}

// remaining reports the events left after the take of limit i, a Pace,
// Shared or Bucket limit.
func (t *Ticket) remaining(i int) int {
	h := &t.holds[i]
	switch t.l.limits[i].kind {
	case kindShared:
		return h.shared.Remaining()
	case kindBucket:
		return h.bucket.left
	}
	return h.res.Remaining()
}

// fullIn reports, in whole seconds rounded up, when the bucket of limit i,
// a Pace, Shared or Bucket limit, is full again after the take: a Bucket's
// as its store reported it, which counts the part of a token left; a
// Shared's that of its tightest limit, the one remaining reports
// (pace.SharedReservation.FullIn); a Pace's from the whole events left
// (see limit.fullIn).
func (t *Ticket) fullIn(i int) int64 {
	h := &t.holds[i]
	switch {
	case h.bucket != nil:
		return ceilSeconds(h.bucket.reset)
	case h.shared != nil:
		return ceilSeconds(h.shared.FullIn())
	}
	return t.l.limits[i].fullIn(t.remaining(i))
}

// left returns the whole events limit i, a Pace, Shared or Bucket limit,
// has left after the take and the seconds until it is full, as the next
// request sees them (one event more after a give-back).
func (t *Ticket) left(i int) (int, int64) {
	if h := &t.holds[i]; h.state == holdReturned || h.state == holdSettled {
		return h.left, h.full
	}
	return t.remaining(i), t.fullIn(i)
}

// field returns the RateLimit field of limit i, a Pace, Shared or Bucket
// limit, after its take (see limit.field).
func (t *Ticket) field(i int, one *[1]string) []string {
	lim := &t.l.limits[i]
	if lim.kind == kindPace && t.holds[i].state == holdTaken {
		// A Pace's window follows from its count (see Ticket.fullIn): the
		// cached field of its count, asked once.
		return lim.field(t.remaining(i), one)
	}
	r, full := t.left(i)
	if full != lim.fullIn(r) { // not the cached field of r
		return cached(nil, 0, one, func() string { return lim.item(r, full) })
	}
	return lim.field(r, one)
}

// inlineHolds is the number of limits a Ticket holds without allocating:
// two covers the usual pair (per address, per client) and keeps the
// per-request allocation of a Middleware small.
const inlineHolds = 2

// Ticket is one request's decision by a Limiter: what it took from each
// limit, and what it may give back. Fill it with Limiter.Decide; then,
// while the request is served, Verify (for DecideAfterVerify limits) and
// Return as the request requires; and call Finish exactly once when it is
// done, whatever the outcome, to give back by ReturnOn and release slots.
// A Ticket must not be copied once Decide has filled it. Its methods are
// safe for concurrent use.
type Ticket struct {
	mu       sync.Mutex
	outcome  Outcome
	finished bool
	failed   int32 // the index of the limit that refused or failed
	l        *Limiter
	ctx      context.Context // of the decision
	inline   [inlineHolds]hold
	holds    []hold // by limit index
	wait     time.Duration
	err      error
	pending  int        // limits looked at, not yet taken
	returned bool       // something was given back (or settled) since the decision
	settled  bool       // Settle was called
	ref      *refresher // keeps the slots alive until Finish
}

// Decide decides one request: for each limit, in decision order, it asks
// key for the limit's key (i is the index in the list given to
// NewLimiter), then decides, stopping at the first refusal or error and
// giving back what the earlier limits took; after a refusal it also asks
// for the keys of the limits it did not reach, to ask their waits, taking
// nothing (a Store limit takes and gives back at once; see
// Ticket.Refusal). It returns and records the
// outcome in t, which it resets first: Admitted, Refused (Ticket.Refusal),
// KeyFailed or StoreFailed (Ticket.Err). An empty key, or one longer than
// MaxKeyLen, is a key error. Store calls use ctx.
//
// After Admitted, slots are held until Finish, refreshed every third of
// their ttl meanwhile; the caller must call Finish. After any other outcome
// nothing is held and Finish does nothing. If key (or a Store) panics, what
// the earlier limits took is given back before the panic goes on.
func (l *Limiter) Decide(ctx context.Context, t *Ticket, key func(i int) (string, error)) Outcome {
	return l.DecideN(ctx, t, key, nil)
}

// DecideN is Decide for limits with a Cost: it reserves, of each of them,
// the units cost returns (i is the limit's index), asked after its key. An
// error of cost, or a count below 1 or above the limit's bucket, is a key
// error (KeyFailed; see Cost), and nothing is taken of any limit. A nil
// cost counts one unit for every limit; the limits without a Cost are
// never asked. Settle settles what they reserved.
func (l *Limiter) DecideN(ctx context.Context, t *Ticket, key func(i int) (string, error), cost func(i int) (int, error)) Outcome {
	if t.l != nil {
		t.reset() // reused: a fresh Ticket is zero already
	}
	t.l, t.ctx, t.failed = l, ctx, -1
	defer func() {
		if t.outcome == 0 { // undecided: a panic is on its way up
			t.undo(ctx, true)
		}
	}()
	if len(l.limits) <= inlineHolds {
		t.holds = t.inline[:len(l.limits)]
	} else {
		t.holds = make([]hold, len(l.limits))
	}
	for pos, i := range l.order {
		lim, h := &l.limits[i], &t.holds[i]
		k, err := key(i)
		if err == nil {
			k, err = checkKey(k)
		}
		if err != nil {
			return t.fail(ctx, i, KeyFailed, err)
		}
		switch lim.kind {
		case kindPace:
			if lim.afterVerify {
				if ok, wait := lim.pace.Peek(k); !ok {
					return t.refuseAt(ctx, pos, wait, key, cost)
				}
				h.state, h.key = holdPeeked, k
				t.pending++
				continue
			}
			if lim.costed {
				n, err := l.costOf(i, cost)
				if err != nil {
					return t.fail(ctx, i, KeyFailed, err)
				}
				h.res, h.n = lim.pace.ReserveN(k, n), n
			} else {
				h.res = lim.pace.Reserve(k)
			}
			if !h.res.OK() {
				return t.refuseAt(ctx, pos, h.res.RetryAfter(), key, cost)
			}
			h.state = holdTaken
		case kindShared:
			n := 1
			if lim.costed {
				if n, err = l.costOf(i, cost); err != nil {
					return t.fail(ctx, i, KeyFailed, err)
				}
				h.n = n
			}
			r, err := lim.shared.ReserveN(ctx, lim.storeKey(k), n)
			if err != nil {
				return t.fail(ctx, i, StoreFailed, err)
			}
			if !r.OK() {
				return t.refuseAt(ctx, pos, r.RetryAfter(), key, cost)
			}
			h.shared = &r
			h.state = holdTaken
		case kindBucket:
			sk := lim.storeKey(k)
			g, err := lim.taker.Take(ctx, sk, lim.shapes)
			if err != nil {
				return t.fail(ctx, i, StoreFailed, err)
			}
			if !g.OK {
				return t.refuseAt(ctx, pos, g.RetryAfter, key, cost)
			}
			if g.Receipt == (driver.Receipt{}) {
				// Admitted by a failure policy (pace.WithFailurePolicy):
				// nothing was taken, so there is nothing to give back and
				// no count to report.
				break
			}
			h.state, h.key, h.bucket = holdTaken, sk, &bucketHold{receipt: g.Receipt, left: g.Remaining, reset: g.Reset}
		case kindSlots:
			sk := lim.storeKey(k)
			ok, current, err := lim.slotter.AcquireSlot(ctx, sk, lim.slots, lim.ttl)
			if err != nil {
				return t.fail(ctx, i, StoreFailed, err)
			}
			if !ok {
				return t.refuseAt(ctx, pos, slotRetryAfter, key, cost)
			}
			if current == 0 {
				// Admitted by a failure policy: no slot was acquired, so
				// none is released or refreshed.
				break
			}
			h.state, h.key = holdSlot, sk
		}
		l.observe(i, Admitted)
	}
	t.outcome = Admitted
	if l.slots {
		t.ref = newRefresher(l, ctx, t.holds) // nil when no slot is held
	}
	return Admitted
}

// slotRetryAfter is the Retry-After of a refusal by a Slots limit: no one
// knows when a slot will free.
const slotRetryAfter = time.Second

// refuse records a refusal by limit i and gives back what the ticket took
// (releasing slots too when release is set).
func (t *Ticket) refuse(ctx context.Context, i int, wait time.Duration, release bool) Outcome {
	t.l.observe(i, Refused)
	t.undo(ctx, release)
	t.outcome, t.failed, t.wait = Refused, int32(i), wait
	return Refused
}

// refuseAt records a refusal in Decide by the limit at position pos of the
// decision order, waiting wait, as refuse does; then, so that waiting the
// answer's Retry-After admits every limit, it asks each limit the decision
// did not reach how long it would refuse, and reports the one that would
// refuse for longest, with its wait, when that is longer. Their keys are
// read for this, and the estimates of those with a Cost; one that cannot be
// read, or whose store fails, is skipped. The limits before pos fitted,
// and what they took is given back.
func (t *Ticket) refuseAt(ctx context.Context, pos int, wait time.Duration, key func(int) (string, error), cost func(int) (int, error)) Outcome {
	l := t.l
	i := l.order[pos]
	t.refuse(ctx, i, wait, true)
	for _, j := range l.order[pos+1:] {
		k, err := key(j)
		if err == nil {
			k, err = checkKey(k)
		}
		if err != nil {
			continue
		}
		n := 1
		if l.limits[j].costed {
			if n, err = l.costOf(j, cost); err != nil {
				continue
			}
		}
		if w := l.limits[j].waitFor(ctx, k, n, t.wait); w > t.wait {
			t.failed, t.wait = int32(j), w
		}
	}
	return Refused
}

// waitFor reports how long the limit would refuse n more events (one, or
// a Cost's estimate) for key, taking nothing: 0 when it would admit, or
// when it cannot tell (a store error). A Pace looks (Peek) at one event,
// and reserves n and gives them back at once (an exact refund); a Shared,
// a Bucket or a Slots limit, which the store cannot look at without
// taking, takes and gives back at once when it admits. A Bucket refuses one token for at most
// its interval, and a Slots limit for slotRetryAfter: they are asked only
// when that is longer than longest, the longest wait known.
func (lim *limit) waitFor(ctx context.Context, key string, n int, longest time.Duration) time.Duration {
	switch lim.kind {
	case kindPace:
		if n > 1 {
			r := lim.pace.ReserveN(key, n)
			r.Return()
			return r.RetryAfter()
		}
		_, w := lim.pace.Peek(key)
		return w
	case kindShared:
		r, err := lim.shared.ReserveN(ctx, lim.storeKey(key), n)
		if err != nil {
			return 0
		}
		_ = r.Return(context.WithoutCancel(ctx)) // a failed return leaves it spent: stricter
		return r.RetryAfter()
	case kindBucket:
		if longest >= lim.interval {
			return 0 // a take of one token waits at most the interval of one
		}
		sk := lim.storeKey(key)
		g, err := lim.taker.Take(ctx, sk, lim.shapes)
		if err != nil {
			return 0
		}
		if g.OK && g.Receipt != (driver.Receipt{}) {
			rctx, cancel := releaseContext(ctx)
			_ = lim.taker.Refund(rctx, sk, lim.shapes, g.Receipt)
			cancel()
		}
		return g.RetryAfter
	case kindSlots:
		if longest >= slotRetryAfter {
			return 0
		}
		sk := lim.storeKey(key)
		ok, current, err := lim.slotter.AcquireSlot(ctx, sk, lim.slots, lim.ttl)
		if err != nil {
			return 0
		}
		if !ok {
			return slotRetryAfter
		}
		if current > 0 {
			rctx, cancel := releaseContext(ctx)
			lim.slotter.ReleaseSlot(rctx, sk)
			cancel()
		}
	}
	return 0
}

// fail records an error of limit i and gives back what the ticket took.
func (t *Ticket) fail(ctx context.Context, i int, o Outcome, err error) Outcome {
	t.l.observe(i, o)
	t.undo(ctx, true)
	t.outcome, t.failed, t.err = o, int32(i), err
	return o
}

// undo gives back every returnable hold, and releases slots when release
// is set. Slots are released with a context that the request's end does not
// cancel (see releaseContext): a client that goes away mid-decision must
// not leave its slot held until the ttl.
func (t *Ticket) undo(ctx context.Context, release bool) {
	var cancel context.CancelFunc
	defer func() {
		if cancel != nil {
			cancel()
		}
	}()
	for j := len(t.l.order) - 1; j >= 0; j-- {
		i := t.l.order[j]
		switch h := &t.holds[i]; h.state {
		case holdTaken:
			t.giveBack(i)
		case holdPeeked:
			h.state = holdNone
		case holdSlot:
			if release {
				if cancel == nil {
					ctx, cancel = releaseContext(ctx)
				}
				t.l.limits[i].slotter.ReleaseSlot(ctx, h.key) // a failed release expires with the ttl
				h.state = holdNone
				t.l.observe(i, Returned)
			}
		}
	}
	t.pending = 0
}

// giveBack returns the reservation of limit i, once: the one place that
// knows how each kind gives back. A Shared reservation is given back at the
// store with the decision's context, without its cancellation; a Bucket
// token by Store.Refund, with that context bounded by releaseTimeout. A
// store error leaves either spent: stricter, never over the limit.
func (t *Ticket) giveBack(i int) {
	h, lim := &t.holds[i], &t.l.limits[i]
	// What the next request sees: the events of the take more than it
	// left (one, or a Cost's), up to the whole quota, and a bucket as many
	// intervals nearer full.
	n := units(h)
	left := min(t.remaining(i)+n, int(lim.q))
	full := lim.fullIn(left)
	switch {
	case h.bucket != nil:
		full = ceilSeconds(max(0, h.bucket.reset-lim.interval))
	case h.shared != nil:
		// As many intervals of the pace nearer full: at most that of the
		// tightest limit, whose interval is the pace's or longer.
		full = ceilSeconds(max(0, h.shared.FullIn()-time.Duration(n)*lim.interval))
	}
	switch lim.kind {
	case kindShared:
		_ = h.shared.Return(context.WithoutCancel(t.ctx))
	case kindBucket:
		ctx, cancel := releaseContext(t.ctx)
		_ = lim.taker.Refund(ctx, h.key, lim.shapes, h.bucket.receipt)
		cancel()
	default:
		h.res.Return()
	}
	h.state, h.left, h.full, h.bucket, h.shared = holdReturned, left, full, nil, nil
	t.returned = true
	t.l.observe(i, Returned)
}

// returnOn gives back, when the handler's final status is known, each
// limit whose ReturnOn holds status: before the response's header is
// written, so that its RateLimit field reports what the next request will
// see. Finish then finds them given back.
func (t *Ticket) returnOn(status int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.finished || t.outcome != Admitted {
		return
	}
	for i := range t.holds {
		if t.holds[i].state == holdTaken && t.l.limits[i].returnOn.has(status) {
			t.giveBack(i)
		}
	}
}

// Outcome reports the outcome of the decision (or of Verify, once it has
// refused): Admitted, Refused, KeyFailed, StoreFailed; zero before Decide.
func (t *Ticket) Outcome() Outcome {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.outcome
}

// Refusal reports, after a refusal, the index and name of the limit that
// refused and the time after the decision at which it would admit (one
// second for Slots); otherwise -1, "" and 0. When a limit the decision did
// not reach would refuse for longer (Decide, and Verify, ask them after a
// refusal, taking nothing), it is that limit and its wait, so that waiting
// retryAfter passes every limit of the request. Observer counts the
// refusal against the limit that decided it.
func (t *Ticket) Refusal() (limit int, name string, retryAfter time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.outcome != Refused {
		return -1, "", 0
	}
	return int(t.failed), t.l.names[t.failed], t.wait
}

// Err reports, after KeyFailed or StoreFailed, the index of the limit
// whose key or store failed and the error; otherwise -1 and nil.
func (t *Ticket) Err() (limit int, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err == nil {
		return -1, nil
	}
	return int(t.failed), t.err
}

// Verify takes the events of the DecideAfterVerify limits, which Decide
// only looked at: call it once the presentation is verified. It reports
// whether every one fitted. If one no longer fits, Verify gives back
// everything the ticket took that can be given back (Pace and Shared
// events, Bucket tokens; slots stay held until Finish), records the refusal (Outcome, Refusal) and reports false: the
// request must be refused. It reports true when there is nothing to take (no such limit,
// or Verify was already called and succeeded), and false after any outcome
// but Admitted or after Finish. Under DryRun it decides and counts as usual
// but always reports true.
func (t *Ticket) Verify() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.outcome != Admitted || t.finished {
		return t.l != nil && t.l.cfg.dryRun
	}
	for _, i := range t.l.order {
		h := &t.holds[i]
		if h.state != holdPeeked {
			continue
		}
		if h.res = t.l.limits[i].pace.Reserve(h.key); !h.res.OK() {
			h.state = holdNone
			wait := h.res.RetryAfter()
			// The limits of the request that fitted are given back, so they
			// fit again; of those still to verify, the longest wait counts,
			// so that waiting Retry-After admits every one.
			failed := i
			for _, j := range t.l.order {
				if hj := &t.holds[j]; hj.state == holdPeeked {
					if _, w := t.l.limits[j].pace.Peek(hj.key); w > wait {
						failed, wait = j, w
					}
				}
			}
			t.refuse(t.ctx, i, wait, false)
			t.failed = int32(failed)
			return t.l.cfg.dryRun
		}
		h.state = holdTaken
		t.l.observe(i, Admitted)
	}
	t.pending = 0
	return true
}

// Return gives back everything the ticket holds that can be given back, at
// once: the reservations of Pace, Shared and Bucket limits, with or without
// ReturnOn, and the events DecideAfterVerify limits have not taken yet
// (they will not be). Slots stay held until Finish, and a limit settled by
// Settle stays settled. Calling it again, or after Finish, does nothing.
func (t *Ticket) Return() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.finished || t.outcome != Admitted {
		return
	}
	for i := range t.holds {
		switch h := &t.holds[i]; h.state {
		case holdTaken:
			t.giveBack(i)
		case holdPeeked:
			h.state = holdNone
		}
	}
	t.pending = 0
}

// Finish ends the request with the given status (an HTTP status; a gRPC
// interceptor maps its code to one): it gives back each limit whose
// ReturnOn holds status, takes the events of DecideAfterVerify limits the
// handler never verified if status says the presentation was accepted
// (below 400 and not one of their ReturnOn statuses), releases the slots
// and stops their refresh. Only the first call does anything.
//
// An unverified event is taken whether or not it still fits (pace.Pace.Debit):
// the request was served, so it counts, pushing the key's bucket into debt
// if need be; the key is then refused until the pace has repaid it.
func (t *Ticket) Finish(status int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.finished || t.l == nil {
		return
	}
	t.finished = true
	if t.ref != nil {
		t.ref.halt()
	}
	// After a refusal (by Verify, say) only slots are still held: release
	// them whatever the outcome.
	var ctx context.Context
	var cancel context.CancelFunc
	defer func() {
		if cancel != nil {
			cancel()
		}
	}()
	for i := range t.holds {
		lim, h := &t.l.limits[i], &t.holds[i]
		switch h.state {
		case holdTaken:
			if lim.returnOn.has(status) {
				t.giveBack(i)
			}
		case holdPeeked:
			h.state = holdNone
			if accepted(status) && !lim.returnOn.has(status) {
				// The request was served: its event counts whether or not it
				// still fits, into debt if need be, so that the pace holds
				// over time (Allow would drop it once the bucket is empty).
				lim.pace.Debit(h.key)
				t.l.observe(i, Admitted)
			}
		case holdSlot:
			if ctx == nil {
				ctx, cancel = releaseContext(t.ctx)
			}
			lim.slotter.ReleaseSlot(ctx, h.key) // a failed release expires with the ttl
			h.state = holdNone
		}
	}
	t.pending = 0
}

// releaseTimeout bounds the Store call that releases a request's slots. A
// release that fails or times out is not retried: the slot expires with its
// ttl.
const releaseTimeout = 5 * time.Second

// releaseContext returns the context of a slot release for a request whose
// context is parent: its values, but not its cancellation (the request may
// be over, or its client gone, which is when slots must be released), and a
// deadline of releaseTimeout so that a hung Store cannot hold the caller.
func releaseContext(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(parent), releaseTimeout)
}

// accepted reports whether a request answered with status was accepted,
// for a DecideAfterVerify limit whose handler did not say: an error status
// means the presentation was not.
func accepted(status int) bool { return status < 400 }

// refresher extends the ttl of the slots one admission holds every third
// of the shortest ttl, until Finish halts it. It is apart from the Ticket,
// which is recycled (a Middleware's) or reused (a Limiter caller's) once
// finished: a refresh that fired while Finish ran, and runs after it, finds
// its refresher halted and touches nothing else.
type refresher struct {
	l     *Limiter
	ctx   context.Context // of the decision, without its cancellation
	slots []slotRef
	every time.Duration

	mu     sync.Mutex
	halted bool        // guarded by mu
	stop   func() bool // the armed timer; guarded by mu
}

// slotRef is one slot a refresher keeps alive: the limit's index and the
// store key.
type slotRef struct {
	limit int
	key   string
}

// newRefresher returns the refresher of the slots in holds, armed, or nil
// when they hold none (every Slots limit admitted by a failure policy).
func newRefresher(l *Limiter, ctx context.Context, holds []hold) *refresher {
	r := &refresher{l: l, ctx: context.WithoutCancel(ctx), every: l.minTTL / 3}
	for i := range holds {
		if h := &holds[i]; h.state == holdSlot {
			r.slots = append(r.slots, slotRef{i, h.key})
		}
	}
	if len(r.slots) == 0 {
		return nil
	}
	r.mu.Lock()
	r.stop = l.cfg.afterFunc(r.every, r.refresh)
	r.mu.Unlock()
	return r
}

// halt stops the refreshes: none starts after it returns, and one under way
// arms no other.
func (r *refresher) halt() {
	r.mu.Lock()
	r.halted = true
	stop := r.stop
	r.mu.Unlock()
	stop()
}

// refresh extends the slots' ttl and arms the next refresh, unless halted.
// The store calls are made without the lock, so that halt never waits for
// a slow store.
func (r *refresher) refresh() {
	r.mu.Lock()
	halted := r.halted
	r.mu.Unlock()
	if halted {
		return
	}
	ctx, cancel := context.WithTimeout(r.ctx, r.every)
	for _, s := range r.slots {
		lim := &r.l.limits[s.limit]
		lim.slotter.RefreshSlot(ctx, s.key, lim.ttl) // a failure is retried at the next refresh
	}
	cancel()
	r.mu.Lock()
	if !r.halted {
		r.stop = r.l.cfg.afterFunc(r.every, r.refresh)
	}
	r.mu.Unlock()
}

// RateLimit returns the RateLimit field for the ticket (draft-ietf-httpapi-
// ratelimit-headers): after an admission, one item per limit taken but
// Slots, with the events its key has left and when its bucket is full
// again (for a limit given back since, what the next request will see: one
// more event); after a refusal, the refusing limit's item with r=0 and t
// the wait in whole seconds, rounded up. It is "" when there is no item.
func (t *Ticket) RateLimit() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var one [1]string
	return strings.Join(t.rateLimit(&one), ", ")
}

// rateLimit returns the RateLimit field lines: a single limit's is shared
// and must not be written into, or is one[:] (so one must live as long as
// the result). t.mu is held, or the ticket not yet shared.
func (t *Ticket) rateLimit(one *[1]string) []string {
	if t.outcome == Refused {
		lim := &t.l.limits[t.failed]
		if !lim.reportsRemaining() {
			return nil
		}
		return lim.refusedField(retryAfterSeconds(t.wait), one)
	}
	n := 0
	var f []string
	for i := range t.holds {
		if t.reports(i) {
			n++
			f = t.field(i, one)
		}
	}
	if n <= 1 {
		return f
	}
	// Several limits: one field line each, which RFC 8941 reads as one list.
	all := make([]string, 0, n)
	for i := range t.holds {
		if t.reports(i) {
			all = append(all, t.field(i, one)[0])
		}
	}
	return all
}

// reports reports whether limit i has an item in the RateLimit field of an
// admission: a quota taken, or given back since (with what it left then).
func (t *Ticket) reports(i int) bool {
	s := t.holds[i].state
	return (s == holdTaken || s == holdReturned || s == holdSettled) && t.l.limits[i].reportsRemaining()
}

// retryAfterSeconds rounds a wait up to whole seconds, at least one, so
// that a client waiting that long finds the event fits.
func retryAfterSeconds(d time.Duration) int64 {
	return max(1, ceilSeconds(d))
}

// reset makes t, which no one else uses, a zero Ticket again, for reuse,
// dropping what it referred to (the request's context, keys): field by
// field, so that only the holds in use are cleared.
func (t *Ticket) reset() {
	clear(t.holds)
	t.outcome, t.finished, t.failed, t.pending, t.returned, t.settled = 0, false, 0, 0, false, false
	t.l, t.ctx, t.holds, t.wait, t.err, t.ref = nil, nil, nil, 0, nil, nil
}
