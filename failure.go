package pace

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ratepace/pace/driver"
)

// FailurePolicy is the decision a Store wrapped by WithFailurePolicy makes,
// in place of its backend, when the backend fails: admit (FailOpen) or refuse
// (FailClosed). The zero value is not a policy, so the choice is always
// explicit.
type FailurePolicy int

const (
	// FailClosed refuses when the backend fails: TokenBucket reports
	// allowed=false and Take a refused Grant, with a retryAfter of the probe
	// interval (see ProbeInterval), AcquireSlot and AcquireSlotBurst report
	// acquired=false with current set to the limit (or the ceiling), which
	// reads as a hard-wall rejection. For limits that must never be overrun:
	// an outage of the backend becomes an outage of the limited service.
	FailClosed FailurePolicy = iota + 1

	// FailOpen admits when the backend fails: TokenBucket reports
	// allowed=true, Take an admitted Grant with the zero Receipt, AcquireSlot
	// and AcquireSlotBurst acquired=true with current 0 (the count is
	// unknown): admissions that acquired nothing and release nothing. For fairness limits where
	// availability matters more: the service stays up but unlimited, and
	// whoever can make the backend fail can lift the limit.
	FailOpen
)

// String returns "fail-closed", "fail-open", or a description of an invalid
// value.
func (p FailurePolicy) String() string {
	switch p {
	case FailClosed:
		return "fail-closed"
	case FailOpen:
		return "fail-open"
	}
	return fmt.Sprintf("FailurePolicy(%d)", int(p))
}

// WithFailurePolicy returns a Store that forwards every call to s, bounds
// each by timeout (0: only the caller's own deadline), and turns a backend
// failure of a decision (TokenBucket, AcquireSlot, AcquireSlotBurst, Take,
// TakeMany) into the explicit decision of policy, with a nil error, reported
// to the Observer of WithObserver (its Failed method): fail-closed refuses, fail-open admits, and
// nothing else is consulted. Invalid arguments (checked before s is called),
// ErrClosed, and any error once the caller's ctx is done are returned as
// they are, as is every error of the methods that decide nothing (releases,
// refreshes, Get, Set, Delete, Refund).
//
// An admission the policy decided acquired nothing, and says so, so that
// its caller gives nothing back: AcquireSlot and AcquireSlotBurst report
// acquired=true with current 0 (a slot the backend acquired counts at least
// itself), which must not be released; Take and TakeMany report OK with the
// zero Receipt (and Remaining 0: the count is unknown), whose Refund does
// nothing. A refusal takes nothing either. A Shared on such a store gets the
// policy's decisions in place of its store's errors, so its WithFallback
// decides only what the policy passes through. Close closes s; every later
// call returns an error wrapping ErrClosed.
//
// After a backend failure (an error, or a call that outlived timeout) the
// store keeps off the backend, so that an outage costs callers no waiting:
// for the probe interval (ProbeInterval, 500 ms by default) every decision
// is the policy's at once, reported to the Observer with the error that
// opened the interval, and every other call returns at once an error
// wrapping that one, without reaching s (a release or a refresh then is
// lost; a slot counter forgets it at its TTL). The first call after the
// interval starts one probe of s in the background (a Get of a key nothing
// sets, bounded by timeout, or by the interval when timeout is 0) and is
// itself answered without s, as are the others until s has answered the
// probe; a probe s does not answer keeps it off for another interval. So
// calls go back to s within about one interval of its return. A caller's
// own deadline is not a failure: with timeout 0, a backend that hangs
// rather than errs costs each caller its deadline.
//
// The error wraps ErrInvalidArgument when s is nil, policy is neither
// FailOpen nor FailClosed, timeout is negative, or an option is invalid or
// does not serve WithFailurePolicy. Its options are WithObserver, WithClock
// (the probes' timing) and ProbeInterval. The result
// is safe for concurrent use if s is. How to choose the policy and the
// timeout, and how to count the decisions, is in docs/metrics.md; what they
// assume of the client of Redis or PostgreSQL, in docs/replicas.md.
func WithFailurePolicy(s Store, policy FailurePolicy, timeout time.Duration, opts ...Option) (Store, error) {
	if s == nil {
		return nil, invalid("nil store")
	}
	if policy != FailOpen && policy != FailClosed {
		return nil, invalid("failure policy %v is neither FailOpen nor FailClosed", policy)
	}
	if timeout < 0 {
		return nil, invalid("negative timeout %v", timeout)
	}
	cfg, err := newConfig(forFailure, opts)
	if err != nil {
		return nil, err
	}
	f := &failureStore{
		s:          s,
		open:       policy == FailOpen,
		timeout:    timeout,
		retryAfter: cfg.probeInterval,
		obs:        cfg.observer,
	}
	f.brk = breaker{
		interval: cfg.probeInterval,
		bound:    cmp.Or(timeout, cfg.probeInterval),
		now:      monotonic(cfg.clock),
		probe: func(ctx context.Context) error {
			_, err := s.Get(ctx, probeKey)
			return err
		},
	}
	if t, ok := s.(driver.Taker); ok {
		return &failureTaker{f, t}, nil
	}
	return f, nil
}

