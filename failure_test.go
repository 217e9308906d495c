package pace_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/driver"
	"github.com/ratepace/pace/internal/benchkit"
	"github.com/ratepace/pace/internal/fakeclock"
	"github.com/ratepace/pace/memory"
	"github.com/ratepace/pace/storetest"
)

// errBackendDown stands for a backend that is down.
var errBackendDown = errors.New("backend: connection refused")

// failingStore is a Store whose every method returns err (nil: an allowed or
// acquired decision with fixed values), and counts the calls that reached it.
type failingStore struct {
	err   error
	calls atomic.Int64
}

func (s *failingStore) TokenBucket(ctx context.Context, key string, capacity, refillPerSec, cost float64) (bool, time.Duration, error) {
	s.calls.Add(1)
	if s.err != nil {
		return false, 0, s.err
	}
	return false, 7 * time.Millisecond, nil
}

func (s *failingStore) AcquireSlot(ctx context.Context, key string, limit int64, ttl time.Duration) (bool, int64, error) {
	s.calls.Add(1)
	if s.err != nil {
		return false, 0, s.err
	}
	return true, 1, nil
}

func (s *failingStore) AcquireSlotBurst(ctx context.Context, key string, sustained, ceiling int64, burstBudget, ttl time.Duration) (bool, int64, error) {
	s.calls.Add(1)
	if s.err != nil {
		return false, 0, s.err
	}
	return false, 2, nil
}

func (s *failingStore) ReleaseSlot(ctx context.Context, key string) error {
	s.calls.Add(1)
	return s.err
}

func (s *failingStore) RefreshSlot(ctx context.Context, key string, ttl time.Duration) error {
	s.calls.Add(1)
	return s.err
}

func (s *failingStore) ReleaseSlotBurst(ctx context.Context, key string) error {
	s.calls.Add(1)
	return s.err
}

func (s *failingStore) RefreshSlotBurst(ctx context.Context, key string, ttl time.Duration) error {
	s.calls.Add(1)
	return s.err
}

func (s *failingStore) Get(ctx context.Context, key string) ([]byte, error) {
	s.calls.Add(1)
	if s.err != nil {
		return nil, s.err
	}
	return []byte("v"), nil
}

func (s *failingStore) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	s.calls.Add(1)
	return s.err
}

func (s *failingStore) Take(ctx context.Context, key string, shapes []driver.Shape) (driver.Grant, error) {
	s.calls.Add(1)
	if s.err != nil {
		return driver.Grant{}, s.err
	}
	return driver.Grant{OK: true, Remaining: 3}, nil
}

func (s *failingStore) TakeMany(ctx context.Context, keys []string, shapes []driver.Shape, out []driver.Grant) error {
	s.calls.Add(1)
	return s.err
}

func (s *failingStore) Refund(ctx context.Context, key string, shapes []driver.Shape, r driver.Receipt) error {
	s.calls.Add(1)
	return s.err
}

func (s *failingStore) Delete(ctx context.Context, key string) error {
	s.calls.Add(1)
	return s.err
}

func (s *failingStore) Close(ctx context.Context) error {
	s.calls.Add(1)
	return nil
}

// hangingStore blocks every decision until its context is done, then returns
// the context's error, as a backend that has stopped answering does. It
// sends the deadline it was given on deadlines, if not nil.
type hangingStore struct {
	failingStore
	deadlines chan<- time.Time
}

func (s *hangingStore) wait(ctx context.Context) error {
	d, ok := ctx.Deadline()
	if s.deadlines != nil {
		if !ok {
			d = time.Time{}
		}
		s.deadlines <- d
	}
	<-ctx.Done()
	return fmt.Errorf("backend: %w", ctx.Err())
}

func (s *hangingStore) TokenBucket(ctx context.Context, key string, capacity, refillPerSec, cost float64) (bool, time.Duration, error) {
	return false, 0, s.wait(ctx)
}

func (s *hangingStore) AcquireSlot(ctx context.Context, key string, limit int64, ttl time.Duration) (bool, int64, error) {
	return false, 0, s.wait(ctx)
}

func (s *hangingStore) Get(ctx context.Context, key string) ([]byte, error) {
	return nil, s.wait(ctx)
}

func (s *hangingStore) Take(ctx context.Context, key string, shapes []driver.Shape) (driver.Grant, error) {
	return driver.Grant{}, s.wait(ctx)
}

