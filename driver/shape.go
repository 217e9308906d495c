package driver

import (
	"math"
	"time"
)

// MaxTolerance bounds a bucket's tolerance (the time it takes to refill from
// empty), so that arrival times stay far from overflowing an int64 of
// nanoseconds: about 73 years.
const MaxTolerance = time.Duration(1 << 61)

// Shape is the arithmetic of one token bucket, kept as a single number per
// key: the theoretical arrival time (TAT) of the generic cell rate algorithm.
// The bucket is full exactly when its TAT is not after now, so a full bucket
// and an absent one are the same state, and a table of buckets can forget
// every full row.
//
// A Shape holds only the shape (how much one take costs and how much debt the
// bucket tolerates), never state: the methods are pure functions of an
// explicit TAT and an explicit now, both durations since an epoch the caller
// chooses, so every backend (in memory, a Lua script, a SQL function) can
// decide with exactly the same numbers. The zero Shape admits nothing; build
// one with NewShape.
type Shape struct {
	// interval is the refill time of one take (cost tokens), rounded up to
	// the nanosecond so that a schedule never runs faster than declared.
	interval time.Duration
	// tolerance is the largest TAT − now after an admission: the capacity
	// in time, scaled from interval so that capacity/cost whole takes fit.
	tolerance time.Duration
}

// NewShape returns the shape of a bucket holding capacity tokens, refilled
// continuously at perSecond tokens per second, from which each take removes
// cost tokens. capacity and perSecond must be positive finite numbers; cost
// must be finite, at least zero and at most capacity; one take must refill in
// at least a nanosecond, and the whole capacity within about 73 years. Any
// other input returns an error wrapping ErrInvalidArgument.
func NewShape(capacity, perSecond, cost float64) (Shape, error) {
	switch {
	case !finitePositive(capacity):
		return Shape{}, invalid("capacity %v is not a positive finite number", capacity)
	case !finitePositive(perSecond):
		return Shape{}, invalid("rate %v per second is not a positive finite number", perSecond)
	case !(cost >= 0) || math.IsInf(cost, 1):
		return Shape{}, invalid("cost %v is not a finite number >= 0", cost)
	case cost > capacity:
		return Shape{}, invalid("cost %v exceeds capacity %v", cost, capacity)
	}
	perToken := float64(time.Second) / perSecond // nanoseconds to refill one token
	if cost == 0 {
		tol := max(1, math.Ceil(capacity*perToken)) // a free take always fits a full bucket
		if tol > float64(MaxTolerance) {
			return Shape{}, invalid("capacity %v at %v per second takes longer than %v to refill", capacity, perSecond, MaxTolerance)
		}
		return Shape{tolerance: time.Duration(tol)}, nil
	}
	exact := cost * perToken
	if exact < 1 {
		return Shape{}, invalid("cost %v at %v per second refills in under a nanosecond", cost, perSecond)
	}
	interval := math.Ceil(exact)
	tol := math.Floor(capacity / cost * interval)
	if tol > float64(MaxTolerance) {
		return Shape{}, invalid("capacity %v at %v per second takes longer than %v to refill", capacity, perSecond, MaxTolerance)
	}
	return Shape{interval: time.Duration(interval), tolerance: time.Duration(tol)}, nil
}

// Interval reports the refill time of one take.
func (b Shape) Interval() time.Duration { return b.interval }

// Tolerance reports the time an empty bucket takes to refill to full: the
// time after which every row of this shape can be forgotten.
func (b Shape) Tolerance() time.Duration { return b.tolerance }

// Take decides one take at now from a bucket whose TAT is tat. When it fits,
// ok is true and next is the new TAT. When it does not, ok is false, next is
// tat unchanged, and wait is the exact time after now at which the same take
// would fit. A tat before now is a full bucket. The zero Shape refuses
// every take, with a wait of about 73 years.
func (b Shape) Take(tat, now time.Duration) (next, wait time.Duration, ok bool) {
	if b.tolerance == 0 {
		return tat, MaxTolerance, false // the zero Shape: nothing ever fits
	}
	base := max(tat, now)
	debt := base - now + b.interval
	if debt > b.tolerance {
		return tat, debt - b.tolerance, false
	}
	return base + b.interval, 0, true
}

