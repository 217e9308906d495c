package pace

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/ratepace/pace/internal/errs"
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
	// than driver.MaxShapes. Such a call changes nothing.
	ErrInvalidArgument = errs.InvalidArgument

	// ErrNotFound is returned by Store.Get when the key is absent or its
	// value has expired.
	ErrNotFound = errs.NotFound

	// ErrClosed is wrapped by every error a Store returns after Close.
	ErrClosed = errs.Closed
)

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