// failedFunc is an Observer that passes the failure policy's decisions to
// the function it is.
type failedFunc func(op string, err error, allowed bool)

func (f failedFunc) Failed(op string, err error, allowed bool) { f(op, err, allowed) }
func (failedFunc) Decided(pace.Source, bool)                   {}
func (failedFunc) Returned(pace.Source)                        {}
func (failedFunc) RoundTrip(int)                               {}

// hookCall is one call of the Observer's Failed.
type hookCall struct {
	op      string
	err     error
	allowed bool
}

// hookRecorder records the calls of an Observer's Failed (see failedFunc).
type hookRecorder struct {
	mu    sync.Mutex
	calls []hookCall
}

func (r *hookRecorder) hook(op string, err error, allowed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, hookCall{op, err, allowed})
}

func (r *hookRecorder) take() []hookCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.calls
	r.calls = nil
	return c
}

func mustFailurePolicy(t *testing.T, s pace.Store, p pace.FailurePolicy, timeout time.Duration, opts ...pace.Option) pace.Store {
	t.Helper()
	f, err := pace.WithFailurePolicy(s, p, timeout, opts...)
	if err != nil {
		t.Fatalf("WithFailurePolicy(%v, %v) = %v", p, timeout, err)
	}
	return f
}

// policyDecision is the outcome of one of the three deciding methods.
type policyDecision struct {
	allowed bool
	n       int64 // retryAfter for TokenBucket, current for the slots
	err     error
}

// policyDecisions calls each deciding method once with valid arguments.
var policyDecisions = []struct {
	op   string
	call func(pace.Store) policyDecision
}{
	{"TokenBucket", func(s pace.Store) policyDecision {
		ok, d, err := s.TokenBucket(context.Background(), "k", 10, 1, 1)
		return policyDecision{ok, int64(d), err}
	}},
	{"AcquireSlot", func(s pace.Store) policyDecision {
		ok, n, err := s.AcquireSlot(context.Background(), "k", 3, time.Minute)
		return policyDecision{ok, n, err}
	}},
	{"AcquireSlotBurst", func(s pace.Store) policyDecision {
		ok, n, err := s.AcquireSlotBurst(context.Background(), "k", 4, 6, time.Minute, time.Minute)
		return policyDecision{ok, n, err}
	}},
}

func TestFailurePolicyDecidesOnBackendError(t *testing.T) {
	for _, tc := range []struct {
		policy pace.FailurePolicy
		want   map[string]policyDecision
	}{
		{pace.FailOpen, map[string]policyDecision{
			"TokenBucket":      {true, 0, nil},
			"AcquireSlot":      {true, 0, nil},
			"AcquireSlotBurst": {true, 0, nil},
		}},
		{pace.FailClosed, map[string]policyDecision{
			"TokenBucket":      {false, int64(3 * time.Second), nil},
			"AcquireSlot":      {false, 3, nil},
			"AcquireSlotBurst": {false, 6, nil},
		}},
	} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			var rec hookRecorder
			backend := &failingStore{err: errBackendDown}
			for _, d := range policyDecisions {
				// A wrapper each: after a failure, a wrapper keeps calls
				// off its backend (TestFailurePolicyBreaker).
				s := mustFailurePolicy(t, backend, tc.policy, 0,
					pace.WithObserver(failedFunc(rec.hook)), pace.ProbeInterval(3*time.Second))
				got := d.call(s)
				if want := tc.want[d.op]; got != want {
					t.Errorf("%s on a failing backend = %v; want %v", d.op, got, want)
				}
				calls := rec.take()
				want := []hookCall{{d.op, errBackendDown, tc.policy == pace.FailOpen}}
				if len(calls) != 1 || calls[0] != want[0] {
					t.Errorf("%s: hook calls %v; want %v", d.op, calls, want)
				}
			}
			if n := backend.calls.Load(); n != 3 {
				t.Errorf("backend calls = %d; want 3", n)
			}
		})
	}
}

func TestFailurePolicyDefaultRetryAfter(t *testing.T) {
	s := mustFailurePolicy(t, &failingStore{err: errBackendDown}, pace.FailClosed, 0)
	ok, d, err := s.TokenBucket(context.Background(), "k", 10, 1, 1)
	if ok || d != 500*time.Millisecond || err != nil { // the documented default of ProbeInterval
		t.Errorf("TokenBucket = %v, %v, %v; want false, %v, nil", ok, d, err, 500*time.Millisecond)
	}
}

