package pace

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

// Sentinel errors. Every error a pace type or a Store implementation returns
// for one of these conditions wraps the matching sentinel, so callers test
// with errors.Is.
var (
	// ErrInvalidArgument is wrapped by every error caused by an argument
	// out of its documented range: a rate or capacity that is not a
	// positive finite number, a negative cost or TTL, a cost above the
	// capacity, a slot limit below one, a ceiling outside
	// [sustained, 2 × sustained], an empty key, no bucket shape or more
	// than MaxShapes. Such a call changes nothing.
	ErrInvalidArgument = errors.New("pace: invalid argument")

	// ErrNotFound is returned by Store.Get when the key is absent or its
	// value has expired.
	ErrNotFound = errors.New("pace: key not found")

	// ErrClosed is wrapped by every error a Store returns after Close.
	ErrClosed = errors.New("pace: store closed")
)

// MaxKeyLen is the longest key, in bytes, that the stores accept. A longer
// key is rejected with ErrInvalidArgument rather than hashed or truncated
// silently: keys come from clients, and a megabyte key is an attack, not an
// identifier.
const MaxKeyLen = 4096

// Store is the shared state behind rate limits that span more than one Pace:
// token buckets with per-call shapes, connection-slot counters (plain and
// under the sustained/ceiling burst model of AdmitBurst), and short-lived
// memoised values. Plain slots, burst slots, buckets, multi-shape keys (Take)
// and values live in five separate namespaces: the same key string in two of
// them never collides, and Delete clears all five. All methods are safe for
// concurrent use by multiple goroutines and atomic per key.
//
// Implementations return errors wrapping ErrInvalidArgument for arguments out
// of range (the Validate functions check them, one per method, and every
// implementation calls them), ErrNotFound from Get for an absent key, and
// ErrClosed from every method after Close. Being limited is not an error: it
// is reported through allowed or acquired. The package storetest checks an
// implementation against this contract; docs/store.md has the long story.
type Store interface {
	// TokenBucket consumes cost tokens from the bucket at key. capacity is
	// the burst (and the initial fill); refillPerSec is the steady-state
	// rate in tokens per second. allowed=true means the request fits and
	// tokens were debited; allowed=false means the bucket is exhausted and
	// retryAfter is the time until cost tokens will be available. A
	// refused call debits nothing.
	//
	// Implementations must be atomic per key but tolerate cross-key races.
	TokenBucket(ctx context.Context, key string, capacity, refillPerSec, cost float64) (allowed bool, retryAfter time.Duration, err error)

	// AcquireSlot atomically reserves one slot in the counter at key,
	// rejecting (and rolling back) if the post-increment value would
	// exceed limit. ttl bounds how long an idle counter survives: the
	// counter is one number per key with one expiry, not a lease per
	// holder, and any acquire or refresh sets it to now + ttl, so a slot
	// whose holder died is freed only when the whole counter expires (see
	// docs/store.md). Long-lived holders call RefreshSlot periodically.
	//
	// current is the post-decision counter value; on rejection it is the
	// unchanged counter, which may exceed limit if a caller lowered the
	// limit below the slots already held.
	AcquireSlot(ctx context.Context, key string, limit int64, ttl time.Duration) (acquired bool, current int64, err error)

	// AcquireSlotBurst reserves one slot under a burst model: connections up
	// to sustained are always admitted; connections between sustained and
	// ceiling are admitted only while burst budget remains; ceiling is a hard
	// wall. The budget (burstBudget of full-2× wall time) drains above
	// sustained and refills at/below it over BurstRefillWindow. ttl bounds idle
	// survival as with AcquireSlot. See AdmitBurst for the exact semantics.
	//
	// current is the connection count after the decision; on rejection it is
	// the unchanged count, so a caller can tell a ceiling rejection
	// (current >= ceiling) from a budget-exhaustion one (current < ceiling).
	AcquireSlotBurst(ctx context.Context, key string, sustained, ceiling int64, burstBudget, ttl time.Duration) (acquired bool, current int64, err error)

	// ReleaseSlot decrements the plain counter at key (AcquireSlot), clamped
	// to zero (a release without a matching acquire is a no-op rather than
	// going negative). It does not touch burst slots: use ReleaseSlotBurst
	// for those.
	ReleaseSlot(ctx context.Context, key string) error

	// RefreshSlot extends a plain counter's idle TTL without changing the
	// value. Safe to call from a heartbeat goroutine on every active
	// session; idempotent. It does not touch burst slots.
	RefreshSlot(ctx context.Context, key string, ttl time.Duration) error

	// ReleaseSlotBurst decrements a burst counter (AcquireSlotBurst) at key,
	// clamped to zero, after charging the time spent at the old count (see
	// ReleaseBurst). The burst counterpart to ReleaseSlot; kept separate so
	// plain and burst counters never share a key namespace.
	ReleaseSlotBurst(ctx context.Context, key string) error

	// RefreshSlotBurst extends a live burst counter's idle TTL, after
	// charging the elapsed time (see RefreshBurst). It is a no-op on an
	// absent or already-expired slot, so a stray refresh cannot resurrect a
	// reaped counter. Safe to call from a heartbeat goroutine.
	RefreshSlotBurst(ctx context.Context, key string, ttl time.Duration) error

	// Get returns a copy of the value at key, or an error wrapping
	// ErrNotFound when it is absent or expired.
	Get(ctx context.Context, key string) ([]byte, error)

	// Set writes a copy of value at key with the given TTL. ttl=0 means no
	// expiry.
	Set(ctx context.Context, key string, value []byte, ttl time.Duration) error

	// Take takes one take of every shape at key, all or nothing, in one atomic
	// step at the store's clock (TakeAll), and reports the Grant (Remaining,
	// Reset, Receipt from RemainingAll and the new arrival times). 1 <= len(shapes)
	// <= MaxShapes, each a valid (non-zero) Bucket, else ErrInvalidArgument.
	Take(ctx context.Context, key string, shapes []Bucket) (Grant, error)

	// TakeMany is Take for several keys with the same shapes in one round trip
	// (a Redis pipeline or one script call; one PostgreSQL call over arrays),
	// writing out[i] for keys[i] (len(out) == len(keys)). Each key is decided
	// atomically on its own; a store error fails the call.
	TakeMany(ctx context.Context, keys []string, shapes []Bucket, out []Grant) error

	// Refund gives back the take that receipt r describes (RefundAll), at the
	// store's clock, atomically with the key's takes; a key whose buckets are all
	// full is deleted. Refunding the zero Receipt, or a take of a key since
	// deleted, does nothing. shapes must be the shapes of the take.
	Refund(ctx context.Context, key string, shapes []Bucket, r Receipt) error

	// Delete removes key from all five namespaces. Missing keys are not an
	// error.
	Delete(ctx context.Context, key string) error

	// Close stops background work and releases backend resources. It is
	// idempotent; every other method returns an error wrapping ErrClosed
	// after it.
	Close(ctx context.Context) error
}

