// Package redisstore implements pace.Store on Redis, for services that run as
// many replicas and must share one rate limit.
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/driver"
	"github.com/redis/go-redis/v9"
)

// Store is a pace.Store whose state lives in Redis, so that every replica of
// a service that shares the Redis shares its limits. Every method is one
// round trip (a Lua script, atomic on the server, or a native command), and
// every decision takes the server's TIME, so clock skew between application
// servers cannot change it. The scripts compute exactly the arithmetic of
// driver.Shape and the pace burst functions, to the nanosecond. Every key
// expires by itself once its state is indistinguishable from absent (a value
// Set with ttl 0 excepted), and the five namespaces of a user key share one
// Redis Cluster hash slot. Redis 6.2 or later is required.
//
// A Store adds no timeout of its own: build the client with
// ContextTimeoutEnabled so that a context deadline bounds every call, and
// wrap the Store with pace.WithFailurePolicy to decide what a Redis that is
// down means. docs/replicas.md ("Redis in detail") has the long story. A
// Store is safe for concurrent use by multiple goroutines.
type Store struct {
	client redis.UniversalClient
	keys   keyer
	clock  func() time.Time
	closed atomic.Bool
}

var _ pace.Store = (*Store)(nil)

// New returns a Store on client, which may be a *redis.Client, a
// *redis.ClusterClient or a *redis.Ring. The caller keeps ownership of the
// client: Close does not close it. The error wraps pace.ErrInvalidArgument
// when client is nil or an option is invalid (see WithPrefix and
// WithHashedKeys).
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	cfg := defaults()
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	switch {
	case client == nil:
		return nil, fmt.Errorf("redisstore: nil client: %w", pace.ErrInvalidArgument)
	case cfg.hashed && len(cfg.secret) < MinKeySecret:
		return nil, fmt.Errorf("redisstore: key secret of %d bytes; want at least %d: %w", len(cfg.secret), MinKeySecret, pace.ErrInvalidArgument)
	}
	if err := checkPrefix(cfg.prefix); err != nil {
		return nil, err
	}
	s := &Store{client: client, keys: keyer{prefix: cfg.prefix}, clock: cfg.clock}
	if cfg.hashed {
		s.keys.hash = newHasher(cfg.secret)
	}
	return s, nil
}

// usable reports whether the Store can serve a call: an error wrapping
// pace.ErrClosed after Close.
func (s *Store) usable() error {
	if s.closed.Load() {
		return errClosed
	}
	return nil
}

var errClosed = fmt.Errorf("redisstore: %w", pace.ErrClosed)

// failed wraps a backend error with the operation that met it.
func failed(op string, err error) error {
	return fmt.Errorf("redisstore: %s: %w", op, err)
}

// withNow appends the test clock's now to a script's arguments; in
// production (no clock) the script reads TIME.
func (s *Store) withNow(args ...any) []any {
	if s.clock != nil {
		now := s.clock()
		args = append(args, now.Unix(), now.Nanosecond())
	}
	return args
}

// split returns d as whole seconds and the nanoseconds left over.
func split(d time.Duration) (sec, nsec int64) {
	return int64(d / time.Second), int64(d % time.Second)
}

// ceilMillis rounds d up to a whole number of milliseconds, the resolution
// of Redis expiry, so that a TTL is never shortened; within a millisecond of
// the largest Duration (292 years) it rounds down instead of overflowing.
func ceilMillis(d time.Duration) time.Duration {
	r := d % time.Millisecond
	switch {
	case r == 0:
		return d
	case d > math.MaxInt64-time.Millisecond:
		return d - r
	}
	return d + time.Millisecond - r
}

// TokenBucket consumes cost tokens from the bucket at key; see
// pace.Store.TokenBucket. The decision is one step of driver.Shape.Take at the
// server's time. The bucket's key expires when it has refilled to full.
func (s *Store) TokenBucket(ctx context.Context, key string, capacity, refillPerSec, cost float64) (bool, time.Duration, error) {
	if err := s.usable(); err != nil {
		return false, 0, err
	}
	b, err := driver.ValidateTokenBucket(key, capacity, refillPerSec, cost)
	if err != nil {
		return false, 0, err
	}
	is, in := split(b.Interval())
	ts, tn := split(b.Tolerance())
	wait, err := bucketScript.Run(ctx, s.client, []string{s.keys.key(key, nsBucket)}, s.withNow(is, in, ts, tn)...).Int64()
	if err != nil {
		return false, 0, failed("TokenBucket", err)
	}
	if wait == 0 {
		return true, 0, nil
	}
	return false, time.Duration(wait), nil
}

// AcquireSlot reserves one slot in the plain counter at key; see
// pace.Store.AcquireSlot. An acquisition sets the counter's idle TTL to ttl
// (rounded up to the millisecond); a refusal changes nothing and reports the
// counter as it is.
func (s *Store) AcquireSlot(ctx context.Context, key string, limit int64, ttl time.Duration) (bool, int64, error) {
	if err := s.usable(); err != nil {
		return false, 0, err
	}
	if err := driver.ValidateSlot(key, limit, ttl); err != nil {
		return false, 0, err
	}
	ms := int64(ceilMillis(ttl) / time.Millisecond)
	n, err := slotAcquireScript.Run(ctx, s.client, []string{s.keys.key(key, nsSlot)}, limit, ms).Int64()
	if err != nil {
		return false, 0, failed("AcquireSlot", err)
	}
	if n < 0 {
		return false, -n - 1, nil
	}
	return true, n, nil
}