func TestFailurePolicyPassesHealthyDecisions(t *testing.T) {
	for _, p := range []pace.FailurePolicy{pace.FailOpen, pace.FailClosed} {
		var rec hookRecorder
		s := mustFailurePolicy(t, &failingStore{}, p, time.Minute, pace.WithObserver(failedFunc(rec.hook)))
		want := map[string]policyDecision{
			"TokenBucket":      {false, int64(7 * time.Millisecond), nil},
			"AcquireSlot":      {true, 1, nil},
			"AcquireSlotBurst": {false, 2, nil},
		}
		for _, d := range policyDecisions {
			if got := d.call(s); got != want[d.op] {
				t.Errorf("%v: %s on a healthy backend = %v; want %v", p, d.op, got, want[d.op])
			}
		}
		if calls := rec.take(); len(calls) != 0 {
			t.Errorf("%v: hook calls on a healthy backend: %v", p, calls)
		}
	}
}

// TestFailurePolicyPassesErrors pins the errors that are not backend failures:
// they come back unchanged under either policy and the hook never hears of them.
func TestFailurePolicyPassesErrors(t *testing.T) {
	backendInvalid := fmt.Errorf("backend says: %w", pace.ErrInvalidArgument)
	backendClosed := fmt.Errorf("backend says: %w", pace.ErrClosed)
	for _, p := range []pace.FailurePolicy{pace.FailOpen, pace.FailClosed} {
		for _, berr := range []error{backendInvalid, backendClosed} {
			var rec hookRecorder
			s := mustFailurePolicy(t, &failingStore{err: berr}, p, 0, pace.WithObserver(failedFunc(rec.hook)))
			for _, d := range policyDecisions {
				if got := d.call(s); !errors.Is(got.err, berr) || got.allowed {
					t.Errorf("%v: %s with backend error %q = %v; want not allowed, that error", p, d.op, berr, got)
				}
			}
			if calls := rec.take(); len(calls) != 0 {
				t.Errorf("%v: hook calls for %q: %v", p, berr, calls)
			}
		}
	}
}

func TestFailurePolicyValidatesBeforeBackend(t *testing.T) {
	ctx := context.Background()
	var rec hookRecorder
	backend := &failingStore{err: errBackendDown}
	s := mustFailurePolicy(t, backend, pace.FailOpen, 0, pace.WithObserver(failedFunc(rec.hook)))
	for name, call := range map[string]func() (bool, error){
		"TokenBucket NaN capacity": func() (bool, error) {
			ok, _, err := s.TokenBucket(ctx, "k", math.NaN(), 1, 1)
			return ok, err
		},
		"TokenBucket cost above capacity": func() (bool, error) {
			ok, _, err := s.TokenBucket(ctx, "k", 1, 1, 2)
			return ok, err
		},
		"TokenBucket empty key": func() (bool, error) {
			ok, _, err := s.TokenBucket(ctx, "", 1, 1, 1)
			return ok, err
		},
		"AcquireSlot limit 0": func() (bool, error) {
			ok, _, err := s.AcquireSlot(ctx, "k", 0, time.Second)
			return ok, err
		},
		"AcquireSlot ttl 0": func() (bool, error) {
			ok, _, err := s.AcquireSlot(ctx, "k", 1, 0)
			return ok, err
		},
		"AcquireSlotBurst ceiling above 2×": func() (bool, error) {
			ok, _, err := s.AcquireSlotBurst(ctx, "k", 2, 5, time.Minute, time.Second)
			return ok, err
		},
		"AcquireSlotBurst negative budget": func() (bool, error) {
			ok, _, err := s.AcquireSlotBurst(ctx, "k", 2, 3, -time.Minute, time.Second)
			return ok, err
		},
	} {
		if ok, err := call(); ok || !errors.Is(err, pace.ErrInvalidArgument) {
			t.Errorf("%s under FailOpen on a failing backend = %v, %v; want false, ErrInvalidArgument", name, ok, err)
		}
	}
	if n := backend.calls.Load(); n != 0 {
		t.Errorf("backend saw %d calls with invalid arguments; want 0", n)
	}
	if calls := rec.take(); len(calls) != 0 {
		t.Errorf("hook calls for invalid arguments: %v", calls)
	}
}

