package driver

import (
	"context"
	"time"
)

// MaxShapes is the most bucket shapes one Store.Take may apply to a key.
const MaxShapes = 4

// validateShapes checks the shapes of Store.Take, TakeMany and Refund: one
// to MaxShapes of them, none the zero Shape.
func validateShapes(shapes []Shape) error {
	if len(shapes) < 1 || len(shapes) > MaxShapes {
		return invalid("%d shapes; want 1 to %d", len(shapes), MaxShapes)
	}
	for i, b := range shapes {
		if b.tolerance <= 0 {
			return invalid("shape %d is the zero Bucket", i)
		}
	}
	return nil
}

// ValidateTake checks the arguments of Store.Take and Store.Refund: the key,
// and one to MaxShapes shapes, none the zero Shape.
func ValidateTake(key string, shapes []Shape) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	return validateShapes(shapes)
}

// ValidateTakeMany checks the arguments of Store.TakeMany: every key, the
// shapes (as ValidateTake), and one Grant in out per key. No keys at all is
// valid. The error names a bad key by its index, never by its text.
func ValidateTakeMany(keys []string, shapes []Shape, out []Grant) error {
	if len(out) != len(keys) {
		return invalid("%d grants for %d keys", len(out), len(keys))
	}
	for i, k := range keys {
		if why := badKey(k); why != "" {
			return invalid("keys[%d]: %s", i, why)
		}
	}
	return validateShapes(shapes)
}

// Grant is the outcome of a take of several bucket shapes at one key, all or
// nothing (see TakeAll): what a Store that shares Pace's semantics across
// processes reports. It is a small value that does not allocate.
type Grant struct {
	// OK reports whether the take fitted every shape and was debited from
	// all of them; a refused take debits none.
	OK bool
	// RetryAfter is 0 when OK; when refused, the time after the decision
	// at which the same take fits every shape.
	RetryAfter time.Duration
	// Remaining is the number of whole takes left after the decision in the
	// tightest shape; 0 when refused.
	Remaining int
	// Reset is the time after the decision until every shape is full
	// again (0 for a key that holds no debt).
	Reset time.Duration
	// Receipt is what a refund of this take needs; the zero Receipt when
	// refused.
	Receipt Receipt
}

// Receipt identifies one admitted take to a refund (see RefundAll). Its
// times are the store's clock, as durations since an epoch the store
// chooses (the Unix epoch for the Redis and PostgreSQL stores).
type Receipt struct {
	// At is the store's clock reading at the decision.
	At time.Duration
	// Gen is the key's reorder count before the take: the refund is exact
	// only while no take of the key has been given back out of order since.
	Gen uint64
	// Reserved holds, for each shape in order, the arrival time the take
	// moved it to.
	Reserved [MaxShapes]time.Duration
}

// Taker is what pace.Shared and the returnable limits of httplimit and
// grpclimit need of a store beyond pace.Store: several bucket shapes on one
// key, taken all or nothing at the store's clock, and the exact refund of a
// take. memory, redisstore and pgstore implement it; package storetest
// checks an implementation with RunTaker. Multi-shape keys live in a
// namespace of their own, which the store's Delete clears too. All methods
// are safe for concurrent use by multiple goroutines and atomic per key, and
// return the errors the pace.Store contract names (ErrInvalidArgument,
// ErrClosed).
type Taker interface {
	// Take takes one take of every shape at key, all or nothing, in one atomic
	// step at the store's clock (TakeAll), and reports the Grant (Remaining,
	// Reset, Receipt from RemainingAll and the new arrival times). 1 <= len(shapes)
	// <= MaxShapes, each a valid (non-zero) Shape, else ErrInvalidArgument.
	Take(ctx context.Context, key string, shapes []Shape) (Grant, error)

	// TakeMany is Take for several keys with the same shapes in one round trip
	// (a Redis pipeline or one script call; one PostgreSQL call over arrays),
	// writing out[i] for keys[i] (len(out) == len(keys)). Each key is decided
	// atomically on its own; a store error fails the call.
	TakeMany(ctx context.Context, keys []string, shapes []Shape, out []Grant) error

	// Refund gives back the take that receipt r describes (RefundAll), at the
	// store's clock, atomically with the key's takes; a key whose buckets are all
	// full is deleted. Refunding the zero Receipt, or a take of a key since
	// deleted, does nothing. shapes must be the shapes of the take.
	Refund(ctx context.Context, key string, shapes []Shape, r Receipt) error
}
