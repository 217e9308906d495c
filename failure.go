package pace

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// FailurePolicy is the decision a Store wrapped by WithFailurePolicy makes,
// in place of its backend, when the backend fails: admit (FailOpen) or refuse
// (FailClosed). The zero value is not a policy, so the choice is always
// explicit.
type FailurePolicy int

const (
	// FailClosed refuses when the backend fails: TokenBucket reports
	// allowed=false with the configured retryAfter (see
	// FailClosedRetryAfter), AcquireSlot and AcquireSlotBurst report
	// acquired=false with current set to the limit (or the ceiling), which
	// reads as a hard-wall rejection. For limits that must never be overrun:
	// an outage of the backend becomes an outage of the limited service.
	FailClosed FailurePolicy = iota + 1

	// FailOpen admits when the backend fails: TokenBucket reports
	// allowed=true, AcquireSlot and AcquireSlotBurst acquired=true with
	// current 0 (the count is unknown). For fairness limits where
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

// FailureHook is told about every decision a Store wrapped by
// WithFailurePolicy makes in place of its backend: op is the method name
// ("TokenBucket", "AcquireSlot" or "AcquireSlotBurst"), err the backend error
// that caused it, allowed the decision. It is called synchronously, once per
// such decision, possibly from many goroutines at once, so it must be fast
// and safe for concurrent use. Package instrument provides one that counts
// the decisions for Prometheus.
type FailureHook func(op string, err error, allowed bool)

// FailureOption configures WithFailurePolicy.
type FailureOption func(*failureConfig)

type failureConfig struct {
	hook          FailureHook
	retryAfter    time.Duration
	probeInterval time.Duration
	clock         func() time.Time // for tests; nil: the monotonic clock
}

// defaultFailClosedRetryAfter is the retryAfter a fail-closed TokenBucket
// reports when FailClosedRetryAfter is not given: long enough that callers
// who honour it do not hammer a failing backend, short enough that service
// resumes promptly once it is back.
const defaultFailClosedRetryAfter = time.Second

// defaultProbeInterval is the time a Store wrapped by WithFailurePolicy
// decides without its backend after a failure, when ProbeInterval is not
// given: short enough that limits hold again within about a second of the
// backend's return, long enough that a probe every interval costs the
// backend nothing.
const defaultProbeInterval = 500 * time.Millisecond

// OnFailure reports every decision made in place of the backend to h (see
// FailureHook). The default is none. A nil h keeps the default; a second
// OnFailure replaces the first.
func OnFailure(h FailureHook) FailureOption {
	return func(c *failureConfig) { c.hook = h }
}

// FailClosedRetryAfter sets the retryAfter that TokenBucket reports when it
// refuses under FailClosed because the backend failed. It must be above zero;
// the default is one second. FailOpen ignores it.
func FailClosedRetryAfter(d time.Duration) FailureOption {
	return func(c *failureConfig) { c.retryAfter = d }
}

// ProbeInterval sets how long a Store wrapped by WithFailurePolicy keeps off
// its backend after a failure before it probes it again (see
// WithFailurePolicy). It must be above zero; the default is 500 ms.
func ProbeInterval(d time.Duration) FailureOption {
	return func(c *failureConfig) { c.probeInterval = d }
}

// WithFailurePolicy returns a Store that forwards every call to s, bounds
// each by timeout (0: only the caller's own deadline), and turns a backend
// failure of a decision (TokenBucket, AcquireSlot, AcquireSlotBurst) into the
// explicit decision of policy, with a nil error, reported to the hook of
// OnFailure. Invalid arguments (checked before s is called), ErrClosed, and
// any error once the caller's ctx is done are returned as they are, as is
// every error of the methods that decide nothing (Take, TakeMany and Refund
// among them: Shared has a fallback of its own). Close closes s; every later
// call returns an error wrapping ErrClosed.
//
// After a backend failure (an error, or a call that outlived timeout) the
// store keeps off the backend, so that an outage costs callers no waiting:
// for the probe interval (ProbeInterval, 500 ms by default) every decision
// is the policy's at once, reported to the hook with the error that opened
// the interval, and every other call returns at once an error wrapping that
// one, without reaching s (a release or a refresh then is lost; a slot
// counter forgets it at its TTL). The first call after the interval starts
// one probe of s in the background (a Get of a key nothing sets, bounded by
// timeout, or by the interval when timeout is 0) and is itself answered
// without s, as are the others until s has answered the probe; a probe s
// does not answer keeps it off for another interval. So calls go back to s
// within about one interval of its return. A caller's own deadline is not a
// failure: with timeout 0, a backend that hangs rather than errs costs each
// caller its deadline.
//
// The error wraps ErrInvalidArgument when s is nil, policy is neither
// FailOpen nor FailClosed, timeout is negative, or FailClosedRetryAfter or
// ProbeInterval is not above zero. The result is safe for concurrent use if
// s is. How to choose the policy and the timeout, and how to count the
// decisions, is in docs/metrics.md; what they assume of the client of
// Redis or PostgreSQL, in docs/replicas.md.
func WithFailurePolicy(s Store, policy FailurePolicy, timeout time.Duration, opts ...FailureOption) (Store, error) {
	if s == nil {
		return nil, invalid("nil store")
	}
	if policy != FailOpen && policy != FailClosed {
		return nil, invalid("failure policy %v is neither FailOpen nor FailClosed", policy)
	}
	if timeout < 0 {
		return nil, invalid("negative timeout %v", timeout)
	}
	cfg := failureConfig{retryAfter: defaultFailClosedRetryAfter, probeInterval: defaultProbeInterval}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if cfg.retryAfter <= 0 {
		return nil, invalid("fail-closed retryAfter %v must be above zero", cfg.retryAfter)
	}
	if cfg.probeInterval <= 0 {
		return nil, invalid("probe interval %v must be above zero", cfg.probeInterval)
	}
	f := &failureStore{
		s:          s,
		open:       policy == FailOpen,
		timeout:    timeout,
		retryAfter: cfg.retryAfter,
		hook:       cfg.hook,
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

// failureStore is the Store returned by WithFailurePolicy.
type failureStore struct {
	s          Store
	open       bool
	timeout    time.Duration
	retryAfter time.Duration
	hook       FailureHook
	closed     atomic.Bool
	brk        breaker                // open while the backend is down
	down       atomic.Pointer[outage] // what opened brk, once it was
}

// outage is the failure that opened the breaker: cause as the backend
// returned it (for the hook), err wrapping it (for the calls answered
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

// decide reports the policy's decision for op, after calling the hook with
// the backend's error (the one that opened the breaker, when err is the
// breaker's).
func (f *failureStore) decide(op string, err error) bool {
	if f.hook != nil {
		if o := f.down.Load(); o != nil && err == o.err {
			err = o.cause
		}
		f.hook(op, err, f.open)
	}
	return f.open
}

// TokenBucket forwards to the backend; see WithFailurePolicy for what happens
// when it fails.
func (f *failureStore) TokenBucket(ctx context.Context, key string, capacity, refillPerSec, cost float64) (bool, time.Duration, error) {
	if f.closed.Load() {
		return false, 0, errFailureClosed
	}
	if _, err := ValidateTokenBucket(key, capacity, refillPerSec, cost); err != nil {
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
	if err := ValidateSlot(key, limit, ttl); err != nil {
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
	if err := ValidateSlotBurst(key, sustained, ceiling, burstBudget, ttl); err != nil {
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

// Take forwards to the backend within the timeout, and returns its error
// unchanged: a caller of Take (Shared) has its own fallback, so the policy
// decides nothing in its place.
func (f *failureStore) Take(ctx context.Context, key string, shapes []Bucket) (g Grant, err error) {
	err = f.forward(ctx, func(ctx context.Context) error {
		g, err = f.s.Take(ctx, key, shapes)
		return err
	})
	return g, err
}

// TakeMany forwards to the backend within the timeout, and returns its error
// unchanged, as Take does.
func (f *failureStore) TakeMany(ctx context.Context, keys []string, shapes []Bucket, out []Grant) error {
	return f.forward(ctx, func(ctx context.Context) error { return f.s.TakeMany(ctx, keys, shapes, out) })
}

// Refund forwards to the backend within the timeout.
func (f *failureStore) Refund(ctx context.Context, key string, shapes []Bucket, r Receipt) error {
	return f.forward(ctx, func(ctx context.Context) error { return f.s.Refund(ctx, key, shapes, r) })
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
