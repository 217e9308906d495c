package instrument_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/driver"
	"github.com/ratepace/pace/instrument"
	"github.com/ratepace/pace/internal/fakeclock"
	"github.com/ratepace/pace/memory"
	"github.com/ratepace/pace/storetest"
)

var errBackend = errors.New("backend: connection refused")

// fakeStore answers by key: an invalid key gets driver.ValidateKey's error,
// "fail" a backend error, "reject" a refusal, "missing" pace.ErrNotFound
// from Get, and any other key an admission or success. Its results carry
// distinctive values so that a test can see they pass through unchanged.
type fakeStore struct{}

func (fakeStore) check(key string) error {
	if err := driver.ValidateKey(key); err != nil {
		return err
	}
	if key == "fail" {
		return errBackend
	}
	return nil
}

func (s fakeStore) TokenBucket(ctx context.Context, key string, capacity, refillPerSec, cost float64) (bool, time.Duration, error) {
	if err := s.check(key); err != nil {
		return false, 0, err
	}
	if key == "reject" {
		return false, 3 * time.Second, nil
	}
	return true, 0, nil
}

func (s fakeStore) AcquireSlot(ctx context.Context, key string, limit int64, ttl time.Duration) (bool, int64, error) {
	if err := s.check(key); err != nil {
		return false, 0, err
	}
	if key == "reject" {
		return false, limit, nil
	}
	return true, 1, nil
}

func (s fakeStore) AcquireSlotBurst(ctx context.Context, key string, sustained, ceiling int64, burstBudget, ttl time.Duration) (bool, int64, error) {
	if err := s.check(key); err != nil {
		return false, 0, err
	}
	if key == "reject" {
		return false, ceiling, nil
	}
	return true, 1, nil
}

func (s fakeStore) ReleaseSlot(ctx context.Context, key string) error { return s.check(key) }
func (s fakeStore) RefreshSlot(ctx context.Context, key string, ttl time.Duration) error {
	return s.check(key)
}
func (s fakeStore) ReleaseSlotBurst(ctx context.Context, key string) error { return s.check(key) }
func (s fakeStore) RefreshSlotBurst(ctx context.Context, key string, ttl time.Duration) error {
	return s.check(key)
}

func (s fakeStore) Get(ctx context.Context, key string) ([]byte, error) {
	if err := s.check(key); err != nil {
		return nil, err
	}
	if key == "missing" {
		return nil, fmt.Errorf("get %q: %w", key, pace.ErrNotFound)
	}
	return []byte("value of " + key), nil
}

func (s fakeStore) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	return s.check(key)
}
func (s fakeStore) Take(ctx context.Context, key string, shapes []driver.Shape) (driver.Grant, error) {
	if err := s.check(key); err != nil {
		return driver.Grant{}, err
	}
	if key == "reject" {
		return driver.Grant{RetryAfter: 3 * time.Second, Reset: 4 * time.Second}, nil
	}
	return driver.Grant{OK: true, Remaining: 5, Reset: time.Second, Receipt: driver.Receipt{At: 7, Gen: 8}}, nil
}

func (s fakeStore) TakeMany(ctx context.Context, keys []string, shapes []driver.Shape, out []driver.Grant) error {
	for i, k := range keys {
		g, err := s.Take(ctx, k, shapes)
		if err != nil {
			return err
		}
		out[i] = g
	}
	return nil
}

func (s fakeStore) Refund(ctx context.Context, key string, shapes []driver.Shape, r driver.Receipt) error {
	return s.check(key)
}

func (s fakeStore) Delete(ctx context.Context, key string) error { return s.check(key) }
func (fakeStore) Close(ctx context.Context) error                { return nil }

// captureRegisterer registers on a real registry and keeps what it
// registered, so that a test can hand the collector to testutil.
type captureRegisterer struct {
	*prometheus.Registry
	got []prometheus.Collector
}

func (r *captureRegisterer) Register(c prometheus.Collector) error {
	if err := r.Registry.Register(c); err != nil {
		return err
	}
	r.got = append(r.got, c)
	return nil
}

// one returns the one collector registered, failing the test if there was
// not exactly one.
func (r *captureRegisterer) one(t *testing.T) prometheus.Collector {
	t.Helper()
	if len(r.got) != 1 {
		t.Fatalf("%d collectors registered; want 1", len(r.got))
	}
	return r.got[0]
}

func newCapture() *captureRegisterer {
	return &captureRegisterer{Registry: prometheus.NewPedanticRegistry()}
}

func mustWrap(t *testing.T, s pace.Store, reg prometheus.Registerer, opts ...instrument.Option) pace.Store {
	t.Helper()
	w, err := instrument.Wrap(s, reg, opts...)
	if err != nil {
		t.Fatalf("Wrap: %v", err)
	}
	return w
}