func TestFailurePolicyCallerCancel(t *testing.T) {
	var rec hookRecorder
	s := mustFailurePolicy(t, &hangingStore{}, pace.FailOpen, time.Hour, pace.WithObserver(failedFunc(rec.hook)))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ok, _, err := s.TokenBucket(ctx, "k", 10, 1, 1)
	if ok || !errors.Is(err, context.Canceled) {
		t.Errorf("TokenBucket with a canceled ctx = %v, %v; want false, context.Canceled", ok, err)
	}
	ok, _, err = s.AcquireSlot(ctx, "k", 1, time.Second)
	if ok || !errors.Is(err, context.Canceled) {
		t.Errorf("AcquireSlot with a canceled ctx = %v, %v; want false, context.Canceled", ok, err)
	}
	if calls := rec.take(); len(calls) != 0 {
		t.Errorf("hook calls for a caller's cancellation: %v", calls)
	}
}

func TestFailurePolicyTimeout(t *testing.T) {
	const timeout = 20 * time.Millisecond
	const watchdog = 250 * timeout
	for _, p := range []pace.FailurePolicy{pace.FailOpen, pace.FailClosed} {
		var rec hookRecorder
		deadlines := make(chan time.Time, 1)
		backend := &hangingStore{deadlines: deadlines}
		s := mustFailurePolicy(t, backend, p, timeout, pace.WithObserver(failedFunc(rec.hook)))
		start := time.Now()
		got := make(chan policyDecision, 1)
		go func() {
			ok, _, err := s.TokenBucket(context.Background(), "k", 10, 1, 1)
			got <- policyDecision{allowed: ok, err: err}
		}()
		var d policyDecision
		select {
		case d = <-got:
		case <-time.After(watchdog):
			// Not a synchronisation: a bound that turns a hang into a
			// failure, 250 times the timeout.
			t.Fatalf("%v: TokenBucket on a hung backend still running after %v, with a timeout of %v", p, watchdog, timeout)
		}
		end := time.Now()
		if d.allowed != (p == pace.FailOpen) || d.err != nil {
			t.Errorf("%v: TokenBucket on a hung backend = %v, %v; want %v, nil", p, d.allowed, d.err, p == pace.FailOpen)
		}
		// The backend must have been given the deadline start+timeout, set
		// during the call: that, not a measured elapsed time, is what bounds
		// the call.
		if d := <-deadlines; d.Before(start.Add(timeout)) || d.After(end.Add(timeout)) {
			t.Errorf("%v: backend deadline %v after start; want timeout %v after a moment within the call (%v long)", p, d.Sub(start), timeout, end.Sub(start))
		}
		calls := rec.take()
		if len(calls) != 1 || !errors.Is(calls[0].err, context.DeadlineExceeded) {
			t.Errorf("%v: hook calls %v; want one with context.DeadlineExceeded", p, calls)
		}

		// Methods without a policyDecision get the timeout and return its
		// error (on wrappers of their own: after the failure above, this
		// one keeps calls off its backend).
		s = mustFailurePolicy(t, &hangingStore{deadlines: deadlines}, p, timeout, pace.WithObserver(failedFunc(rec.hook)))
		if _, err := s.Get(context.Background(), "k"); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%v: Get on a hung backend = %v; want context.DeadlineExceeded", p, err)
		}
		if d := <-deadlines; d.IsZero() {
			t.Errorf("%v: Get reached the backend without a deadline", p)
		}
		if calls := rec.take(); len(calls) != 0 {
			t.Errorf("%v: hook calls for Get: %v", p, calls)
		}
		// Take is a decision too: the policy decides it, with an admission
		// that took nothing (the zero Receipt, whose Refund does nothing) or
		// the fail-closed retry-after (on a wrapper of its own, as Get).
		backend = &hangingStore{deadlines: deadlines}
		s = mustFailurePolicy(t, backend, p, timeout, pace.WithObserver(failedFunc(rec.hook)))
		shape, err := driver.NewShape(5, 5, 1)
		if err != nil {
			t.Fatal(err)
		}
		g, err := s.(driver.Taker).Take(context.Background(), "k", []driver.Shape{shape})
		want := driver.Grant{OK: true}
		if p == pace.FailClosed {
			want = driver.Grant{RetryAfter: 500 * time.Millisecond} // the default probe interval
		}
		if g != want || err != nil {
			t.Errorf("%v: Take on a hung backend = %+v, %v; want %+v, nil", p, g, err, want)
		}
		if d := <-deadlines; d.IsZero() {
			t.Errorf("%v: Take reached the backend without a deadline", p)
		}
		if calls := rec.take(); len(calls) != 1 || calls[0].op != "Take" || !errors.Is(calls[0].err, context.DeadlineExceeded) {
			t.Errorf("%v: hook calls for Take: %v; want one", p, calls)
		}
		backend.err = errors.New("backend: down")
		n := backend.calls.Load()
		if err := s.(driver.Taker).Refund(context.Background(), "k", []driver.Shape{shape}, g.Receipt); err != nil || backend.calls.Load() != n {
			t.Errorf("%v: Refund of the zero Receipt = %v, %d backend calls; want nil, none", p, err, backend.calls.Load()-n)
		}
	}
}