// invalid returns an error wrapping ErrInvalidArgument, in the order every
// package of the module writes its errors: "pace: what went wrong: " and
// then the sentinel's text.
func invalid(format string, args ...any) error {
	return fmt.Errorf("pace: "+format+": %w", append(args, ErrInvalidArgument)...)
}

// finitePositive reports whether x is a finite number above zero.
func finitePositive(x float64) bool {
	return x > 0 && !math.IsInf(x, 1) // NaN fails x > 0
}

// The Validate functions check the arguments of the Store methods, one
// function per method (or per group of methods with the same arguments), so
// that every implementation rejects the same calls with the same errors,
// before it touches its backend. Each returns nil or an error wrapping
// ErrInvalidArgument that never contains the key.

// ValidateKey checks the key of every Store method, and is all that Get,
// Delete, ReleaseSlot and ReleaseSlotBurst check: it must be non-empty and
// at most MaxKeyLen bytes.
func ValidateKey(key string) error {
	if why := badKey(key); why != "" {
		return invalid("%s", why)
	}
	return nil
}

// badKey returns what is wrong with key, or "" when nothing is.
func badKey(key string) string {
	switch {
	case key == "":
		return "empty key"
	case len(key) > MaxKeyLen:
		return fmt.Sprintf("key of %d bytes exceeds MaxKeyLen (%d)", len(key), MaxKeyLen)
	}
	return ""
}

// ValidateSet checks the arguments of Store.Set: the key, and a ttl that is
// not negative (0 means no expiry).
func ValidateSet(key string, ttl time.Duration) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	return validateTTL(ttl)
}

// validateTTL checks a TTL that may be zero (no expiry) but not negative.
func validateTTL(ttl time.Duration) error {
	if ttl < 0 {
		return invalid("negative ttl %v", ttl)
	}
	return nil
}

// ValidateTokenBucket checks the arguments of Store.TokenBucket and returns
// the Bucket they describe. See NewBucket for the rules.
func ValidateTokenBucket(key string, capacity, refillPerSec, cost float64) (Bucket, error) {
	if err := ValidateKey(key); err != nil {
		return Bucket{}, err
	}
	return NewBucket(capacity, refillPerSec, cost)
}

// ValidateSlot checks the arguments of Store.AcquireSlot: limit at least one
// and ttl above zero (an idle counter must expire).
func ValidateSlot(key string, limit int64, ttl time.Duration) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if limit < 1 {
		return invalid("slot limit %d < 1", limit)
	}
	return validateSlotTTL(ttl)
}

// ValidateSlotBurst checks the arguments of Store.AcquireSlotBurst:
// sustained at least one, sustained ≤ ceiling ≤ 2 × sustained, a burst budget
// that is not negative, and ttl above zero.
func ValidateSlotBurst(key string, sustained, ceiling int64, burstBudget, ttl time.Duration) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if sustained < 1 {
		return invalid("sustained %d < 1", sustained)
	}
	if ceiling < sustained || ceiling-sustained > sustained { // not 2*sustained: that overflows
		return invalid("ceiling %d outside [sustained, 2*sustained] for sustained %d", ceiling, sustained)
	}
	if burstBudget < 0 {
		return invalid("negative burst budget %v", burstBudget)
	}
	return validateSlotTTL(ttl)
}

// ValidateRefresh checks the arguments of Store.RefreshSlot and
// Store.RefreshSlotBurst: the key, and ttl above zero.
func ValidateRefresh(key string, ttl time.Duration) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	return validateSlotTTL(ttl)
}

func validateSlotTTL(ttl time.Duration) error {
	if ttl <= 0 {
		return invalid("slot ttl %v must be above zero", ttl)
	}
	return nil
}

// MaxShapes is the most bucket shapes one Store.Take may apply to a key.
const MaxShapes = 4

// validateShapes checks the shapes of Store.Take, TakeMany and Refund: one
// to MaxShapes of them, none the zero Bucket.
func validateShapes(shapes []Bucket) error {
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
// and one to MaxShapes shapes, none the zero Bucket.
func ValidateTake(key string, shapes []Bucket) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	return validateShapes(shapes)
}

// ValidateTakeMany checks the arguments of Store.TakeMany: every key, the
// shapes (as ValidateTake), and one Grant in out per key. No keys at all is
// valid. The error names a bad key by its index, never by its text.
func ValidateTakeMany(keys []string, shapes []Bucket, out []Grant) error {
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