// monotonic returns a clock reading nanoseconds since now: of clock when it
// is not nil, else of the monotonic clock.
func monotonic(clock func() time.Time) func() int64 {
	if clock == nil {
		epoch := time.Now()
		return func() int64 { return int64(time.Since(epoch)) }
	}
	epoch := clock()
	return func() int64 { return int64(clock().Sub(epoch)) }
}

// failureTaker is the Store returned by WithFailurePolicy for a store that
// also implements driver.Taker: it has the take methods too, under the same
// policy.
type failureTaker struct {
	*failureStore
	t driver.Taker
}

var _ driver.Taker = (*failureTaker)(nil)

// failureStore is the Store returned by WithFailurePolicy.
type failureStore struct {
	s          Store
	open       bool
	timeout    time.Duration
	retryAfter time.Duration
	obs        Observer
	closed     atomic.Bool
	brk        breaker                // open while the backend is down
	down       atomic.Pointer[outage] // what opened brk, once it was
}

// outage is the failure that opened the breaker: cause as the backend
// returned it (for the Observer), err wrapping it (for the calls answered
// without the backend).
type outage struct {
	cause, err error
}

var _ Store = (*failureStore)(nil)

var errFailureClosed = fmt.Errorf("pace: failure policy wrapper: %w", ErrClosed)

func noCancel() {}

// bound returns ctx limited by the timeout, and its cancel function.
func (f *failureStore) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if f.timeout == 0 {
		return ctx, noCancel
	}
	return context.WithTimeout(ctx, f.timeout)
}

// failed reports whether err, returned by the backend (or by forward in its
// place) to a call made with the caller's ctx, is a backend failure: one the
// policy decides in place of, and that keeps calls off the backend.
func failed(ctx context.Context, err error) bool {
	return err != nil &&
		ctx.Err() == nil &&
		!errors.Is(err, ErrInvalidArgument) &&
		!errors.Is(err, ErrClosed) &&
		!errors.Is(err, ErrNotFound)
}

// decide reports the policy's decision for op, after telling the observer
// the backend's error (the one that opened the breaker, when err is the
// breaker's).
func (f *failureStore) decide(op string, err error) bool {
	if f.obs != nil {
		if o := f.down.Load(); o != nil && err == o.err {
			err = o.cause
		}
		f.obs.Failed(op, err, f.open)
	}
	return f.open
}

// TokenBucket forwards to the backend; see WithFailurePolicy for what happens
// when it fails.
func (f *failureStore) TokenBucket(ctx context.Context, key string, capacity, refillPerSec, cost float64) (bool, time.Duration, error) {
	if f.closed.Load() {
		return false, 0, errFailureClosed
	}
	if _, err := driver.ValidateTokenBucket(key, capacity, refillPerSec, cost); err != nil {
		return false, 0, err
	}
	var allowed bool
	var retryAfter time.Duration
	err := f.forward(ctx, func(ctx context.Context) (err error) {
		allowed, retryAfter, err = f.s.TokenBucket(ctx, key, capacity, refillPerSec, cost)
		return err
	})
	if !failed(ctx, err) {
		return allowed, retryAfter, err
	}
	if f.decide("TokenBucket", err) {
		return true, 0, nil
	}
	return false, f.retryAfter, nil
}

// AcquireSlot forwards to the backend; see WithFailurePolicy for what happens
// when it fails.
func (f *failureStore) AcquireSlot(ctx context.Context, key string, limit int64, ttl time.Duration) (bool, int64, error) {
	if f.closed.Load() {
		return false, 0, errFailureClosed
	}
	if err := driver.ValidateSlot(key, limit, ttl); err != nil {
		return false, 0, err
	}
	var acquired bool
	var current int64
	err := f.forward(ctx, func(ctx context.Context) (err error) {
		acquired, current, err = f.s.AcquireSlot(ctx, key, limit, ttl)
		return err
	})
	if !failed(ctx, err) {
		return acquired, current, err
	}
	if f.decide("AcquireSlot", err) {
		return true, 0, nil
	}
	return false, limit, nil
}

// AcquireSlotBurst forwards to the backend; see WithFailurePolicy for what
// happens when it fails.
func (f *failureStore) AcquireSlotBurst(ctx context.Context, key string, sustained, ceiling int64, burstBudget, ttl time.Duration) (bool, int64, error) {
	if f.closed.Load() {
		return false, 0, errFailureClosed
	}
	if err := driver.ValidateSlotBurst(key, sustained, ceiling, burstBudget, ttl); err != nil {
		return false, 0, err
	}
	var acquired bool
	var current int64
	err := f.forward(ctx, func(ctx context.Context) (err error) {
		acquired, current, err = f.s.AcquireSlotBurst(ctx, key, sustained, ceiling, burstBudget, ttl)
		return err
	})
	if !failed(ctx, err) {
		return acquired, current, err
	}
	if f.decide("AcquireSlotBurst", err) {
		return true, 0, nil
	}
	return false, ceiling, nil
}