func TestFailurePolicyZeroTimeoutAddsNoDeadline(t *testing.T) {
	deadlines := make(chan time.Time, 1)
	s := mustFailurePolicy(t, &hangingStore{deadlines: deadlines}, pace.FailOpen, 0)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, _, err := s.TokenBucket(ctx, "k", 10, 1, 1)
		done <- err
	}()
	if d := <-deadlines; !d.IsZero() {
		t.Errorf("timeout 0: backend got deadline %v; want none", d)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("TokenBucket after the caller canceled = %v; want context.Canceled", err)
	}
}

func TestFailurePolicyPassThroughMethods(t *testing.T) {
	ctx := context.Background()
	for _, p := range []pace.FailurePolicy{pace.FailOpen, pace.FailClosed} {
		var rec hookRecorder
		backend := &failingStore{err: errBackendDown}
		s := mustFailurePolicy(t, backend, p, time.Minute, pace.WithObserver(failedFunc(rec.hook)))
		_, getErr := s.Get(ctx, "k")
		for name, err := range map[string]error{
			"Refund":           s.(driver.Taker).Refund(ctx, "k", nil, driver.Receipt{At: time.Second}),
			"ReleaseSlot":      s.ReleaseSlot(ctx, "k"),
			"RefreshSlot":      s.RefreshSlot(ctx, "k", time.Second),
			"ReleaseSlotBurst": s.ReleaseSlotBurst(ctx, "k"),
			"RefreshSlotBurst": s.RefreshSlotBurst(ctx, "k", time.Second),
			"Get":              getErr,
			"Set":              s.Set(ctx, "k", []byte("v"), 0),
			"Delete":           s.Delete(ctx, "k"),
		} {
			if !errors.Is(err, errBackendDown) {
				t.Errorf("%v: %s on a failing backend = %v; want %v", p, name, err, errBackendDown)
			}
		}
		// The first failure keeps the others off the backend: they return
		// at once an error wrapping it.
		if n := backend.calls.Load(); n != 1 {
			t.Errorf("%v: backend calls = %d; want 1", p, n)
		}
		if calls := rec.take(); len(calls) != 0 {
			t.Errorf("%v: hook calls for methods without a policyDecision: %v", p, calls)
		}
	}
}

// TestFailurePolicyDecidesTakes: Take and TakeMany are decisions, and a
// failure of the backend is the policy's to decide, as for TokenBucket:
// fail-closed refuses with its retry-after, fail-open admits with the zero
// Receipt (nothing was taken), whose Refund does nothing and never reaches
// the backend. Before, their errors went back to the caller, which then
// decided by other means (httplimit asked TokenBucket, another bucket).
func TestFailurePolicyDecidesTakes(t *testing.T) {
	ctx := context.Background()
	shape, err := driver.NewShape(5, 5, 1)
	if err != nil {
		t.Fatal(err)
	}
	shapes := []driver.Shape{shape}
	for _, p := range []pace.FailurePolicy{pace.FailOpen, pace.FailClosed} {
		var rec hookRecorder
		backend := &failingStore{err: errBackendDown}
		s := mustFailurePolicy(t, backend, p, time.Minute, pace.WithObserver(failedFunc(rec.hook)), pace.ProbeInterval(2*time.Second))
		want := driver.Grant{OK: true}
		if p == pace.FailClosed {
			want = driver.Grant{RetryAfter: 2 * time.Second}
		}
		g, err := s.(driver.Taker).Take(ctx, "k", shapes)
		if g != want || err != nil {
			t.Errorf("%v: Take on a failing backend = %+v, %v; want %+v, nil", p, g, err, want)
		}
		out := make([]driver.Grant, 2)
		if err := s.(driver.Taker).TakeMany(ctx, []string{"a", "b"}, shapes, out); err != nil || out[0] != want || out[1] != want {
			t.Errorf("%v: TakeMany on a failing backend = %+v, %v; want %+v twice, nil", p, out, err, want)
		}
		if err := s.(driver.Taker).Refund(ctx, "k", shapes, g.Receipt); err != nil {
			t.Errorf("%v: Refund of the zero Receipt = %v; want nil", p, err)
		}
		if n := backend.calls.Load(); n != 1 {
			t.Errorf("%v: backend calls = %d; want 1 (Take; TakeMany decided without the backend after its failure; not the Refund)", p, n)
		}
		calls := rec.take()
		if len(calls) != 2 || calls[0].op != "Take" || calls[1].op != "TakeMany" || calls[0].allowed != (p == pace.FailOpen) {
			t.Errorf("%v: hook calls %v; want Take and TakeMany", p, calls)
		}
		// Bad input is still an error, even while the backend is down.
		if _, err := s.(driver.Taker).Take(ctx, "k", nil); !errors.Is(err, pace.ErrInvalidArgument) {
			t.Errorf("%v: Take with no shapes = %v; want ErrInvalidArgument", p, err)
		}
	}
}

