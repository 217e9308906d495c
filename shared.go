package pace

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/ratepace/pace/driver"
	"github.com/ratepace/pace/internal/table"
)

// Shared is Pace's keyed pace kept in a Store, so that every process using
// the same store shares one pace per key: N replicas behind a balancer give a
// client the pace once, not N times. WithQuota adds limits on the same key,
// taken all or nothing in one atomic step at the store, whose clock is the
// time of every decision.
//
// Reserve debits and decides in that one step; SharedReservation.Return
// gives an admitted event back. A key the store refused is refused in
// process until its retry-after, without a round trip, and decisions that
// arrive while a round trip is in flight share the next one. A store error
// is returned, or, with WithFallback, decided by a per-replica Pace.
//
// Shared must be created with NewShared. It is safe for concurrent use by
// multiple goroutines. The long story is in docs/replicas.md.
type Shared struct {
	s      driver.Taker
	shapes []driver.Shape
	local  table.Table // the local tier: refusals remembered until their retry-after
	obs    Observer

	fb        *Pace
	fbTimeout time.Duration
	brk       *breaker // with fb: open while the store fails, decisions going to fb

	rt batcher
}

// NewShared returns a Shared keeping a pace of perSecond events per second
// per key, with a bucket of one second of it (as New), in s, shared by every
// process that uses the same store. Options add quotas (WithQuota), a
// fallback (WithFallback) and metrics (WithObserver).
//
// The store keeps one arrival time per limit and key, by position: every
// Shared deciding the same keys in one store (every replica) must have the
// same pace and limits, in the same order. Give a Shared with other limits
// keys of its own (a prefix, or a store WithPrefix of its own).
//
// perSecond must be a positive finite number no larger than 1e9; s must
// not be nil; invalid options are reported too. The error then wraps
// ErrInvalidArgument.
func NewShared(s driver.Taker, perSecond float64, opts ...Option) (*Shared, error) {
	if s == nil {
		return nil, invalid("nil store")
	}
	first, err := paceShape(perSecond)
	if err != nil {
		return nil, err
	}
	cfg, err := newConfig(forShared, opts)
	if err != nil {
		return nil, err
	}
	if n := 1 + len(cfg.quotas); n > driver.MaxShapes {
		return nil, invalid("%d limits exceed MaxShapes (%d)", n, driver.MaxShapes)
	}
	p := &Shared{
		s:         s,
		shapes:    append([]driver.Shape{first}, cfg.quotas...),
		obs:       cfg.observer,
		fb:        cfg.fb,
		fbTimeout: cfg.fbTimeout,
	}
	p.rt.max, p.rt.trip = cfg.roundTrips, p.roundTrip
	if p.fb != nil {
		p.brk = &breaker{
			interval: p.fbTimeout,
			bound:    p.fbTimeout,
			now:      p.local.Now,
			probe: func(ctx context.Context) error {
				_, err := s.Take(ctx, probeKey, p.shapes)
				return err
			},
		}
	}
	p.local.Init(cfg.clock)
	for _, b := range p.shapes {
		// A refusal waits at most one interval of the shape that refused,
		// so every row expires within the longest tolerance: the horizon,
		// as in a Pace of that shape (one second by default).
		p.local.Widen(b)
	}
	return p, nil
}

// Reserve debits one event from every limit of key at the store, all or
// nothing, and reports in the returned SharedReservation whether it fitted,
// and if not when it will. A refused reservation debits nothing.
//
// key must be non-empty and at most driver.MaxKeyLen bytes, else the error wraps
// ErrInvalidArgument (and never contains the key). A store error is returned
// as it is, unless WithFallback was given, in which case the fallback
// decides. When ctx ends before the decision, Reserve returns at once with
// an error wrapping ctx.Err(); as with any store call cut short, the store
// may have debited the event all the same. A caller that gives up costs no
// other caller anything: a round trip that carries other decisions goes on
// for them, and ends only once every caller it carries has given up. A
// Store that panics panics in one caller of the round trip (the one whose
// decision went alone, or one of those it carried); the others of that
// round trip return an error.
func (p *Shared) Reserve(ctx context.Context, key string) (SharedReservation, error) {
	if err := driver.ValidateKey(key); err != nil {
		return SharedReservation{}, err
	}
	h := p.local.Hash(key)
	now := p.local.Now()
	if wait, refused := p.held(h, now); refused {
		p.decided(SourceHeld, false)
		return SharedReservation{p: p, dec: decision{d: -wait, via: SourceHeld}}, nil
	}
	if p.brk != nil && !p.brk.closed() {
		return SharedReservation{p: p, key: key, dec: p.fallback(key)}, nil
	}
	dec, err := p.viaStore(ctx, key, h)
	if err != nil {
		return SharedReservation{}, err
	}
	return SharedReservation{p: p, key: key, dec: dec}, nil
}

// Allow reports whether key may make one more event now, and debits it if
// so: a Reserve that is never returned. Errors are Reserve's.
func (p *Shared) Allow(ctx context.Context, key string) (bool, error) {
	r, err := p.Reserve(ctx, key)
	return r.dec.d > 0, err
}