// ReleaseSlot decrements the plain counter at key, clamped to zero; see
// pace.Store.ReleaseSlot. The counter keeps its TTL; at zero its key is
// deleted.
func (s *Store) ReleaseSlot(ctx context.Context, key string) error {
	if err := s.usable(); err != nil {
		return err
	}
	if err := driver.ValidateKey(key); err != nil {
		return err
	}
	if err := slotReleaseScript.Run(ctx, s.client, []string{s.keys.key(key, nsSlot)}).Err(); err != nil {
		return failed("ReleaseSlot", err)
	}
	return nil
}

// RefreshSlot sets the idle TTL of the plain counter at key to ttl (rounded
// up to the millisecond); see pace.Store.RefreshSlot. An absent counter stays
// absent.
func (s *Store) RefreshSlot(ctx context.Context, key string, ttl time.Duration) error {
	if err := s.usable(); err != nil {
		return err
	}
	if err := driver.ValidateRefresh(key, ttl); err != nil {
		return err
	}
	if err := s.client.PExpire(ctx, s.keys.key(key, nsSlot), ceilMillis(ttl)).Err(); err != nil {
		return failed("RefreshSlot", err)
	}
	return nil
}

// AcquireSlotBurst reserves one slot under the burst model; see
// pace.Store.AcquireSlotBurst and pace.AdmitBurst, whose arithmetic the
// script repeats at the server's time. The slot's key expires at its
// ReclaimAt.
func (s *Store) AcquireSlotBurst(ctx context.Context, key string, sustained, ceiling int64, burstBudget, ttl time.Duration) (bool, int64, error) {
	if err := s.usable(); err != nil {
		return false, 0, err
	}
	if err := driver.ValidateSlotBurst(key, sustained, ceiling, burstBudget, ttl); err != nil {
		return false, 0, err
	}
	n, err := s.burst(ctx, "a", key, sustained, ceiling, burstBudget, ttl)
	if err != nil {
		return false, 0, failed("AcquireSlotBurst", err)
	}
	if n < 0 {
		return false, -n - 1, nil
	}
	return true, n, nil
}

// ReleaseSlotBurst releases one connection of the burst slot at key after
// charging the elapsed time; see pace.Store.ReleaseSlotBurst and
// pace.ReleaseBurst. An absent slot stays absent.
func (s *Store) ReleaseSlotBurst(ctx context.Context, key string) error {
	if err := s.usable(); err != nil {
		return err
	}
	if err := driver.ValidateKey(key); err != nil {
		return err
	}
	if _, err := s.burst(ctx, "r", key, 0, 0, 0, 0); err != nil {
		return failed("ReleaseSlotBurst", err)
	}
	return nil
}

// RefreshSlotBurst charges the elapsed time and extends the idle TTL of the
// burst slot at key; see pace.Store.RefreshSlotBurst and pace.RefreshBurst.
// An absent or expired slot is not resurrected.
func (s *Store) RefreshSlotBurst(ctx context.Context, key string, ttl time.Duration) error {
	if err := s.usable(); err != nil {
		return err
	}
	if err := driver.ValidateRefresh(key, ttl); err != nil {
		return err
	}
	if _, err := s.burst(ctx, "f", key, 0, 0, 0, ttl); err != nil {
		return failed("RefreshSlotBurst", err)
	}
	return nil
}

// burst runs burstScript on the burst key of key.
func (s *Store) burst(ctx context.Context, op, key string, sustained, ceiling int64, budget, ttl time.Duration) (int64, error) {
	ts, tn := split(ttl)
	args := s.withNow(op, sustained, ceiling, int64(budget), ts, tn)
	return burstScript.Run(ctx, s.client, []string{s.keys.key(key, nsBurst)}, args...).Int64()
}

// Get returns the value at key; see pace.Store.Get. The result is the
// caller's own slice.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	if err := driver.ValidateKey(key); err != nil {
		return nil, err
	}
	v, err := s.client.Get(ctx, s.keys.key(key, nsValue)).Bytes()
	switch {
	case errors.Is(err, redis.Nil):
		return nil, pace.ErrNotFound
	case err != nil:
		return nil, failed("Get", err)
	}
	return v, nil
}

// Set writes value at key; see pace.Store.Set. ttl is rounded up to the
// millisecond; ttl 0 means the value never expires (the only key of the
// Store without an expiry).
func (s *Store) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	if err := s.usable(); err != nil {
		return err
	}
	if err := driver.ValidateSet(key, ttl); err != nil {
		return err
	}
	if value == nil {
		value = []byte{}
	}
	if err := s.client.Set(ctx, s.keys.key(key, nsValue), value, ceilMillis(ttl)).Err(); err != nil {
		return failed("Set", err)
	}
	return nil
}

// Delete removes key from all five namespaces in one script; see
// pace.Store.Delete.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := s.usable(); err != nil {
		return err
	}
	if err := driver.ValidateKey(key); err != nil {
		return err
	}
	if err := deleteScript.Run(ctx, s.client, s.keys.all(key)).Err(); err != nil {
		return failed("Delete", err)
	}
	return nil
}

// Close marks the Store closed: every later call returns an error wrapping
// pace.ErrClosed. It is idempotent, starts and stops no goroutine, and does
// not close the client, which belongs to the caller.
func (s *Store) Close(ctx context.Context) error {
	s.closed.Store(true)
	return nil
}