func TestFailurePolicyClose(t *testing.T) {
	ctx := context.Background()
	var rec hookRecorder
	backend := &failingStore{err: errBackendDown}
	s := mustFailurePolicy(t, backend, pace.FailOpen, 0, pace.WithObserver(failedFunc(rec.hook)))
	if err := s.Close(ctx); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	before := backend.calls.Load()
	for _, d := range policyDecisions {
		if got := d.call(s); got.allowed || !errors.Is(got.err, pace.ErrClosed) {
			t.Errorf("%s after Close under FailOpen = %v; want not allowed, ErrClosed", d.op, got)
		}
	}
	if _, err := s.Get(ctx, "k"); !errors.Is(err, pace.ErrClosed) {
		t.Errorf("Get after Close = %v; want ErrClosed", err)
	}
	if err := s.ReleaseSlot(ctx, "k"); !errors.Is(err, pace.ErrClosed) {
		t.Errorf("ReleaseSlot after Close = %v; want ErrClosed", err)
	}
	if _, err := s.(driver.Taker).Take(ctx, "k", nil); !errors.Is(err, pace.ErrClosed) {
		t.Errorf("Take after Close = %v; want ErrClosed", err)
	}
	if err := s.(driver.Taker).TakeMany(ctx, []string{"k"}, nil, make([]driver.Grant, 1)); !errors.Is(err, pace.ErrClosed) {
		t.Errorf("TakeMany after Close = %v; want ErrClosed", err)
	}
	if err := s.(driver.Taker).Refund(ctx, "k", nil, driver.Receipt{}); !errors.Is(err, pace.ErrClosed) {
		t.Errorf("Refund after Close = %v; want ErrClosed", err)
	}
	if n := backend.calls.Load() - before; n != 0 {
		t.Errorf("backend saw %d calls after Close; want 0", n)
	}
	if calls := rec.take(); len(calls) != 0 {
		t.Errorf("hook calls after Close: %v", calls)
	}
}

func TestWithFailurePolicyInvalid(t *testing.T) {
	ok := &failingStore{}
	for name, tc := range map[string]struct {
		s       pace.Store
		p       pace.FailurePolicy
		timeout time.Duration
		opts    []pace.Option
	}{
		"nil store":               {nil, pace.FailOpen, 0, nil},
		"zero policy":             {ok, 0, 0, nil},
		"unknown policy":          {ok, 3, 0, nil},
		"negative timeout":        {ok, pace.FailClosed, -time.Second, nil},
		"zero retryAfter":         {ok, pace.FailClosed, 0, []pace.Option{pace.ProbeInterval(0)}},
		"negative retryAfer":      {ok, pace.FailClosed, 0, []pace.Option{pace.ProbeInterval(-1)}},
		"zero probe interval":     {ok, pace.FailOpen, 0, []pace.Option{pace.ProbeInterval(0)}},
		"negative probe interval": {ok, pace.FailOpen, 0, []pace.Option{pace.ProbeInterval(-time.Second)}},
	} {
		s, err := pace.WithFailurePolicy(tc.s, tc.p, tc.timeout, tc.opts...)
		if s != nil || !errors.Is(err, pace.ErrInvalidArgument) {
			t.Errorf("WithFailurePolicy with %s = %v, %v; want nil, ErrInvalidArgument", name, s, err)
		}
	}
}

