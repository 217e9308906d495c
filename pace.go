package pace

import (
	"math"
	"time"

	"github.com/ratepace/pace/driver"
	"github.com/ratepace/pace/internal/table"
)

// Pace is a keyed pace: at most N events per second for each key, with a
// bucket of max(1, N) events (one second of the pace; WithBurst sets
// another) refilled continuously. A new key starts full, and nothing
// accumulates beyond the bucket: an hour of silence earns no hour-long
// burst.
//
// Reserve debits and decides in one atomic step; Reservation.Return gives
// the event back when the request is then rejected for another reason, so a
// forger naming someone else's key spends none of its pace. Allow is a
// Reserve never returned. Full buckets are forgotten: memory is bounded by
// the keys that took within the last two refill times of a whole bucket (one
// second each at N >= 1).
//
// The pace is per process: N replicas give a client up to N × the pace (see
// Shared). A decision takes no lock and writes only its key's 8 bytes. Pace
// must be created with New. It is safe for concurrent use by multiple
// goroutines. The long story is in docs/pace.md.
type Pace struct {
	t     table.Table
	b     driver.Shape
	burst int // Burst, for ReserveN
	obs   Observer
}

// maxRate is the highest pace New accepts, in events per second per key: one
// event per nanosecond.
const maxRate = 1e9

// New returns a Pace of perSecond events per second for each key.
// perSecond must be a positive finite number no larger than 1e9 (one event per nanosecond), and not
// so small that one event takes longer than about 73 years to refill;
// otherwise the error wraps ErrInvalidArgument, as it does for an invalid
// WithBurst.
//
// The pace is per process: N replicas give a client up to N × perSecond.
func New(perSecond float64, opts ...Option) (*Pace, error) {
	b, err := paceShape(perSecond)
	if err != nil {
		return nil, err
	}
	cfg, err := newConfig(forNew, opts)
	if err != nil {
		return nil, err
	}
	if b, err = cfg.burstShape(b, perSecond); err != nil {
		return nil, err
	}
	p := &Pace{b: b, burst: int(b.Tolerance() / b.Interval()), obs: cfg.observer}
	p.t.Init(cfg.clock, p)
	p.t.Widen(b)
	return p, nil
}

// burstShape returns the bucket of a pace of perSecond events per second
// whose default bucket is b, with the capacity of WithBurst if given.
func (c *config) burstShape(b driver.Shape, perSecond float64) (driver.Shape, error) {
	if !c.burstSet {
		return b, nil
	}
	if !(c.burst >= 1) || math.IsInf(c.burst, 1) {
		return b, invalid("burst of %v events is not a finite number >= 1", c.burst)
	}
	b, err := driver.NewShape(c.burst, perSecond, 1)
	if err != nil {
		// the only rule left: n events must refill within MaxTolerance
		return b, invalid("burst of %v events at %v per second takes longer than %v to refill", c.burst, perSecond, driver.MaxTolerance)
	}
	return b, nil
}

// paceShape returns the bucket of a pace of perSecond events per second: one
// second of the pace, at least one event. See New for the rules.
func paceShape(perSecond float64) (driver.Shape, error) {
	if !finitePositive(perSecond) || perSecond > maxRate {
		return driver.Shape{}, invalid("pace of %v per second is not a positive finite number up to %g", perSecond, float64(maxRate))
	}
	return driver.NewShape(math.Max(1, perSecond), perSecond, 1)
}

// Reserve debits one event from key's bucket and reports, in the returned
// Reservation, whether it fitted. A refused reservation debits nothing. Any
// string is a key, the empty one included; only a 64-bit hash of it is kept.
//
// Reserve-then-Return suits checks that take microseconds. When the check
// that may lead to Return is slow (a password hash, a remote call), forgers
// naming a client keep its events reserved while they are checked; use Peek
// before the check and Reserve or Allow after it instead.
func (p *Pace) Reserve(key string) Reservation {
	v := p.reserve(key, 1)
	return Reservation{gen: v.gen, key: v.key, at: v.at, d: v.d}
}