// script makes one call of each kind the expected texts below count.
func script(s pace.Store) {
	ctx := context.Background()
	s.TokenBucket(ctx, "a", 10, 1, 1)
	s.TokenBucket(ctx, "b", 10, 1, 1)
	s.TokenBucket(ctx, "reject", 10, 1, 1)
	s.TokenBucket(ctx, "", 10, 1, 1)
	s.TokenBucket(ctx, "fail", 10, 1, 1)
	s.AcquireSlot(ctx, "a", 3, time.Second)
	s.AcquireSlot(ctx, "reject", 3, time.Second)
	s.AcquireSlotBurst(ctx, "fail", 2, 4, time.Second, time.Second)
	s.ReleaseSlot(ctx, "a")
	s.RefreshSlot(ctx, "fail", time.Second)
	s.ReleaseSlotBurst(ctx, "")
	s.RefreshSlotBurst(ctx, "a", time.Second)
	s.Get(ctx, "a")
	s.Get(ctx, "missing")
	s.Get(ctx, "fail")
	s.Set(ctx, "a", []byte("v"), 0)
	shapes := []driver.Shape{mustBucket(10, 1, 1)}
	tk := s.(driver.Taker)
	tk.Take(ctx, "a", shapes)
	tk.Take(ctx, "reject", shapes)
	tk.Take(ctx, "fail", shapes)
	tk.TakeMany(ctx, []string{"a", "reject"}, shapes, make([]driver.Grant, 2))
	tk.TakeMany(ctx, []string{"a", ""}, shapes, make([]driver.Grant, 2))
	tk.Refund(ctx, "a", shapes, driver.Receipt{})
	tk.Refund(ctx, "fail", shapes, driver.Receipt{})
	s.Delete(ctx, "a")
	s.Close(ctx)
}

func mustBucket(capacity, perSecond, cost float64) driver.Shape {
	b, err := driver.NewShape(capacity, perSecond, cost)
	if err != nil {
		panic(err)
	}
	return b
}

const wantOperations = `
# HELP pace_store_operations_total Store calls by method (op) and outcome (result: allowed, rejected, ok, not_found, invalid, error).
# TYPE pace_store_operations_total counter
pace_store_operations_total{op="token_bucket",result="allowed"} 2
pace_store_operations_total{op="token_bucket",result="rejected"} 1
pace_store_operations_total{op="token_bucket",result="invalid"} 1
pace_store_operations_total{op="token_bucket",result="error"} 1
pace_store_operations_total{op="acquire_slot",result="allowed"} 1
pace_store_operations_total{op="acquire_slot",result="rejected"} 1
pace_store_operations_total{op="acquire_slot",result="invalid"} 0
pace_store_operations_total{op="acquire_slot",result="error"} 0
pace_store_operations_total{op="acquire_slot_burst",result="allowed"} 0
pace_store_operations_total{op="acquire_slot_burst",result="rejected"} 0
pace_store_operations_total{op="acquire_slot_burst",result="invalid"} 0
pace_store_operations_total{op="acquire_slot_burst",result="error"} 1
pace_store_operations_total{op="release_slot",result="ok"} 1
pace_store_operations_total{op="release_slot",result="invalid"} 0
pace_store_operations_total{op="release_slot",result="error"} 0
pace_store_operations_total{op="refresh_slot",result="ok"} 0
pace_store_operations_total{op="refresh_slot",result="invalid"} 0
pace_store_operations_total{op="refresh_slot",result="error"} 1
pace_store_operations_total{op="release_slot_burst",result="ok"} 0
pace_store_operations_total{op="release_slot_burst",result="invalid"} 1
pace_store_operations_total{op="release_slot_burst",result="error"} 0
pace_store_operations_total{op="refresh_slot_burst",result="ok"} 1
pace_store_operations_total{op="refresh_slot_burst",result="invalid"} 0
pace_store_operations_total{op="refresh_slot_burst",result="error"} 0
pace_store_operations_total{op="get",result="ok"} 1
pace_store_operations_total{op="get",result="not_found"} 1
pace_store_operations_total{op="get",result="invalid"} 0
pace_store_operations_total{op="get",result="error"} 1
pace_store_operations_total{op="set",result="ok"} 1
pace_store_operations_total{op="set",result="invalid"} 0
pace_store_operations_total{op="set",result="error"} 0
pace_store_operations_total{op="take",result="allowed"} 1
pace_store_operations_total{op="take",result="rejected"} 1
pace_store_operations_total{op="take",result="invalid"} 0
pace_store_operations_total{op="take",result="error"} 1
pace_store_operations_total{op="take_many",result="ok"} 1
pace_store_operations_total{op="take_many",result="invalid"} 1
pace_store_operations_total{op="take_many",result="error"} 0
pace_store_operations_total{op="refund",result="ok"} 1
pace_store_operations_total{op="refund",result="invalid"} 0
pace_store_operations_total{op="refund",result="error"} 1
pace_store_operations_total{op="delete",result="ok"} 1
pace_store_operations_total{op="delete",result="invalid"} 0
pace_store_operations_total{op="delete",result="error"} 0
pace_store_operations_total{op="close",result="ok"} 1
pace_store_operations_total{op="close",result="error"} 0
`