func TestFailurePolicyString(t *testing.T) {
	for p, want := range map[pace.FailurePolicy]string{
		pace.FailOpen:   "fail-open",
		pace.FailClosed: "fail-closed",
		0:               "FailurePolicy(0)",
	} {
		if got := p.String(); got != want {
			t.Errorf("FailurePolicy(%d).String() = %q; want %q", int(p), got, want)
		}
	}
}

// TestFailurePolicyContract runs the Store contract on the wrapper over a
// healthy memory store, under each policy: with nothing failing, the wrapper
// must be invisible.
func TestFailurePolicyContract(t *testing.T) {
	t.Run("FailOpen", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) pace.Store {
			return mustFailurePolicy(t, memory.New(), pace.FailOpen, time.Minute)
		})
		storetest.RunTaker(t, func(t *testing.T) storetest.TakeStore {
			return mustFailurePolicy(t, memory.New(), pace.FailOpen, time.Minute).(storetest.TakeStore)
		})
	})
	t.Run("FailClosedFakeClock", func(t *testing.T) {
		clk := fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		storetest.Run(t, func(t *testing.T) pace.Store {
			return mustFailurePolicy(t, memory.New(memory.WithClock(clk.Now)), pace.FailClosed, 0)
		}, storetest.WithAdvance(clk.Advance))
		storetest.RunTaker(t, func(t *testing.T) storetest.TakeStore {
			return mustFailurePolicy(t, memory.New(memory.WithClock(clk.Now)), pace.FailClosed, 0).(storetest.TakeStore)
		}, storetest.WithAdvance(clk.Advance))
	})
}

// BenchmarkWithFailurePolicy measures what the wrapper adds to a memory
// store's TokenBucket, without a timeout and with one (which allocates a
// context and a timer per call).
func BenchmarkWithFailurePolicy(b *testing.B) {
	keys := benchkit.Keys(b, 10000)
	for _, tc := range []struct {
		name    string
		wrap    bool
		timeout time.Duration
	}{
		{"bare", false, 0},
		{"timeout=0", true, 0},
		{"timeout=50ms", true, 50 * time.Millisecond},
	} {
		b.Run(tc.name, func(b *testing.B) {
			benchkit.TokenBucket(b, keys, func(b *testing.B) pace.Store {
				var s pace.Store = memory.New()
				if tc.wrap {
					var err error
					if s, err = pace.WithFailurePolicy(s, pace.FailClosed, tc.timeout); err != nil {
						b.Fatal(err)
					}
				}
				b.Cleanup(func() { s.Close(context.Background()) })
				return s
			})
		})
	}
}

func ExampleWithFailurePolicy() {
	// down stands for a Redis or PostgreSQL store whose server is gone.
	down := &failingStore{err: errBackendDown}
	s, err := pace.WithFailurePolicy(down, pace.FailClosed, 50*time.Millisecond)
	if err != nil {
		panic(err)
	}
	allowed, retryAfter, err := s.TokenBucket(context.Background(), "client-42", 10, 5, 1)
	fmt.Println(allowed, retryAfter, err)
	// Output:
	// false 500ms <nil>
}

// switchedStore is a memory store whose TokenBucket, AcquireSlot,
// ReleaseSlot and Get fail while down is set; it counts the calls of the
// first three (calls) and of Get (probes) that reached it.
type switchedStore struct {
	*memory.Store
	down          atomic.Bool
	calls, probes atomic.Int64
}

func (s *switchedStore) reach(n *atomic.Int64) error {
	n.Add(1)
	if s.down.Load() {
		return errBackendDown
	}
	return nil
}

func (s *switchedStore) TokenBucket(ctx context.Context, key string, capacity, refillPerSec, cost float64) (bool, time.Duration, error) {
	if err := s.reach(&s.calls); err != nil {
		return false, 0, err
	}
	return s.Store.TokenBucket(ctx, key, capacity, refillPerSec, cost)
}

func (s *switchedStore) AcquireSlot(ctx context.Context, key string, limit int64, ttl time.Duration) (bool, int64, error) {
	if err := s.reach(&s.calls); err != nil {
		return false, 0, err
	}
	return s.Store.AcquireSlot(ctx, key, limit, ttl)
}

func (s *switchedStore) ReleaseSlot(ctx context.Context, key string) error {
	if err := s.reach(&s.calls); err != nil {
		return err
	}
	return s.Store.ReleaseSlot(ctx, key)
}