// ReserveN debits n events from key's bucket in one atomic step, all of
// them or none, and reports in the returned Reservation whether they
// fitted: for a cost known only afterwards (the tokens of an LLM call),
// reserve an estimate and Settle the reservation at the actual. n must be
// between 1 and Burst: more can never fit, whatever the wait, and fewer is
// no reservation; either is refused, debiting nothing, and its RetryAfter
// reports math.MaxInt64 (never). Reserve is ReserveN(key, 1).
func (p *Pace) ReserveN(key string, n int) Reservation {
	if uint(n-1) >= uint(p.burst) {
		if p.obs != nil {
			p.obs.Decided(SourceMemory, false)
		}
		return Reservation{d: -math.MaxInt64}
	}
	v := p.reserve(key, n)
	return Reservation{gen: v.gen, key: v.key, at: v.at, d: v.d, more: n - 1}
}

// verdict is a decision of reserve, the fields of its Reservation but the
// count: four words, which Go returns in registers.
type verdict struct {
	gen   *table.Gen
	key   uint64
	at, d int64
}

// reserve debits n events (1 <= n <= Burst) from key's bucket: Reserve and
// ReserveN. It is too large to be inlined, which keeps Reserve small enough
// to be: inlined, Reserve builds its Reservation in the caller from the
// four words of the verdict, and the compiler writes them where the caller
// keeps the Reservation, or not at all when the caller only reads OK. A
// Reservation built otherwise (returned from a call, or with a fifth field
// set, as ReserveN does) is stored to a temporary and copied 16 bytes at a
// time from 8-byte stores, which the processor cannot forward to the loads:
// a stall of several nanoseconds in every caller, a fifth of a refusal.
func (p *Pace) reserve(key string, n int) verdict {
	h := p.t.Hash(key)
	var now int64
	if p.t.Clock == nil { // table.Table.Now, written out: its call cost a tenth of a refusal
		now = int64(time.Since(p.t.Epoch))
	} else {
		now = p.t.Clamped()
	}
	d, gen := p.t.Decide(h, int64(n)*int64(p.b.Interval()), int64(p.b.Tolerance()), now)
	if d == 0 {
		d, gen = p.t.DecideSlow(h, int64(n)*int64(p.b.Interval()), int64(p.b.Tolerance()), now)
	}
	if p.obs != nil {
		p.obs.Decided(SourceMemory, d > 0) // admitted, d is at least n intervals: above zero
	}
	return verdict{gen, h, now, d}
}

// Allow reports whether key may make one more event now, and debits it if
// so. It is a Reserve that is never returned.
func (p *Pace) Allow(key string) bool {
	return p.reserve(key, 1).d > 0
}

// Debit counts one event of key that has already happened, whether or not
// it fits, and reports whether it did: for an event admitted without a take
// (one decided by Peek, whose take was left for after the answer) that can
// no longer be refused. One that does not fit puts the bucket into debt, up
// to about 73 years: Reserve, Allow and Peek refuse the key until the pace
// has repaid it, so the key's events stay within the pace over time. A debit
// cannot be given back, and is not reported to the Observer.
func (p *Pace) Debit(key string) bool {
	now := p.t.Now()
	debt := driver.ShapeOf(p.b.Interval(), driver.MaxTolerance)
	tat, _, _, ok := p.t.TakeAt(p.t.Hash(key), debt, now)
	return ok && time.Duration(tat-now) <= p.b.Tolerance()
}

// Peek reports whether one event would fit key's bucket now, without
// debiting anything, and when it would not, the time until it would. It is
// the cheap first step of deciding after a slow check: Peek, refuse at once
// if it reports false, run the check, then Reserve (or Allow) only for a
// presentation that passed, and refuse if that take no longer fits. A
// presentation that fails its check then never holds any of the key's pace,
// however long the check takes and however many are in flight. Peek writes
// nothing and never fails open: its answer may be stale by the time of the
// take, which is why the take decides.
func (p *Pace) Peek(key string) (ok bool, retryAfter time.Duration) {
	_, wait, ok := p.t.PeekAt(p.t.Hash(key), p.b, p.t.Now())
	return ok, time.Duration(wait)
}

// Len reports the number of live rows: keys whose bucket was not full when
// last looked at.
func (p *Pace) Len() int { return p.t.Len() }

// Rate reports the pace enforced, in events per second per key: one event
// every ceil(1e9/perSecond) nanoseconds, which is the perSecond given to New
// up to that rounding (never faster; at paces near 1e9 the rounding is
// large: 3e8 is enforced as 2.5e8).
func (p *Pace) Rate() float64 { return float64(time.Second) / float64(p.b.Interval()) }

// Burst reports the capacity of each key's bucket in whole events: that of
// WithBurst, else max(1, rate × 1s), rounded down.
func (p *Pace) Burst() int { return p.burst }