// wantDurations is the histogram after script, with buckets 0.1 and 0.5 and
// every call lasting 250ms.
const wantDurations = `
# HELP pace_store_operation_duration_seconds Latency of Store calls by method (op), whatever their outcome.
# TYPE pace_store_operation_duration_seconds histogram
pace_store_operation_duration_seconds_bucket{op="token_bucket",le="0.1"} 0
pace_store_operation_duration_seconds_bucket{op="token_bucket",le="0.5"} 5
pace_store_operation_duration_seconds_bucket{op="token_bucket",le="+Inf"} 5
pace_store_operation_duration_seconds_sum{op="token_bucket"} 1.25
pace_store_operation_duration_seconds_count{op="token_bucket"} 5
pace_store_operation_duration_seconds_bucket{op="acquire_slot",le="0.1"} 0
pace_store_operation_duration_seconds_bucket{op="acquire_slot",le="0.5"} 2
pace_store_operation_duration_seconds_bucket{op="acquire_slot",le="+Inf"} 2
pace_store_operation_duration_seconds_sum{op="acquire_slot"} 0.5
pace_store_operation_duration_seconds_count{op="acquire_slot"} 2
pace_store_operation_duration_seconds_bucket{op="acquire_slot_burst",le="0.1"} 0
pace_store_operation_duration_seconds_bucket{op="acquire_slot_burst",le="0.5"} 1
pace_store_operation_duration_seconds_bucket{op="acquire_slot_burst",le="+Inf"} 1
pace_store_operation_duration_seconds_sum{op="acquire_slot_burst"} 0.25
pace_store_operation_duration_seconds_count{op="acquire_slot_burst"} 1
pace_store_operation_duration_seconds_bucket{op="release_slot",le="0.1"} 0
pace_store_operation_duration_seconds_bucket{op="release_slot",le="0.5"} 1
pace_store_operation_duration_seconds_bucket{op="release_slot",le="+Inf"} 1
pace_store_operation_duration_seconds_sum{op="release_slot"} 0.25
pace_store_operation_duration_seconds_count{op="release_slot"} 1
pace_store_operation_duration_seconds_bucket{op="refresh_slot",le="0.1"} 0
pace_store_operation_duration_seconds_bucket{op="refresh_slot",le="0.5"} 1
pace_store_operation_duration_seconds_bucket{op="refresh_slot",le="+Inf"} 1
pace_store_operation_duration_seconds_sum{op="refresh_slot"} 0.25
pace_store_operation_duration_seconds_count{op="refresh_slot"} 1
pace_store_operation_duration_seconds_bucket{op="release_slot_burst",le="0.1"} 0
pace_store_operation_duration_seconds_bucket{op="release_slot_burst",le="0.5"} 1
pace_store_operation_duration_seconds_bucket{op="release_slot_burst",le="+Inf"} 1
pace_store_operation_duration_seconds_sum{op="release_slot_burst"} 0.25
pace_store_operation_duration_seconds_count{op="release_slot_burst"} 1
pace_store_operation_duration_seconds_bucket{op="refresh_slot_burst",le="0.1"} 0
pace_store_operation_duration_seconds_bucket{op="refresh_slot_burst",le="0.5"} 1
pace_store_operation_duration_seconds_bucket{op="refresh_slot_burst",le="+Inf"} 1
pace_store_operation_duration_seconds_sum{op="refresh_slot_burst"} 0.25
pace_store_operation_duration_seconds_count{op="refresh_slot_burst"} 1
pace_store_operation_duration_seconds_bucket{op="get",le="0.1"} 0
pace_store_operation_duration_seconds_bucket{op="get",le="0.5"} 3
pace_store_operation_duration_seconds_bucket{op="get",le="+Inf"} 3
pace_store_operation_duration_seconds_sum{op="get"} 0.75
pace_store_operation_duration_seconds_count{op="get"} 3
pace_store_operation_duration_seconds_bucket{op="set",le="0.1"} 0
pace_store_operation_duration_seconds_bucket{op="set",le="0.5"} 1
pace_store_operation_duration_seconds_bucket{op="set",le="+Inf"} 1
pace_store_operation_duration_seconds_sum{op="set"} 0.25
pace_store_operation_duration_seconds_count{op="set"} 1
pace_store_operation_duration_seconds_bucket{op="take",le="0.1"} 0
pace_store_operation_duration_seconds_bucket{op="take",le="0.5"} 3
pace_store_operation_duration_seconds_bucket{op="take",le="+Inf"} 3
pace_store_operation_duration_seconds_sum{op="take"} 0.75
pace_store_operation_duration_seconds_count{op="take"} 3
pace_store_operation_duration_seconds_bucket{op="take_many",le="0.1"} 0
pace_store_operation_duration_seconds_bucket{op="take_many",le="0.5"} 2
pace_store_operation_duration_seconds_bucket{op="take_many",le="+Inf"} 2
pace_store_operation_duration_seconds_sum{op="take_many"} 0.5
pace_store_operation_duration_seconds_count{op="take_many"} 2
pace_store_operation_duration_seconds_bucket{op="refund",le="0.1"} 0
pace_store_operation_duration_seconds_bucket{op="refund",le="0.5"} 2
pace_store_operation_duration_seconds_bucket{op="refund",le="+Inf"} 2
pace_store_operation_duration_seconds_sum{op="refund"} 0.5
pace_store_operation_duration_seconds_count{op="refund"} 2
pace_store_operation_duration_seconds_bucket{op="delete",le="0.1"} 0
pace_store_operation_duration_seconds_bucket{op="delete",le="0.5"} 1
pace_store_operation_duration_seconds_bucket{op="delete",le="+Inf"} 1
pace_store_operation_duration_seconds_sum{op="delete"} 0.25
pace_store_operation_duration_seconds_count{op="delete"} 1
pace_store_operation_duration_seconds_bucket{op="close",le="0.1"} 0
pace_store_operation_duration_seconds_bucket{op="close",le="0.5"} 1
pace_store_operation_duration_seconds_bucket{op="close",le="+Inf"} 1
pace_store_operation_duration_seconds_sum{op="close"} 0.25
pace_store_operation_duration_seconds_count{op="close"} 1
`