func (s *switchedStore) Get(ctx context.Context, key string) ([]byte, error) {
	if err := s.reach(&s.probes); err != nil {
		return nil, err
	}
	return s.Store.Get(ctx, key)
}

// TestFailurePolicyBreaker: after one backend failure, decisions are the
// policy's and releases fail at once, none reaching the backend, for the
// probe interval; then exactly one probe starts in the background however
// many callers arrive at once, none of them waiting for it; a probe the
// backend does not answer keeps calls off it for another interval, and once
// one is answered, the backend decides again (a bucket of one refuses its
// second take). Before, every call reached the backend, each waiting out
// the timeout of a backend that hangs.
func TestFailurePolicyBreaker(t *testing.T) {
	clk := fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	backend := &switchedStore{Store: memory.New(memory.WithClock(clk.Now))}
	var rec hookRecorder
	const interval = 100 * time.Millisecond
	s := mustFailurePolicy(t, backend, pace.FailOpen, 50*time.Millisecond,
		pace.ProbeInterval(interval), pace.WithClock(clk.Now), pace.WithObserver(failedFunc(rec.hook)))
	ctx := context.Background()
	request := func() (allowed bool, releaseErr error) {
		ok, _, err := s.TokenBucket(ctx, "k", 1, 1, 1)
		if err != nil {
			t.Fatalf("TokenBucket = %v", err)
		}
		if acquired, _, err := s.AcquireSlot(ctx, "k", 2, time.Minute); err != nil || !acquired {
			t.Fatalf("AcquireSlot = %v, %v; want acquired", acquired, err)
		}
		return ok, s.ReleaseSlot(ctx, "k")
	}
	backend.down.Store(true)
	if ok, err := request(); !ok || !errors.Is(err, errBackendDown) {
		t.Fatalf("the first request on a failing backend = %v, %v; want fail-open, the release's error", ok, err)
	}
	if n := backend.calls.Load(); n != 1 {
		t.Fatalf("the first request made %d backend calls; want 1 (the failure keeps the rest off)", n)
	}
	rec.take()
	for range 100 {
		if ok, err := request(); !ok || !errors.Is(err, errBackendDown) {
			t.Fatalf("a request while the breaker is open = %v, %v; want fail-open, an error wrapping the backend's", ok, err)
		}
	}
	clk.Advance(interval - time.Nanosecond)
	request()
	pace.WaitFailureProbes(s)
	if calls, probes := backend.calls.Load(), backend.probes.Load(); calls != 1 || probes != 0 {
		t.Fatalf("within the probe interval: %d backend calls, %d probes; want 1, 0", calls, probes)
	}
	if calls := rec.take(); len(calls) != 2*101 || calls[0] != (hookCall{"TokenBucket", errBackendDown, true}) {
		t.Fatalf("hook calls while open: %d, first %v; want %d, the backend's error", len(calls), calls[0], 2*101)
	}
	clk.Advance(time.Nanosecond)
	var wg sync.WaitGroup
	for range 32 { // callers at once: one probe
		wg.Add(1)
		go func() {
			defer wg.Done()
			request()
		}()
	}
	wg.Wait()
	pace.WaitFailureProbes(s)
	request()
	if calls, probes := backend.calls.Load(), backend.probes.Load(); calls != 1 || probes != 1 {
		t.Fatalf("one interval after the failure, 33 requests: %d backend calls, %d probes; want 1, 1", calls, probes)
	}
	backend.down.Store(false)
	clk.Advance(interval) // from the end of the failed probe
	// One decision starts the probe and is answered without the backend
	// (a whole request would race the probe).
	if ok, _, err := s.TokenBucket(ctx, "k", 1, 1, 1); !ok || err != nil {
		t.Fatalf("the decision that starts the probe = %v, %v; want fail-open", ok, err)
	}
	pace.WaitFailureProbes(s)
	if calls, probes := backend.calls.Load(), backend.probes.Load(); calls != 1 || probes != 2 {
		t.Fatalf("the backend back, the next interval: %d backend calls, %d probes; want 1, 2", calls, probes)
	}
	for i, want := range []bool{true, false} {
		if ok, err := request(); ok != want || err != nil {
			t.Fatalf("request %d once the probe was answered = %v, %v; want %v from the backend (a bucket of 1), nil", i, ok, err, want)
		}
	}
}
