package pace

import (
	"cmp"
	"context"
	"errors"
	"math"
	"slices"
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
	maxN   int // the most units one reservation can take of the pace: ReserveN's bound

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
	if first, err = cfg.burstShape(first, perSecond); err != nil {
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
		maxN:      int(first.Tolerance() / first.Interval()),
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
	p.local.Init(cfg.clock, nil)
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
	dec, err := p.reserve(ctx, key, 1)
	return SharedReservation{p: p, key: key, dec: dec}, err
}

// ReserveN is Reserve for n units at once: it debits n units from the
// pace and one reservation from every quota of WithQuota (a call of n
// tokens and one request), all or nothing, in one atomic step at the
// store. For a cost known only afterwards (the tokens of an LLM call),
// reserve an estimate and Settle the reservation at the actual.
//
// n must be between 1 and the pace's bucket (one second of it, or
// WithBurst's): more can never fit, whatever the wait, and fewer is no
// reservation; either is refused (SourceHeld), debiting nothing, and its
// RetryAfter reports math.MaxInt64 (never). A key the local tier holds
// refused is refused for any n, with the wait of one unit plus n − 1
// intervals of the pace: never shorter than exact, so that waiting it
// admits the reservation, and longer than exact by at most those intervals
// when a quota binds. Decisions of
// the same n that queue together share one store call; a round trip
// carrying reservations of k different sizes makes k store calls, one after
// the other. The fallback of WithFallback reserves n events of its Pace.
// Errors are Reserve's.
func (p *Shared) ReserveN(ctx context.Context, key string, n int) (SharedReservation, error) {
	dec, err := p.reserve(ctx, key, n)
	return SharedReservation{p: p, key: key, dec: dec}, err
}

// reserve decides a reservation of n units of key: Reserve, ReserveN and
// Allow.
func (p *Shared) reserve(ctx context.Context, key string, n int) (decision, error) {
	if err := driver.ValidateKey(key); err != nil {
		return decision{}, err
	}
	if uint(n-1) >= uint(p.maxN) {
		p.decided(SourceHeld, false)
		return decision{d: -math.MaxInt64, via: SourceHeld}, nil
	}
	h := p.local.Hash(key)
	now := p.local.Now()
	if wait, refused := p.held(h, now); refused {
		p.decided(SourceHeld, false)
		return decision{d: -p.heldWait(wait, n), via: SourceHeld}, nil
	}
	if p.brk != nil && !p.brk.closed() {
		return p.fallback(key, n), nil
	}
	return p.viaStore(ctx, key, h, n)
}

// heldWait returns the wait the local tier reports for n units of a key it
// holds for wait, one unit's: n − 1 more intervals of the pace, which is
// the most the n units add to the wait of every limit (the quotas count the
// reservation once), so that waiting it admits the reservation.
func (p *Shared) heldWait(wait int64, n int) int64 {
	return wait + int64(n-1)*int64(p.shapes[0].Interval())
}

// Allow reports whether key may make one more event now, and debits it if
// so: a Reserve that is never returned. Errors are Reserve's.
func (p *Shared) Allow(ctx context.Context, key string) (bool, error) {
	dec, err := p.reserve(ctx, key, 1)
	return dec.d > 0, err
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
	n    int           // the units reserved (ReserveN's n)
	left int           // whole events left after the decision, in the tightest limit
	full time.Duration // until that limit is full again (see FullIn)
	via  Source
	// settled reports that Settle disarmed the reservation: left and full
	// then describe the key as the settlement left it.
	settled bool
	// r is the store's receipt; for the fallback, At is the fallback's
	// clock reading at its take, and gen the Gen it was decided under.
	r   driver.Receipt
	gen *table.Gen
}

// OK reports whether the event was admitted (and debited).
func (r *SharedReservation) OK() bool { return r.dec.d > 0 }

// RetryAfter reports 0 when the reservation was admitted; when it was
// refused, the time after the decision at which its units fit every limit:
// exact when the store refused; from the local tier, for one unit, the
// store's answer less the time since (at most one round trip shorter than
// exact, never longer), and for n units that plus n − 1 intervals of the
// pace (see ReserveN); math.MaxInt64 for n units that never fit.
func (r *SharedReservation) RetryAfter() time.Duration {
	return time.Duration(max(-r.dec.d, 0))
}

// Remaining reports how many whole events the key had left in its tightest
// limit just after the decision: for a RateLimit-Remaining header. It is 0
// when refused.
//
// After Settle (or Return), it reports the key as the settlement left it,
// seen from the decision: the arrival times of the take moved by what was
// given back or debited (exact when settled at once and no other decision
// of the key came between).
//
// Each limit counts in its own units (the pace in ReserveN's units, each
// quota in reservations), and the tightest is the one with the fewest left.
func (r *SharedReservation) Remaining() int {
	if r.dec.d <= 0 && !r.dec.settled {
		return 0
	}
	return r.dec.left
}

// FullIn reports, when the reservation was admitted, the time after the
// decision until the limit that Remaining describes (the tightest; of
// those as tight, the one that takes longest) is full again, as a
// RateLimit header's t wants it; 0 when refused. After Settle it reports
// the settled state, as Remaining does.
func (r *SharedReservation) FullIn() time.Duration {
	if r.dec.d <= 0 && !r.dec.settled {
		return 0
	}
	return r.dec.full
}

// Source reports what decided: SourceStore, SourceHeld or SourceFallback (0
// for the zero SharedReservation).
func (r *SharedReservation) Source() Source { return r.dec.via }

// Return gives the reserved units back to where they were taken, as
// Reservation.Return does: it is Settle(ctx, 0). Called at once, it gives
// back all of them; later only the part not yet refilled, never above
// full, whatever the order of returns across processes.
func (r *SharedReservation) Return(ctx context.Context) error { return r.Settle(ctx, 0) }

// Settle settles an admitted reservation of n units at used, the count
// actually spent, and disarms it, as Reservation.Settle does: fewer than n
// gives back the other n − used units of the pace by the rules of a late
// Return; more than n debits used − n more, whether or not they fit,
// putting the key into debt that its later decisions are refused until
// repaid. The quotas count the reservation, not its units: settled at 0,
// it gives back their reservation too (a reservation settled at zero spends
// nothing); at any other count it stays spent. used below 0 counts as 0.
//
// It goes to where the reservation was taken (the store, or the fallback
// Pace) in one atomic step, and forgets the key's refusal in this process's
// local tier when it gives back, or holds the key refused when the debt
// leaves no unit. It does nothing (and returns nil) on a refused
// reservation, on the zero SharedReservation, or when called a second time
// on the same variable. The variable is disarmed before the store is
// called, so a store error (returned as it is) leaves the reservation as
// it was taken: stricter than the actual when used < n; more lenient, by
// the debit that failed, when used > n.
func (r *SharedReservation) Settle(ctx context.Context, used int) error {
	d := r.dec.d
	if d <= 0 {
		return nil
	}
	r.dec.d = 0
	p, n := r.p, max(r.dec.n, 1)
	used = max(used, 0)
	if used == n {
		r.dec.settled = true
		return nil
	}
	if used < n && p.obs != nil {
		p.obs.Returned(r.dec.via)
	}
	if r.dec.via == SourceFallback {
		fb := p.fb
		h := fb.t.Hash(r.key)
		fr := Reservation{gen: r.dec.gen, key: h, at: int64(r.dec.r.At), d: d, more: n - 1}
		fr.Settle(used)
		now := fb.t.Now()
		tat, _, _ := fb.t.PeekAt(h, readShape, now) // max(the key's arrival time, now)
		debt := time.Duration(tat - now)
		r.dec.left, r.dec.full, r.dec.settled = fb.b.Remaining(debt, 0), debt, true
		return nil
	}
	var buf [driver.MaxShapes]driver.Shape
	if used < n {
		shapes := p.given(n, used, buf[:len(p.shapes)])
		if err := p.s.Refund(ctx, r.key, shapes, r.dec.r); err != nil {
			return err
		}
		p.local.Forget(r.key)
		rc := r.dec.r
		for i, b := range shapes {
			rc.Reserved[i] = max(rc.Reserved[i]-b.Interval(), rc.At)
		}
		r.dec.left, r.dec.full = p.tightest(&rc)
		r.dec.settled = true
		return nil
	}
	shapes := p.overdraft(used-n, buf[:len(p.shapes)])
	g, err := p.s.Take(ctx, r.key, shapes)
	if err == nil && !g.OK {
		// The debt would pass driver.MaxTolerance: take the room left, as
		// Pace.Debit does (RetryAfter is what went beyond it).
		if cost := shapes[0].Interval() - g.RetryAfter; cost > 0 {
			shapes[0] = driver.ShapeOf(cost, driver.MaxTolerance)
			g, err = p.s.Take(ctx, r.key, shapes)
		}
	}
	if err != nil {
		return err
	}
	r.dec.settled = true
	if !g.OK { // still no room: the key owes about 73 years already
		r.dec.left, r.dec.full = 0, g.Reset
		return nil
	}
	// The debt outlasts any refusal the local tier holds for the key.
	p.local.Forget(r.key)
	p.hold(p.local.Hash(r.key), p.local.Now(), p.nextFit(&g.Receipt))
	r.dec.left, r.dec.full = p.tightest(&g.Receipt)
	return nil
}

// scaled writes to dst (len(p.shapes)) the shapes of a reservation of n
// units: n intervals of the pace, one of each quota. n is at most maxN, so
// the take fits the pace's bucket.
func (p *Shared) scaled(n int, dst []driver.Shape) []driver.Shape {
	copy(dst, p.shapes)
	if n != 1 {
		b := p.shapes[0]
		dst[0] = driver.ShapeOf(time.Duration(n)*b.Interval(), b.Tolerance())
	}
	return dst
}

// given writes to dst the shapes through which a refund gives back what a
// reservation of n units settled at used (0 <= used < n) does not keep:
// the reservation whole when used is 0, else n − used intervals of the
// pace and nothing of the quotas. A shape's interval is what its refund
// gives; a refund after out-of-order refunds of other takes bounds it by
// the take's interval, which for a part is that part: never more than
// exact.
func (p *Shared) given(n, used int, dst []driver.Shape) []driver.Shape {
	if used == 0 {
		return p.scaled(n, dst)
	}
	for i, b := range p.shapes {
		give := time.Duration(0)
		if i == 0 {
			give = time.Duration(n-used) * b.Interval()
		}
		dst[i] = driver.ShapeOf(give, b.Tolerance())
	}
	return dst
}

// overdraft writes to dst the shapes of a debit of extra units beyond a
// reservation: extra intervals of the pace (at most driver.MaxTolerance),
// nothing of the quotas, each with a tolerance so wide that the take
// always fits (as Pace.Debit's).
func (p *Shared) overdraft(extra int, dst []driver.Shape) []driver.Shape {
	cost, iv := driver.MaxTolerance, p.shapes[0].Interval()
	if time.Duration(extra) < driver.MaxTolerance/iv {
		cost = time.Duration(extra) * iv
	}
	dst[0] = driver.ShapeOf(cost, driver.MaxTolerance)
	for i := 1; i < len(p.shapes); i++ {
		dst[i] = driver.ShapeOf(0, driver.MaxTolerance)
	}
	return dst
}

// readShape is the bucket through which a row's arrival time is read: a
// take of nothing that always fits, whose next arrival time is the row's
// (or now, when it is before).
var readShape = driver.ShapeOf(0, driver.MaxTolerance)

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

// fallback decides a reservation of n units of key on the fallback Pace.
func (p *Shared) fallback(key string, n int) decision {
	fb := p.fb
	r := fb.ReserveN(key, n)
	dec := decision{d: r.d, n: n, via: SourceFallback, r: driver.Receipt{At: time.Duration(r.at)}, gen: r.gen}
	if r.d > 0 {
		dec.left, dec.full = fb.b.Remaining(time.Duration(r.d), 0), time.Duration(r.d)
	}
	p.decided(SourceFallback, r.d > 0)
	return dec
}

// viaStore decides key, hashed to h, at the store: in a round trip of its
// own, or in the next one with the decisions that queued meanwhile.
func (p *Shared) viaStore(ctx context.Context, key string, h uint64, n int) (decision, error) {
	c := callPool.Get().(*call)
	c.ctx, c.key, c.h, c.n = ctx, key, h, n
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
			c.deliver(decision{d: -p.heldWait(wait, c.n), via: SourceHeld}, nil)
			continue
		}
		if failing {
			c.deliver(p.fallback(c.key, c.n), nil)
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
	if cap(b.out) < n {
		b.out = make([]driver.Grant, n)
	}
	b.out = b.out[:n]
	if n > 1 && !slices.IsSortedFunc(b.calls, bySize) {
		slices.SortStableFunc(b.calls, bySize)
	}
	for i := 0; i < n; {
		j := i + 1
		for j < n && b.calls[j].n == b.calls[i].n {
			j++
		}
		p.tripSize(ctx, b, b.calls[i:j], b.out[i:j], now)
		i = j
	}
}

// bySize orders calls by the units they reserve.
func bySize(x, y *call) int { return cmp.Compare(x.n, y.n) }

// tripSize decides calls, reservations of one size, in one store call with
// ctx, and delivers every result to the calls still waiting: out holds
// their grants. now is the clock reading of the round trip's start.
func (p *Shared) tripSize(ctx context.Context, b *batch, calls []*call, out []driver.Grant, now int64) {
	b.keys = b.keys[:0]
	for _, c := range calls {
		b.keys = append(b.keys, c.key)
	}
	shapes := p.shapes
	if size := calls[0].n; size != 1 {
		shapes = p.scaled(size, b.shapes[:len(p.shapes)])
	}
	err := p.take(ctx, b.keys, shapes, out)
	if p.obs != nil {
		p.obs.RoundTrip(len(calls))
	}
	switch {
	case err == nil:
		if p.brk != nil {
			p.brk.reset()
		}
		for i, c := range calls {
			c.deliver(p.record(c.h, &out[i], now, c.n), nil)
		}
	case ctx.Err() != nil:
		// The caller of a lone decision gave up (the error is its own), or
		// every caller of a shared round trip did (no one is told).
		for _, c := range calls {
			c.deliver(decision{}, err)
		}
	case p.fb == nil || errors.Is(err, ErrInvalidArgument) || errors.Is(err, ErrClosed):
		for _, c := range calls {
			c.deliver(decision{}, err)
		}
	default:
		// From the failure, not from the start of the round trip (which
		// may have waited a whole timeout): the next probe is one timeout
		// away.
		p.brk.trip()
		for _, c := range calls {
			c.deliver(p.fallback(c.key, c.n), nil)
		}
	}
	clear(b.keys)
}

// take makes the store call of keys with shapes, writing their grants to
// out, bounded by the fallback's timeout when there is one.
func (p *Shared) take(ctx context.Context, keys []string, shapes []driver.Shape, out []driver.Grant) error {
	if p.fb != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.fbTimeout)
		defer cancel()
	}
	if len(keys) == 1 {
		var err error
		out[0], err = p.s.Take(ctx, keys[0], shapes)
		return err
	}
	return p.s.TakeMany(ctx, keys, shapes, out)
}