// Refund gives back, at now, one take of this shape to a bucket whose TAT is
// now tat, and returns the new TAT (never before now: never above full). The
// take was decided at taken and moved the TAT to reserved. It gives back only
// the part of the take the bucket has not refilled by now, so the takes kept
// never exceed the shape's rate and capacity in any window, whatever the
// order and timing of refunds.
//
// shifted is the total that refunds of takes other than the bucket's latest
// have given back since this take was made (0: none, and the refund is
// exact; negative: unknown); a refund after such refunds gives back at most
// what is exact, all of it at once. A refund with shifted 0 that finds tat
// below a reserved still ahead of now is a second refund of the same take,
// and gives nothing. full reports whether the bucket is full (its row can be
// dropped); reorder is what to add to the bucket's total of out-of-order
// refunds. docs/store.md has the whole arithmetic.
func (b Shape) Refund(tat, taken, reserved, now, shifted time.Duration) (next time.Duration, full bool, reorder time.Duration) {
	end := taken + b.interval // the earliest the take's refill can end
	switch {
	case shifted == 0:
		if tat < reserved && reserved > now {
			return tat, tat <= now, 0 // given back already
		}
		end = reserved
	case shifted > 0 && reserved-shifted > end:
		end = reserved - shifted
	}
	give := min(b.interval, max(end-now, 0))
	if give == 0 {
		return tat, tat <= now, 0
	}
	if shifted != 0 || tat != reserved {
		reorder = give
	}
	next = tat - give
	if next <= now {
		return now, true, reorder
	}
	return next, false, reorder
}

// Remaining reports how many whole takes still fit at now in a bucket whose
// TAT is tat.
func (b Shape) Remaining(tat, now time.Duration) int {
	if b.tolerance == 0 {
		return 0 // the zero Shape
	}
	if b.interval == 0 {
		return math.MaxInt
	}
	free := b.tolerance - max(tat-now, 0)
	if free < b.interval {
		return 0
	}
	return int(free / b.interval)
}

// TakeAll decides one take of every shape at now, all or nothing: the state
// of a key limited by several shapes at once (20 a second and 1000 an hour,
// say). tats[i] is shape i's arrival time. When every shape fits, ok is true
// and next[i] is shape i's new arrival time; otherwise ok is false, next[i] is
// tats[i] unchanged, and wait is the time after now at which every shape
// fits. len(tats) and len(next) must equal len(shapes), at most MaxShapes.
func TakeAll(shapes []Shape, tats, next []time.Duration, now time.Duration) (wait time.Duration, ok bool) {
	ok = true
	for i, b := range shapes {
		n, w, fits := b.Take(tats[i], now)
		next[i], wait, ok = n, max(wait, w), ok && fits
	}
	if !ok {
		copy(next, tats)
		return wait, false
	}
	return 0, true
}

// RemainingAll reports the whole takes that still fit every shape at now,
// and the time after now until every shape is full.
func RemainingAll(shapes []Shape, tats []time.Duration, now time.Duration) (remaining int, reset time.Duration) {
	remaining = math.MaxInt
	for i, b := range shapes {
		remaining = min(remaining, b.Remaining(tats[i], now))
		reset = max(reset, tats[i]-now)
	}
	return remaining, reset
}

// RefundAll gives back, at now, the take that receipt r describes, shape by
// shape with Refund, to a key whose arrival times are tats, writing the new
// ones to next. shifted is as for Refund, for the key. full reports whether
// every shape is full, and reorder what to add to the key's total of
// out-of-order refunds (the largest of the shapes').
func RefundAll(shapes []Shape, tats, next []time.Duration, r Receipt, now, shifted time.Duration) (full bool, reorder time.Duration) {
	full = true
	for i, b := range shapes {
		n, f, re := b.Refund(tats[i], r.At, r.Reserved[i], now, shifted)
		next[i], full, reorder = n, full && f, max(reorder, re)
	}
	return full, reorder
}