// Shapes returns a copy of the limits every key has, the pace of NewShared
// first, then those of WithQuota in order: for RateLimit-Policy headers.
func (p *Shared) Shapes() []driver.Shape { return append([]driver.Shape(nil), p.shapes...) }

// Len reports the rows of the local tier: keys refused within the last
// horizon whose refusal had not expired when last looked at.
func (p *Shared) Len() int { return p.local.Len() }

// SharedReservation is the outcome of Shared.Reserve: a small value that does
// not allocate. Its methods are not safe for concurrent use on the same
// variable.
//
// A SharedReservation must not be copied (go vet's copylocks check reports
// copies): Return disarms the variable it is called on, not its copies.
type SharedReservation struct {
	_   noCopy
	p   *Shared
	key string // set when admitted, for Return
	dec decision
}

// decision is what one tier decided, as a SharedReservation holds it.
type decision struct {
	// d > 0: admitted (by the fallback: the debt its take left, as in
	// Reservation); d < 0: refused, and -d is the wait in nanoseconds;
	// d = 0: the zero value, or one already returned.
	d    int64
	left int           // whole events left after the decision, in the tightest limit
	full time.Duration // until that limit is full again (see FullIn)
	via  Source
	// r is the store's receipt; for the fallback, At and Gen are the
	// fallback's clock reading and reorder count at its take.
	r driver.Receipt
}

// OK reports whether the event was admitted (and debited).
func (r *SharedReservation) OK() bool { return r.dec.d > 0 }

// RetryAfter reports 0 when the reservation was admitted; when it was
// refused, the time after the decision at which one event fits every limit:
// exact when the store refused; from the local tier, the store's answer less
// the time since (at most one round trip shorter than exact, never longer).
func (r *SharedReservation) RetryAfter() time.Duration {
	return time.Duration(max(-r.dec.d, 0))
}

// Remaining reports how many whole events the key had left in its tightest
// limit just after the decision: for a RateLimit-Remaining header. It is 0
// when refused.
func (r *SharedReservation) Remaining() int {
	if r.dec.d <= 0 {
		return 0
	}
	return r.dec.left
}

// FullIn reports, when the reservation was admitted, the time after the
// decision until the limit that Remaining describes (the tightest; of
// those as tight, the one that takes longest) is full again, as a
// RateLimit header's t wants it; 0 when refused.
func (r *SharedReservation) FullIn() time.Duration {
	if r.dec.d <= 0 {
		return 0
	}
	return r.dec.full
}

// Source reports what decided: SourceStore, SourceHeld or SourceFallback (0
// for the zero SharedReservation).
func (r *SharedReservation) Source() Source { return r.dec.via }

// Return gives the reserved event back to where it was taken, as
// Reservation.Return does: all of it at once, later only the part not yet
// refilled, never above full, whatever the order of returns across
// processes. It does nothing (and returns nil) on a refused reservation, on
// the zero SharedReservation, or when called a second time on the same
// variable. The variable is disarmed before the store is called, so a store
// error (returned as it is) leaves the event debited: stricter, never over
// the pace. A return to the store also forgets the key's refusal in this
// process's local tier.
func (r *SharedReservation) Return(ctx context.Context) error {
	d := r.dec.d
	if d <= 0 {
		return nil
	}
	r.dec.d = 0
	p := r.p
	if p.obs != nil {
		p.obs.Returned(r.dec.via)
	}
	if r.dec.via == SourceFallback {
		fb := p.fb
		fr := Reservation{p: fb, key: fb.t.Hash(r.key), at: int64(r.dec.r.At), d: d, gen: r.dec.r.Gen}
		fr.Return()
		return nil
	}
	if err := p.s.Refund(ctx, r.key, p.shapes, r.dec.r); err != nil {
		return err
	}
	p.local.Forget(r.key)
	return nil
}

// heldShape is the bucket through which the local tier reads a row: a row's
// value is the local clock reading until which its key is refused, and this
// shape refuses exactly while that is after now, with that wait.
var heldShape = driver.ShapeOf(1, 1)

// held reports whether the local tier refuses the key hashed to h at now,
// and for how long.
func (p *Shared) held(h uint64, now int64) (wait int64, refused bool) {
	t := &p.local
	t.SweepDue(h, now) // as a Pace decision does: rows go within a horizon
	_, w, ok := t.PeekAt(h, heldShape, now)
	return w, !ok
}

// hold makes the local tier refuse the key hashed to h for wait after now,
// unless it already does. A row already holding the key is kept: both
// came from the store, and the shorter only sends one more decision to it.
func (p *Shared) hold(h uint64, now, wait int64) {
	if wait <= 0 {
		return
	}
	b := driver.ShapeOf(time.Duration(wait), time.Duration(wait))
	p.local.Widen(b) // a wait beyond the shapes' (a fail-closed policy's, say)
	p.local.TakeAt(h, b, now)
}

// nextFit returns the time after an admission at which the next take of its
// key fits every shape, from its receipt: 0 when one fits at once.
func (p *Shared) nextFit(r *driver.Receipt) int64 {
	w := time.Duration(0)
	for i, b := range p.shapes {
		w = max(w, r.Reserved[i]+b.Interval()-b.Tolerance()-r.At)
	}
	return int64(w)
}