func TestWrapCounts(t *testing.T) {
	reg := newCapture()
	clock := fakeclock.New(time.Time{})
	step := func() time.Time { return clock.Step(250 * time.Millisecond) } // a call timed by two readings lasts 250 ms
	s := mustWrap(t, fakeStore{}, reg, instrument.WithClock(step), instrument.WithBuckets([]float64{0.1, 0.5}))
	c := reg.one(t)
	script(s)
	if err := testutil.CollectAndCompare(c, strings.NewReader(wantOperations), "pace_store_operations_total"); err != nil {
		t.Error(err)
	}
	if err := testutil.CollectAndCompare(c, strings.NewReader(wantDurations), "pace_store_operation_duration_seconds"); err != nil {
		t.Error(err)
	}
	// The same, gathered from the registry Wrap was given.
	if err := testutil.GatherAndCompare(reg, strings.NewReader(wantOperations+wantDurations)); err != nil {
		t.Error(err)
	}
}

// slowStore is a Store whose TokenBucket takes the time given by its key,
// on a fake clock, and whose every other method fails in a way the Store
// contract does not allow.
type slowStore struct {
	fakeStore
	clock *fakeclock.Clock
}

func (s slowStore) TokenBucket(ctx context.Context, key string, capacity, refillPerSec, cost float64) (bool, time.Duration, error) {
	d, err := time.ParseDuration(key)
	if err != nil {
		return false, 0, fmt.Errorf("a misbehaving backend: %w", pace.ErrNotFound)
	}
	s.clock.Advance(d)
	return true, 0, nil
}

func (slowStore) Close(ctx context.Context) error {
	return fmt.Errorf("a misbehaving backend: %w", pace.ErrInvalidArgument)
}

func TestWrapLatency(t *testing.T) {
	clock := fakeclock.New(time.Unix(1_000_000, 0))
	reg := newCapture()
	s := mustWrap(t, slowStore{clock: clock}, reg, instrument.WithClock(clock.Now), instrument.WithBuckets([]float64{0.1, 0.5}))
	for _, d := range []string{"30ms", "100ms", "600ms", "0s"} {
		s.TokenBucket(context.Background(), d, 10, 1, 1)
	}
	want := `
# HELP pace_store_operation_duration_seconds Latency of Store calls by method (op), whatever their outcome.
# TYPE pace_store_operation_duration_seconds histogram
pace_store_operation_duration_seconds_bucket{op="token_bucket",le="0.1"} 3
pace_store_operation_duration_seconds_bucket{op="token_bucket",le="0.5"} 3
pace_store_operation_duration_seconds_bucket{op="token_bucket",le="+Inf"} 4
pace_store_operation_duration_seconds_sum{op="token_bucket"} 0.73
pace_store_operation_duration_seconds_count{op="token_bucket"} 4
`
	for _, op := range []string{"acquire_slot", "acquire_slot_burst", "release_slot", "refresh_slot", "release_slot_burst", "refresh_slot_burst", "get", "set", "take", "take_many", "refund", "delete", "close"} {
		want += strings.ReplaceAll(`pace_store_operation_duration_seconds_bucket{op="OP",le="0.1"} 0
pace_store_operation_duration_seconds_bucket{op="OP",le="0.5"} 0
pace_store_operation_duration_seconds_bucket{op="OP",le="+Inf"} 0
pace_store_operation_duration_seconds_sum{op="OP"} 0
pace_store_operation_duration_seconds_count{op="OP"} 0
`, "OP", op)
	}
	if err := testutil.CollectAndCompare(reg.one(t), strings.NewReader(want), "pace_store_operation_duration_seconds"); err != nil {
		t.Error(err)
	}
}

// TestWrapUnexpectedError pins that an error a method should not return
// (ErrNotFound from TokenBucket, ErrInvalidArgument from Close) counts as an
// error rather than being lost or panicking.
func TestWrapUnexpectedError(t *testing.T) {
	reg := newCapture()
	s := mustWrap(t, slowStore{clock: fakeclock.New(time.Time{})}, reg)
	s.TokenBucket(context.Background(), "not a duration", 10, 1, 1)
	s.Close(context.Background())
	s.Close(context.Background())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "pace_store_operations_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			got[m.GetLabel()[0].GetValue()+"/"+m.GetLabel()[1].GetValue()] = m.GetCounter().GetValue()
		}
	}
	if got["token_bucket/error"] != 1 || got["close/error"] != 2 || got["close/ok"] != 0 {
		t.Errorf("token_bucket/error %v, close/error %v, close/ok %v; want 1, 2, 0", got["token_bucket/error"], got["close/error"], got["close/ok"])
	}
}

// TestWrapContract runs the Store contract on a wrapped memory store: the
// wrapper must be invisible but for its metrics.
func TestWrapContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) pace.Store {
		s, err := instrument.Wrap(memory.New(), prometheus.NewRegistry())
		if err != nil {
			t.Fatalf("Wrap(memory.New()): %v", err)
		}
		return s
	})
	storetest.RunTaker(t, func(t *testing.T) storetest.TakeStore {
		s, err := instrument.Wrap(memory.New(), prometheus.NewRegistry())
		if err != nil {
			t.Fatalf("Wrap(memory.New()): %v", err)
		}
		return s.(storetest.TakeStore)
	})
}