// record turns the store's grant for a reservation of n units of the key
// hashed to h, asked for at now, into a decision, and remembers in the
// local tier when the key is refused: after a refusal of one unit, and
// after an admission that left no event, until the next one fits: the
// exact wait of one unit. The wait counts from now, before the round trip,
// so the local tier never refuses one unit longer than the store would. A
// refusal of several units holds nothing: its wait is not one unit's, and
// a smaller reservation may fit at once.
func (p *Shared) record(h uint64, g *driver.Grant, now int64, n int) decision {
	if !g.OK {
		wait := int64(g.RetryAfter)
		if n == 1 {
			p.hold(h, now, wait)
		}
		p.decided(SourceStore, false)
		return decision{d: -wait, n: n, via: SourceStore}
	}
	p.hold(h, now, p.nextFit(&g.Receipt))
	p.decided(SourceStore, true)
	left, full := p.tightest(&g.Receipt)
	return decision{d: 1, n: n, left: left, full: full, via: SourceStore, r: g.Receipt}
}

// tightest returns, for the arrival times of an admitted take, the whole
// units left in its tightest limit (fewest whole left, each limit in its
// own units; of those, the one furthest from full) and the time until that
// limit is full again: its arrival time less the decision's clock reading.
func (p *Shared) tightest(r *driver.Receipt) (left int, full time.Duration) {
	left = math.MaxInt
	for i, b := range p.shapes {
		n, f := b.Remaining(r.Reserved[i], r.At), max(0, r.Reserved[i]-r.At)
		if n < left || n == left && f > full {
			left, full = n, f
		}
	}
	return left, full
}
