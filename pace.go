package pace

import (
	"math"
	"time"

	"github.com/ratepace/pace/driver"
)

// Pace is a keyed pace: at most N events per second for each key, with a
// bucket of max(1, N) events refilled continuously. A new key starts full,
// and nothing accumulates beyond one second: an hour of silence earns no
// hour-long burst.
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
	t   Buckets
	b   driver.Shape
	obs Observer
}

// MaxRate is the highest pace New accepts, in events per second per key: one
// event per nanosecond.
const MaxRate = 1e9

// New returns a Pace of perSecond events per second for each key.
// perSecond must be a positive finite number no larger than MaxRate, and not
// so small that one event takes longer than about 73 years to refill;
// otherwise the error wraps ErrInvalidArgument.
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
	p := &Pace{b: b, obs: cfg.observer}
	p.t.init(cfg.clock)
	p.t.widen(b)
	return p, nil
}

// paceShape returns the bucket of a pace of perSecond events per second: one
// second of the pace, at least one event. See New for the rules.
func paceShape(perSecond float64) (driver.Shape, error) {
	if !finitePositive(perSecond) || perSecond > MaxRate {
		return driver.Shape{}, invalid("pace of %v per second is not a positive finite number up to %g", perSecond, float64(MaxRate))
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
	h := p.t.hash(key)
	now := p.t.now()
	tat, wait, gen, ok := p.t.take(h, p.b, now)
	if p.obs != nil {
		p.obs.Decided(SourceMemory, ok)
	}
	if !ok {
		return Reservation{p: p, key: h, at: now, d: -wait}
	}
	return Reservation{p: p, key: h, at: now, d: tat - now, gen: gen} // d is at least one interval
}

// Allow reports whether key may make one more event now, and debits it if
// so. It is a Reserve that is never returned.
func (p *Pace) Allow(key string) bool {
	r := p.Reserve(key)
	return r.d > 0
}

// Debit counts one event of key that has already happened, whether or not
// it fits, and reports whether it did: for an event admitted without a take
// (one decided by Peek, whose take was left for after the answer) that can
// no longer be refused. One that does not fit puts the bucket into debt, up
// to about 73 years: Reserve, Allow and Peek refuse the key until the pace
// has repaid it, so the key's events stay within the pace over time. A debit
// cannot be given back, and is not reported to the Observer.
func (p *Pace) Debit(key string) bool {
	now := p.t.now()
	debt := driver.ShapeOf(p.b.Interval(), driver.MaxTolerance)
	tat, _, _, ok := p.t.take(p.t.hash(key), debt, now)
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
	_, wait, ok := p.t.peek(p.t.hash(key), p.b, p.t.now())
	return ok, time.Duration(wait)
}

// Len reports the number of live rows: keys whose bucket was not full when
// last looked at.
func (p *Pace) Len() int { return p.t.Len() }

// Rate reports the pace enforced, in events per second per key: one event
// every ceil(1e9/perSecond) nanoseconds, which is the perSecond given to New
// up to that rounding (never faster; at paces near MaxRate the rounding is
// large: 3e8 is enforced as 2.5e8).
func (p *Pace) Rate() float64 { return float64(time.Second) / float64(p.b.Interval()) }

// Burst reports the capacity of each key's bucket in whole events:
// max(1, rate × 1s), rounded down.
func (p *Pace) Burst() int { return int(p.b.Tolerance() / p.b.Interval()) }

// Reservation is the outcome of Pace.Reserve, kept in a variable:
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
// Return disarms the variable it is called on, not its copies. A second
// Return through a copy is often caught and gives nothing, but not always (a
// later take can stand exactly where the copied event stood), and then gives
// the event back twice: never copy one.
type Reservation struct {
	_   noCopy
	p   *Pace
	key uint64
	at  int64 // the clock reading of the decision
	// d > 0: admitted, and the debt the take left (its arrival time is at+d);
	// d < 0: refused, and -d is the wait until one event fits;
	// d = 0: the zero Reservation, or one already returned.
	d   int64
	gen uint64 // the shard's out-of-order total before the take (see Buckets.refund)
}

// noCopy makes go vet's copylocks check report copies of the struct that
// holds it. It takes no space.
type noCopy struct{}

func (*noCopy) Lock()   {}
func (*noCopy) Unlock() {}

// OK reports whether the event was admitted (and debited).
func (r *Reservation) OK() bool { return r.d > 0 }

// RetryAfter reports 0 when the reservation was admitted; when it was
// refused, the exact time after the decision at which one event fits.
func (r *Reservation) RetryAfter() time.Duration {
	return time.Duration(max(-r.d, 0))
}

// Remaining reports how many whole events the key had left just after the
// decision: for a RateLimit-Remaining header. It is 0 when refused.
func (r *Reservation) Remaining() int {
	if r.d <= 0 {
		return 0
	}
	return r.p.b.Remaining(time.Duration(r.d), 0)
}

// Return gives the reserved event back, as if the reservation had not been
// made. Called at once, it refunds the whole event. Called later, it refunds
// what the bucket has not refilled of it since: time that has passed still
// refills the bucket, and events taken in between by others are theirs, not
// this reservation's to give back. Whatever the order and timing of returns,
// the events kept never exceed the pace in any window; when another
// reservation of the same shard was returned out of order since this one was
// made, a late Return may give back less than exactly (see driver.Shape.Refund).
// It never lifts the bucket above full. It does nothing on a refused
// reservation, on the zero Reservation, or when called a second time on the
// same variable.
func (r *Reservation) Return() {
	if r.d <= 0 {
		return
	}
	reserved := r.at + r.d
	r.d = 0
	p := r.p
	if p.t.refund(r.key, p.b, r.at, reserved, r.gen, p.t.now()) && p.obs != nil {
		p.obs.Returned(SourceMemory)
	}
}