// TestStackContract runs the contract on the recommended stack, the failure
// policy over an instrumented memory store, on a fake clock, and checks that
// the metrics saw the suite's calls and that no failure was decided.
func TestStackContract(t *testing.T) {
	clk := fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var regs []*prometheus.Registry // one per store: the suite makes many
	stack := func(t *testing.T) storetest.TakeStore {
		reg := prometheus.NewPedanticRegistry()
		regs = append(regs, reg)
		inner, err := instrument.Wrap(memory.New(memory.WithClock(clk.Now)), reg)
		if err != nil {
			t.Fatalf("Wrap: %v", err)
		}
		hook, err := instrument.Failures(reg)
		if err != nil {
			t.Fatalf("Failures: %v", err)
		}
		s, err := pace.WithFailurePolicy(inner, pace.FailClosed, time.Second, pace.WithObserver(hook))
		if err != nil {
			t.Fatalf("WithFailurePolicy: %v", err)
		}
		return s.(storetest.TakeStore) // the take methods are kept by both wrappers
	}
	storetest.Run(t, func(t *testing.T) pace.Store { return stack(t) }, storetest.WithAdvance(clk.Advance))
	storetest.RunTaker(t, stack, storetest.WithAdvance(clk.Advance))
	if len(regs) == 0 {
		t.Fatal("the suite made no store")
	}
	for i, reg := range regs {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		sums := map[string]float64{}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				sums[mf.GetName()] += m.GetCounter().GetValue()
			}
		}
		if sums["pace_store_operations_total"] < 1 {
			t.Errorf("store %d: no operation counted", i)
		}
		if n := sums["pace_store_failure_decisions_total"]; n != 0 {
			t.Errorf("store %d: %v failure decisions on a healthy memory store; want 0", i, n)
		}
	}
	problems, err := testutil.GatherAndLint(regs[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

func TestWrapLint(t *testing.T) {
	reg := newCapture()
	s := mustWrap(t, fakeStore{}, reg)
	script(s)
	lint(t, reg.one(t))
	if n := testutil.CollectAndCount(reg.one(t)); n != 46+14 {
		t.Errorf("%d series; want 46 counters + 14 histograms", n)
	}
}

func TestWrapDefaultBuckets(t *testing.T) {
	reg := newCapture()
	mustWrap(t, fakeStore{}, reg)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []float64
	for _, mf := range mfs {
		if mf.GetName() == "pace_store_operation_duration_seconds" {
			for _, b := range mf.GetMetric()[0].GetHistogram().GetBucket() {
				got = append(got, b.GetUpperBound())
			}
		}
	}
	want := []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("default buckets %v; want %v", got, want)
	}
}

// TestWrapPassesResultsThrough checks that the wrapper changes no result.
func TestWrapPassesResultsThrough(t *testing.T) {
	ctx := context.Background()
	s := mustWrap(t, fakeStore{}, prometheus.NewRegistry())
	if ok, d, err := s.TokenBucket(ctx, "reject", 10, 1, 1); ok || d != 3*time.Second || err != nil {
		t.Errorf("TokenBucket(reject) = %v, %v, %v; want false, 3s, nil", ok, d, err)
	}
	if ok, n, err := s.AcquireSlot(ctx, "reject", 7, time.Second); ok || n != 7 || err != nil {
		t.Errorf("AcquireSlot(reject, 7) = %v, %v, %v; want false, 7, nil", ok, n, err)
	}
	if ok, n, err := s.AcquireSlotBurst(ctx, "reject", 2, 3, time.Second, time.Second); ok || n != 3 || err != nil {
		t.Errorf("AcquireSlotBurst(reject, 2, 3) = %v, %v, %v; want false, 3, nil", ok, n, err)
	}
	if v, err := s.Get(ctx, "k"); string(v) != "value of k" || err != nil {
		t.Errorf("Get(k) = %q, %v; want %q, nil", v, err, "value of k")
	}
	if _, err := s.Get(ctx, "missing"); !errors.Is(err, pace.ErrNotFound) {
		t.Errorf("Get(missing) = %v; want ErrNotFound", err)
	}
	if err := s.ReleaseSlot(ctx, "fail"); !errors.Is(err, errBackend) {
		t.Errorf("ReleaseSlot(fail) = %v; want %v", err, errBackend)
	}
	if _, _, err := s.TokenBucket(ctx, "", 10, 1, 1); !errors.Is(err, pace.ErrInvalidArgument) {
		t.Errorf("TokenBucket(\"\") = %v; want ErrInvalidArgument", err)
	}
	shapes := []driver.Shape{mustBucket(10, 1, 1)}
	want := driver.Grant{RetryAfter: 3 * time.Second, Reset: 4 * time.Second}
	if g, err := s.(driver.Taker).Take(ctx, "reject", shapes); g != want || err != nil {
		t.Errorf("Take(reject) = %+v, %v; want %+v, nil", g, err, want)
	}
	out := make([]driver.Grant, 2)
	admitted := driver.Grant{OK: true, Remaining: 5, Reset: time.Second, Receipt: driver.Receipt{At: 7, Gen: 8}}
	if err := s.(driver.Taker).TakeMany(ctx, []string{"k", "reject"}, shapes, out); out[0] != admitted || out[1] != want || err != nil {
		t.Errorf("TakeMany(k, reject) = %+v, %v; want [%+v %+v], nil", out, err, admitted, want)
	}
	if err := s.(driver.Taker).Refund(ctx, "fail", shapes, admitted.Receipt); !errors.Is(err, errBackend) {
		t.Errorf("Refund(fail) = %v; want %v", err, errBackend)
	}
}

// TestWrapNoKeyLabel checks that a flood of distinct keys adds no series and
// that no key appears in a label.
func TestWrapNoKeyLabel(t *testing.T) {
	ctx := context.Background()
	reg := newCapture()
	s := mustWrap(t, fakeStore{}, reg)
	before := testutil.CollectAndCount(reg.one(t))
	for i := range 1000 {
		key := fmt.Sprintf("client-%d", i)
		s.TokenBucket(ctx, key, 10, 1, 1)
		s.Get(ctx, key)
	}
	if after := testutil.CollectAndCount(reg.one(t)); after != before {
		t.Errorf("%d series after 1000 keys; want %d as before", after, before)
	}
	eachLabel(t, reg, func(metric, name, value string) {
		if strings.HasPrefix(value, "client-") {
			t.Errorf("%s has label %s=%q", metric, name, value)
		}
	})
}

func TestWrapConcurrentCountsExact(t *testing.T) {
	const goroutines, calls = 8, 500
	reg := newCapture()
	s := mustWrap(t, fakeStore{}, reg)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := "allow"
			if g%2 == 1 {
				key = "reject"
			}
			for range calls {
				s.TokenBucket(context.Background(), key, 10, 1, 1)
			}
		}()
	}
	wg.Wait()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	var observed uint64
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "pace_store_operations_total":
				if m.GetLabel()[0].GetValue() == "token_bucket" {
					got[m.GetLabel()[1].GetValue()] = m.GetCounter().GetValue()
				}
			case "pace_store_operation_duration_seconds":
				if m.GetLabel()[0].GetValue() == "token_bucket" {
					observed = m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	half := float64(goroutines / 2 * calls)
	if got["allowed"] != half || got["rejected"] != half {
		t.Errorf("token_bucket allowed %v, rejected %v; want %v each", got["allowed"], got["rejected"], half)
	}
	if observed != goroutines*calls {
		t.Errorf("token_bucket latency observations %d; want %d", observed, goroutines*calls)
	}
}