func (p *Shared) decided(path Source, ok bool) {
	if p.obs != nil {
		p.obs.Decided(path, ok)
	}
}

// fallback decides key on the fallback Pace.
func (p *Shared) fallback(key string) decision {
	fb := p.fb
	r := fb.Reserve(key)
	dec := decision{d: r.d, via: SourceFallback, r: driver.Receipt{At: time.Duration(r.at), Gen: r.gen}}
	if r.d > 0 {
		dec.left, dec.full = fb.b.Remaining(time.Duration(r.d), 0), time.Duration(r.d)
	}
	p.decided(SourceFallback, r.d > 0)
	return dec
}

// viaStore decides key, hashed to h, at the store: in a round trip of its
// own, or in the next one with the decisions that queued meanwhile.
func (p *Shared) viaStore(ctx context.Context, key string, h uint64) (decision, error) {
	c := callPool.Get().(*call)
	c.ctx, c.key, c.h = ctx, key, h
	return p.rt.do(c)
}

// roundTrip decides the calls of b: those the local tier now refuses (they
// queued before their key was refused) locally, the others in one round
// trip to the store with ctx (or on the fallback), and delivers every
// result to the calls still waiting.
func (p *Shared) roundTrip(ctx context.Context, b *batch) {
	now := p.local.Now()
	failing := p.brk != nil && p.brk.isOpen() // queued before the store failed
	n := 0
	for _, c := range b.calls {
		if c.gone() {
			continue
		}
		if wait, refused := p.held(c.h, now); refused {
			p.decided(SourceHeld, false)
			c.deliver(decision{d: -wait, via: SourceHeld}, nil)
			continue
		}
		if failing {
			c.deliver(p.fallback(c.key), nil)
			continue
		}
		b.calls[n] = c
		n++
	}
	clear(b.calls[n:])
	b.calls = b.calls[:n]
	if n == 0 {
		return
	}
	b.keys = b.keys[:0]
	for _, c := range b.calls {
		b.keys = append(b.keys, c.key)
	}
	if cap(b.out) < n {
		b.out = make([]driver.Grant, n)
	}
	b.out = b.out[:n]
	err := p.take(ctx, b)
	if p.obs != nil {
		p.obs.RoundTrip(n)
	}
	switch {
	case err == nil:
		if p.brk != nil {
			p.brk.reset()
		}
		for i, c := range b.calls {
			c.deliver(p.record(c.h, &b.out[i], now), nil)
		}
	case ctx.Err() != nil:
		// The caller of a lone decision gave up (the error is its own), or
		// every caller of a shared round trip did (no one is told).
		for _, c := range b.calls {
			c.deliver(decision{}, err)
		}
	case p.fb == nil || errors.Is(err, ErrInvalidArgument) || errors.Is(err, ErrClosed):
		for _, c := range b.calls {
			c.deliver(decision{}, err)
		}
	default:
		// From the failure, not from the start of the round trip (which
		// may have waited a whole timeout): the next probe is one timeout
		// away.
		p.brk.trip()
		for _, c := range b.calls {
			c.deliver(p.fallback(c.key), nil)
		}
	}
	clear(b.keys)
}

// take makes the store call of b's keys, bounded by the fallback's timeout
// when there is one.
func (p *Shared) take(ctx context.Context, b *batch) error {
	if p.fb != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.fbTimeout)
		defer cancel()
	}
	if len(b.keys) == 1 {
		var err error
		b.out[0], err = p.s.Take(ctx, b.keys[0], p.shapes)
		return err
	}
	return p.s.TakeMany(ctx, b.keys, p.shapes, b.out)
}

// record turns the store's grant for the key hashed to h, asked for at now,
// into a decision, and remembers in the local tier when the key is refused:
// after a refusal, and after an admission that left no event, until the
// next one fits. The wait counts from now, before the round trip, so the
// local tier never refuses longer than the store would.
func (p *Shared) record(h uint64, g *driver.Grant, now int64) decision {
	if !g.OK {
		wait := int64(g.RetryAfter)
		p.hold(h, now, wait)
		p.decided(SourceStore, false)
		return decision{d: -wait, via: SourceStore}
	}
	p.hold(h, now, p.nextFit(&g.Receipt))
	p.decided(SourceStore, true)
	return decision{d: 1, left: g.Remaining, full: p.tightestFull(&g.Receipt), via: SourceStore, r: g.Receipt}
}

// tightestFull returns, for an admitted take, the time until its tightest
// limit (fewest whole events left; of those, the one furthest from full)
// is full again: its arrival time less the decision's clock reading.
func (p *Shared) tightestFull(r *driver.Receipt) time.Duration {
	left, full := math.MaxInt, time.Duration(0)
	for i, b := range p.shapes {
		n, f := b.Remaining(r.Reserved[i], r.At), max(0, r.Reserved[i]-r.At)
		if n < left || n == left && f > full {
			left, full = n, f
		}
	}
	return full
}