// Reservation is the outcome of Pace.Reserve or ReserveN, kept in a
// variable:
//
//	res := p.Reserve(id)
//	if !res.OK() { tooMany(w, res.RetryAfter()); return }
//	if !valid(r) { res.Return(); deny(w); return }
//
// It is a small value that does not allocate. Its methods are not safe for
// concurrent use on the same variable, and have pointer receivers (so
// p.Reserve(id).OK() does not compile: keep the result in a variable).
//
// A Reservation must not be copied: go vet's copylocks check reports copies.
// Settle (and Return) disarms the variable it is called on, not its copies.
// A second Settle through a copy is often caught and gives nothing, but not
// always (a later take can stand exactly where the copied events stood),
// and then gives the events back twice: never copy one.
type Reservation struct {
	_ noCopy
	// gen is the Gen the take was decided under (see table.Table.RefundAt),
	// whose Owner is the Pace: one word for both, so that Reserve sets four
	// fields (see reserveOne). nil when d < 0 for ReserveN's n out of range.
	gen *table.Gen
	key uint64
	at  int64 // the clock reading of the decision
	// d > 0: admitted, and the debt the take left (its arrival time is at+d);
	// d < 0: refused, and -d is the wait until one event fits;
	// d = 0: the zero Reservation, or one already returned.
	d    int64
	more int // the events reserved beyond the first
}

// pace returns the Pace that made r, which must have a Gen.
func (r *Reservation) pace() *Pace { return r.gen.Owner.(*Pace) }

// noCopy makes go vet's copylocks check report copies of the struct that
// holds it. It takes no space.
type noCopy struct{}

func (*noCopy) Lock()   {}
func (*noCopy) Unlock() {}

// OK reports whether the events were admitted (and debited).
func (r *Reservation) OK() bool { return r.d > 0 }

// RetryAfter reports 0 when the reservation was admitted; when it was
// refused, the exact time after the decision at which its events fit, or
// math.MaxInt64 when they never can (see ReserveN).
func (r *Reservation) RetryAfter() time.Duration {
	return time.Duration(max(-r.d, 0))
}

// Remaining reports how many whole events the key had left just after the
// decision: for a RateLimit-Remaining header. It is 0 when refused.
func (r *Reservation) Remaining() int {
	if r.d <= 0 {
		return 0
	}
	return r.pace().b.Remaining(time.Duration(r.d), 0)
}

// Return gives the reserved events back, as if the reservation had not
// been made: it is Settle(0). Called at once, it refunds all of them.
// Called later, it refunds what the bucket has not refilled of them since:
// time that has passed still refills the bucket, and events taken in between
// by others are theirs, not this reservation's to give back. Whatever the
// order and timing of returns, the events kept never exceed the pace in any
// window; when another reservation of the same shard was returned out of
// order since this one was made, a late Return may give back less than
// exactly (see driver.Shape.Refund). It never lifts the bucket above full. It does
// nothing on a refused reservation, on the zero Reservation, or when called
// a second time on the same variable.
func (r *Reservation) Return() { r.Settle(0) }

// Settle settles an admitted reservation of n events at used, the count
// actually spent, and disarms it. Fewer than n gives back the other n − used
// by the rules of a late Return: all of them when settled at once, never
// more than the bucket has not refilled of them, never above full. More
// than n debits used − n more, whether or not they fit, as Debit does: the
// key goes into debt (up to about 73 years) and its decisions are refused
// until the pace has repaid it, so a client that always reserves too little
// still gets no more than the pace over time. used below 0 counts as 0.
// Settle does nothing on a refused reservation, on the zero Reservation, or
// when called a second time on the same variable.
//
// For any key and any interval of length T, the events kept (reserved, as
// settled) are at most rate × T + Burst + the excess of the settlements
// made in that interval; docs/pace.md has the arithmetic.
func (r *Reservation) Settle(used int) {
	if r.d <= 0 {
		return
	}
	n, reserved := r.more+1, r.at+r.d
	r.d = 0
	p := r.pace()
	iv := int64(p.b.Interval())
	switch used = max(used, 0); {
	case used < n:
		if p.t.RefundAt(r.key, int64(n)*iv, int64(n-used)*iv, r.at, reserved, r.gen, p.t.Now()) && p.obs != nil {
			p.obs.Returned(SourceMemory)
		}
	case used > n:
		over := int64(driver.MaxTolerance)
		if extra := int64(used - n); extra < over/iv {
			over = extra * iv
		}
		p.t.Charge(r.key, over, p.t.Now())
	}
}