func TestWrapRegistersOnlyOnGivenRegisterer(t *testing.T) {
	mustWrap(t, fakeStore{}, prometheus.NewRegistry())
	if _, err := instrument.Failures(prometheus.NewRegistry()); err != nil {
		t.Fatal(err)
	}
	if _, err := instrument.NewPace(1, prometheus.NewRegistry()); err != nil {
		t.Fatal(err)
	}
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "pace_") {
			t.Errorf("%s registered on the default registry", mf.GetName())
		}
	}
}

func TestWrapAlreadyRegistered(t *testing.T) {
	reg := prometheus.NewRegistry()
	mustWrap(t, fakeStore{}, reg)
	s, err := instrument.Wrap(fakeStore{}, reg)
	var are prometheus.AlreadyRegisteredError
	if s != nil || !errors.As(err, &are) {
		t.Errorf("second Wrap on one registry = %v, %v; want nil, AlreadyRegisteredError", s, err)
	}
	// Told apart by a constant label, two stores share a registry.
	shared := prometheus.NewPedanticRegistry()
	mustWrap(t, fakeStore{}, prometheus.WrapRegistererWith(prometheus.Labels{"store": "a"}, shared))
	mustWrap(t, fakeStore{}, prometheus.WrapRegistererWith(prometheus.Labels{"store": "b"}, shared))
	if n, err := testutil.GatherAndCount(shared, "pace_store_operations_total"); n != 2*46 || err != nil {
		t.Errorf("two labelled stores: %d counter series, %v; want %d", n, err, 2*46)
	}
}

func TestWrapInvalid(t *testing.T) {
	for name, tc := range map[string]struct {
		s    pace.Store
		nilR bool
		opts []instrument.Option
	}{
		"nil store":          {nil, false, nil},
		"nil registerer":     {fakeStore{}, true, nil},
		"decreasing buckets": {fakeStore{}, false, []instrument.Option{instrument.WithBuckets([]float64{1, 0.5})}},
		"repeated bucket":    {fakeStore{}, false, []instrument.Option{instrument.WithBuckets([]float64{0.5, 0.5})}},
		"NaN bucket":         {fakeStore{}, false, []instrument.Option{instrument.WithBuckets([]float64{0.1, nan()})}},
	} {
		reg := prometheus.NewRegistry()
		var r prometheus.Registerer = reg
		if tc.nilR {
			r = nil
		}
		s, err := instrument.Wrap(tc.s, r, tc.opts...)
		if s != nil || !errors.Is(err, pace.ErrInvalidArgument) {
			t.Errorf("Wrap with %s = %v, %v; want nil, ErrInvalidArgument", name, s, err)
		}
		if mfs, _ := reg.Gather(); len(mfs) != 0 {
			t.Errorf("Wrap with %s registered %d metrics; want none", name, len(mfs))
		}
	}
}