// forward runs op on the backend within the timeout, unless the breaker
// keeps calls off it: then it returns at once the error of the failure that
// opened it. A backend failure opens the breaker, an answer closes it.
// Every method calls the backend through it.
func (f *failureStore) forward(ctx context.Context, op func(context.Context) error) error {
	if f.closed.Load() {
		return errFailureClosed
	}
	if !f.brk.closed() {
		return f.down.Load().err
	}
	bctx, cancel := f.bound(ctx)
	err := op(bctx)
	cancel()
	switch {
	case failed(ctx, err):
		f.down.Store(&outage{cause: err, err: fmt.Errorf("pace: failure policy: backend not called, down since a failure: %w", err)})
		f.brk.trip()
	case ctx.Err() == nil: // an answer (the caller's own deadline is none)
		f.brk.reset()
	}
	return err
}

// ReleaseSlot forwards to the backend within the timeout.
func (f *failureStore) ReleaseSlot(ctx context.Context, key string) error {
	return f.forward(ctx, func(ctx context.Context) error { return f.s.ReleaseSlot(ctx, key) })
}

// RefreshSlot forwards to the backend within the timeout.
func (f *failureStore) RefreshSlot(ctx context.Context, key string, ttl time.Duration) error {
	return f.forward(ctx, func(ctx context.Context) error { return f.s.RefreshSlot(ctx, key, ttl) })
}

// ReleaseSlotBurst forwards to the backend within the timeout.
func (f *failureStore) ReleaseSlotBurst(ctx context.Context, key string) error {
	return f.forward(ctx, func(ctx context.Context) error { return f.s.ReleaseSlotBurst(ctx, key) })
}

// RefreshSlotBurst forwards to the backend within the timeout.
func (f *failureStore) RefreshSlotBurst(ctx context.Context, key string, ttl time.Duration) error {
	return f.forward(ctx, func(ctx context.Context) error { return f.s.RefreshSlotBurst(ctx, key, ttl) })
}

// Get forwards to the backend within the timeout.
func (f *failureStore) Get(ctx context.Context, key string) (value []byte, err error) {
	err = f.forward(ctx, func(ctx context.Context) error {
		value, err = f.s.Get(ctx, key)
		return err
	})
	return value, err
}

// Set forwards to the backend within the timeout.
func (f *failureStore) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	return f.forward(ctx, func(ctx context.Context) error { return f.s.Set(ctx, key, value, ttl) })
}

// Take forwards to the backend; see WithFailurePolicy for what happens when
// it fails.
func (f *failureTaker) Take(ctx context.Context, key string, shapes []driver.Shape) (driver.Grant, error) {
	if f.closed.Load() {
		return driver.Grant{}, errFailureClosed
	}
	if err := driver.ValidateTake(key, shapes); err != nil {
		return driver.Grant{}, err
	}
	var g driver.Grant
	err := f.forward(ctx, func(ctx context.Context) (err error) {
		g, err = f.t.Take(ctx, key, shapes)
		return err
	})
	if !failed(ctx, err) {
		return g, err
	}
	return f.grant("Take", err), nil
}

// TakeMany forwards to the backend; see WithFailurePolicy for what happens
// when it fails: every key gets the policy's decision.
func (f *failureTaker) TakeMany(ctx context.Context, keys []string, shapes []driver.Shape, out []driver.Grant) error {
	if f.closed.Load() {
		return errFailureClosed
	}
	if err := driver.ValidateTakeMany(keys, shapes, out); err != nil {
		return err
	}
	err := f.forward(ctx, func(ctx context.Context) error { return f.t.TakeMany(ctx, keys, shapes, out) })
	if !failed(ctx, err) {
		return err
	}
	g := f.grant("TakeMany", err)
	for i := range out {
		out[i] = g
	}
	return nil
}

// grant returns the policy's decision of a take, after telling the observer:
// fail-open admits with the zero Receipt (nothing was taken, so there is
// nothing to refund), fail-closed refuses until the next probe.
func (f *failureStore) grant(op string, err error) driver.Grant {
	if f.decide(op, err) {
		return driver.Grant{OK: true}
	}
	return driver.Grant{RetryAfter: f.retryAfter}
}

// Refund forwards to the backend within the timeout. The zero Receipt, that
// of an admission the policy decided, took nothing: its refund does nothing
// and never reaches the backend.
func (f *failureTaker) Refund(ctx context.Context, key string, shapes []driver.Shape, r driver.Receipt) error {
	if r == (driver.Receipt{}) {
		if f.closed.Load() {
			return errFailureClosed
		}
		return nil
	}
	return f.forward(ctx, func(ctx context.Context) error { return f.t.Refund(ctx, key, shapes, r) })
}

// Delete forwards to the backend within the timeout.
func (f *failureStore) Delete(ctx context.Context, key string) error {
	return f.forward(ctx, func(ctx context.Context) error { return f.s.Delete(ctx, key) })
}

// Close closes the backend with the caller's ctx and makes every later call
// return ErrClosed. It returns once no probe is under way.
func (f *failureStore) Close(ctx context.Context) error {
	f.closed.Store(true)
	err := f.s.Close(ctx)
	f.brk.wait()
	return err
}