func nan() float64 {
	var zero float64
	return zero / zero
}

func TestNewPace(t *testing.T) {
	reg := newCapture()
	clock := fakeclock.New(time.Unix(1_000_000, 0))
	p, err := instrument.NewPace(2, reg, pace.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	c := reg.one(t)
	// A bucket of 2: two reserved, one refused.
	for i, want := range []bool{true, true, false} {
		if got := p.Allow("a"); got != want {
			t.Fatalf("Allow(a) #%d = %v; want %v", i+1, got, want)
		}
	}
	p.Allow("c")
	r := p.Reserve("b")
	r.Return()
	r.Return() // a second Return gives nothing back and is not counted
	refused := p.Reserve("a")
	refused.Return() // nor is the Return of a refused reservation
	want := `
# HELP pace_reservations_total Pace reservations (Reserve and Allow) by outcome: reserved or refused.
# TYPE pace_reservations_total counter
pace_reservations_total{result="refused"} 2
pace_reservations_total{result="reserved"} 4
# HELP pace_returned_total Pace reservations given back by Reservation.Return.
# TYPE pace_returned_total counter
pace_returned_total 1
# HELP pace_rows Live rows of the Pace: keys whose bucket was not full when last looked at.
# TYPE pace_rows gauge
pace_rows 2
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if p.Len() != 2 {
		t.Errorf("Len() = %d; want 2 (keys a and c), as pace_rows says", p.Len())
	}
	lint(t, c)
}

func TestNewPaceInvalid(t *testing.T) {
	reg := prometheus.NewRegistry()
	for _, rate := range []float64{0, -1, nan(), 2e9} {
		p, err := instrument.NewPace(rate, reg)
		if p != nil || !errors.Is(err, pace.ErrInvalidArgument) {
			t.Errorf("NewPace(%v) = %v, %v; want nil, ErrInvalidArgument", rate, p, err)
		}
	}
	if mfs, _ := reg.Gather(); len(mfs) != 0 {
		t.Errorf("failed NewPace calls registered %d metrics; want none", len(mfs))
	}
	if p, err := instrument.NewPace(1, nil); p != nil || !errors.Is(err, pace.ErrInvalidArgument) {
		t.Errorf("NewPace(1, nil) = %v, %v; want nil, ErrInvalidArgument", p, err)
	}
	if _, err := instrument.NewPace(1, reg); err != nil {
		t.Fatal(err)
	}
	var are prometheus.AlreadyRegisteredError
	if p, err := instrument.NewPace(1, reg); p != nil || !errors.As(err, &are) {
		t.Errorf("second NewPace on one registry = %v, %v; want nil, AlreadyRegisteredError", p, err)
	}
	shared := prometheus.NewPedanticRegistry()
	for _, l := range []string{"per_ip", "per_client"} {
		if _, err := instrument.NewPace(1, prometheus.WrapRegistererWith(prometheus.Labels{"limiter": l}, shared)); err != nil {
			t.Errorf("NewPace with label limiter=%s: %v", l, err)
		}
	}
}

func TestFailures(t *testing.T) {
	ctx := context.Background()
	reg := newCapture()
	hook, err := instrument.Failures(reg)
	if err != nil {
		t.Fatal(err)
	}
	open, err := pace.WithFailurePolicy(fakeStore{}, pace.FailOpen, time.Second, pace.WithObserver(hook))
	if err != nil {
		t.Fatal(err)
	}
	closed, err := pace.WithFailurePolicy(fakeStore{}, pace.FailClosed, time.Second, pace.WithObserver(hook))
	if err != nil {
		t.Fatal(err)
	}
	// Healthy first: after a failure a wrapper decides without its backend
	// for a probe interval, and those decisions count too.
	open.TokenBucket(ctx, "a", 10, 1, 1)        // healthy: not counted
	closed.TokenBucket(ctx, "reject", 10, 1, 1) // a real refusal: not counted
	open.TokenBucket(ctx, "fail", 10, 1, 1)
	open.TokenBucket(ctx, "fail", 10, 1, 1)
	open.AcquireSlot(ctx, "fail", 3, time.Second)
	closed.AcquireSlotBurst(ctx, "fail", 2, 3, time.Second, time.Second)
	closed.Get(ctx, "fail") // no decision: not counted
	open.(driver.Taker).Take(ctx, "fail", []driver.Shape{mustBucket(10, 1, 1)})
	closed.(driver.Taker).TakeMany(ctx, []string{"fail"}, []driver.Shape{mustBucket(10, 1, 1)}, make([]driver.Grant, 1))
	hook.Failed("Get", errBackend, true) // not a deciding method: ignored
	want := `
# HELP pace_store_failure_decisions_total Decisions made by the failure policy in place of a failed backend, by method (op) and decision (result: allowed or rejected).
# TYPE pace_store_failure_decisions_total counter
pace_store_failure_decisions_total{op="acquire_slot",result="allowed"} 1
pace_store_failure_decisions_total{op="acquire_slot",result="rejected"} 0
pace_store_failure_decisions_total{op="acquire_slot_burst",result="allowed"} 0
pace_store_failure_decisions_total{op="acquire_slot_burst",result="rejected"} 1
pace_store_failure_decisions_total{op="take",result="allowed"} 1
pace_store_failure_decisions_total{op="take",result="rejected"} 0
pace_store_failure_decisions_total{op="take_many",result="allowed"} 0
pace_store_failure_decisions_total{op="take_many",result="rejected"} 1
pace_store_failure_decisions_total{op="token_bucket",result="allowed"} 2
pace_store_failure_decisions_total{op="token_bucket",result="rejected"} 0
`
	c := reg.one(t)
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	lint(t, c)
	if _, err := instrument.Failures(reg); err == nil {
		t.Error("second Failures on one registry: nil error; want AlreadyRegisteredError")
	}
	if h, err := instrument.Failures(nil); h != nil || !errors.Is(err, pace.ErrInvalidArgument) {
		t.Errorf("Failures(nil) = %v; want ErrInvalidArgument", err)
	}
}

// printNonZero prints the series of reg that are not zero: counters and
// gauges with their value, histograms with their count.
func printNonZero(reg *prometheus.Registry) {
	mfs, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
			if v != 0 {
				fmt.Printf("%s{%s} %v\n", mf.GetName(), strings.Join(labels, ","), v)
			}
		}
	}
}

func ExampleNewPace() {
	reg := prometheus.NewRegistry()
	start := time.Unix(0, 0)
	p, err := instrument.NewPace(1, reg, pace.WithClock(func() time.Time { return start }))
	if err != nil {
		panic(err)
	}
	p.Allow("alice")
	p.Allow("alice") // refused: a bucket of one
	r := p.Reserve("bob")
	r.Return() // bob's request failed for another reason

	printNonZero(reg)
	// Output:
	// pace_reservations_total{result="refused"} 1
	// pace_reservations_total{result="reserved"} 2
	// pace_returned_total{} 1
	// pace_rows{} 1
}

func ExampleWrap() {
	reg := prometheus.NewRegistry()
	var backend pace.Store = fakeStore{} // memory.New(), a redisstore, a pgstore…
	s, err := instrument.Wrap(backend, reg)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	s.TokenBucket(ctx, "client-42", 10, 5, 1)
	s.Get(ctx, "missing")

	printNonZero(reg) // the histograms count calls; no series names a key
	// Output:
	// pace_store_operation_duration_seconds{op="get"} 1
	// pace_store_operation_duration_seconds{op="token_bucket"} 1
	// pace_store_operations_total{op="get",result="not_found"} 1
	// pace_store_operations_total{op="token_bucket",result="allowed"} 1
}

// TestRegisterTwice: a second Wrap, NewPace, NewShared or Failures on
// one registry with the same labels is an error wrapping
// pace.ErrInvalidArgument (and the registry's AlreadyRegisteredError) that
// says what to do, as is one under a label beside one without; under label
// values of their own, two register on one registry and lint clean.
func TestRegisterTwice(t *testing.T) {
	for _, c := range []struct {
		name, label string
		register    func(reg prometheus.Registerer) error
	}{
		{"Wrap", "store", func(reg prometheus.Registerer) error {
			_, err := instrument.Wrap(fakeStore{}, reg)
			return err
		}},
		{"NewPace", "limit", func(reg prometheus.Registerer) error {
			_, err := instrument.NewPace(1, reg)
			return err
		}},
		{"NewShared", "limit", func(reg prometheus.Registerer) error {
			_, err := instrument.NewShared(memory.New(), 1, reg)
			return err
		}},
		{"Failures", "store", func(reg prometheus.Registerer) error {
			_, err := instrument.Failures(reg)
			return err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			reg := prometheus.NewPedanticRegistry()
			if err := c.register(reg); err != nil {
				t.Fatal(err)
			}
			err := c.register(reg)
			if !errors.Is(err, pace.ErrInvalidArgument) || !errors.As(err, new(prometheus.AlreadyRegisteredError)) {
				t.Fatalf("second %s on one registry: %v; want an error wrapping ErrInvalidArgument and AlreadyRegisteredError", c.name, err)
			}
			checkMessage(t, err, c.name, "WrapRegistererWith", `"`+c.label+`"`)
			err = c.register(prometheus.WrapRegistererWith(prometheus.Labels{c.label: "a"}, reg))
			if !errors.Is(err, pace.ErrInvalidArgument) {
				t.Fatalf("%s under a label beside one without: %v; want an error wrapping ErrInvalidArgument", c.name, err)
			}
			checkMessage(t, err, c.name, "WrapRegistererWith")

			shared := prometheus.NewPedanticRegistry()
			for _, v := range []string{"a", "b"} {
				if err := c.register(prometheus.WrapRegistererWith(prometheus.Labels{c.label: v}, shared)); err != nil {
					t.Fatalf("%s with %s=%s: %v", c.name, c.label, v, err)
				}
			}
			if problems, err := testutil.GatherAndLint(shared); err != nil || len(problems) > 0 {
				t.Errorf("lint: %v, %v", problems, err)
			}
			values := map[string]bool{}
			eachLabel(t, shared, func(_, name, value string) {
				if name == c.label {
					values[value] = true
				}
			})
			if len(values) != 2 {
				t.Errorf("values of %s: %v; want a and b", c.label, values)
			}
		})
	}
}
