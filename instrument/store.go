package instrument

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/driver"
)

// op is a Store method, the value of the op label.
type op int

const (
	opTokenBucket op = iota
	opAcquireSlot
	opAcquireSlotBurst
	opReleaseSlot
	opRefreshSlot
	opReleaseSlotBurst
	opRefreshSlotBurst
	opGet
	opSet
	opTake
	opTakeMany
	opRefund
	opDelete
	opClose
	numOps
)

var opNames = [numOps]string{
	opTokenBucket:      "token_bucket",
	opAcquireSlot:      "acquire_slot",
	opAcquireSlotBurst: "acquire_slot_burst",
	opReleaseSlot:      "release_slot",
	opRefreshSlot:      "refresh_slot",
	opReleaseSlotBurst: "release_slot_burst",
	opRefreshSlotBurst: "refresh_slot_burst",
	opGet:              "get",
	opSet:              "set",
	opTake:             "take",
	opTakeMany:         "take_many",
	opRefund:           "refund",
	opDelete:           "delete",
	opClose:            "close",
}

// result is the outcome of a call, the value of the result label.
type result int

const (
	resAllowed result = iota
	resRejected
	resOK
	resNotFound
	resInvalid
	resError
	numResults
)

var resultNames = [numResults]string{
	resAllowed:  "allowed",
	resRejected: "rejected",
	resOK:       "ok",
	resNotFound: "not_found",
	resInvalid:  "invalid",
	resError:    "error",
}

// results lists the outcomes each op can have, which are the series created
// at registration.
func results(o op) []result {
	switch o {
	case opTokenBucket, opAcquireSlot, opAcquireSlotBurst, opTake:
		return []result{resAllowed, resRejected, resInvalid, resError}
	case opGet:
		return []result{resOK, resNotFound, resInvalid, resError}
	case opClose:
		return []result{resOK, resError}
	}
	return []result{resOK, resInvalid, resError}
}

// storeMetrics is the Collector registered by Wrap: all of its metrics, so
// that one Register call registers them all or none.
type storeMetrics struct {
	calls    *prometheus.CounterVec
	duration *prometheus.HistogramVec
	now      func() time.Time

	// Pre-bound series: the hot path does no label lookup. count[o][r] is
	// nil for an outcome o cannot have (see results).
	count   [numOps][numResults]prometheus.Counter
	latency [numOps]prometheus.Observer
}

func newStoreMetrics(cfg config) *storeMetrics {
	m := &storeMetrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Subsystem: "store",
			Name:      "operations_total",
			Help:      "Store calls by method (op) and outcome (result: allowed, rejected, ok, not_found, invalid, error).",
		}, []string{"op", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace,
			Subsystem: "store",
			Name:      "operation_duration_seconds",
			Help:      "Latency of Store calls by method (op), whatever their outcome.",
			Buckets:   cfg.buckets,
		}, []string{"op"}),
		now: cfg.now,
	}
	for o := range numOps {
		m.latency[o] = m.duration.WithLabelValues(opNames[o])
		for _, r := range results(o) {
			m.count[o][r] = m.calls.WithLabelValues(opNames[o], resultNames[r])
		}
	}
	return m
}

// Describe implements prometheus.Collector.
func (m *storeMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.calls.Describe(ch)
	m.duration.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *storeMetrics) Collect(ch chan<- prometheus.Metric) {
	m.calls.Collect(ch)
	m.duration.Collect(ch)
}

// done records a call of o that started at start and ended with r.
func (m *storeMetrics) done(o op, start time.Time, r result) {
	m.latency[o].Observe(m.now().Sub(start).Seconds())
	c := m.count[o][r]
	if c == nil { // an outcome the method should not have: a misbehaving backend
		c = m.count[o][resError]
	}
	c.Inc()
}

// outcome classifies the result of a call: allowed or rejected when err is
// nil and the method decides, ok when it does not.
func outcome(err error, decides, allowed bool) result {
	switch {
	case err == nil && !decides:
		return resOK
	case err == nil && allowed:
		return resAllowed
	case err == nil:
		return resRejected
	case errors.Is(err, pace.ErrInvalidArgument):
		return resInvalid
	case errors.Is(err, pace.ErrNotFound):
		return resNotFound
	}
	return resError
}

// Wrap returns a Store that forwards every call to s and records it in two
// metrics registered on reg: pace_store_operations_total{op, result}, a
// counter of calls by method and outcome, and
// pace_store_operation_duration_seconds{op}, a histogram of their latency
// (see WithBuckets). The label values are listed in docs/metrics.md; the key
// is never a label.
//
// Wrap registers on reg only, all or nothing: when reg refuses the metrics
// it registers nothing and returns an error wrapping pace.ErrInvalidArgument
// and the registry's error (a prometheus.AlreadyRegisteredError when reg
// already has them with the same labels: give each store a label value of
// its own, see the package doc); it returns an error wrapping
// pace.ErrInvalidArgument when s or reg is nil or an option is invalid too. The
// result is safe for concurrent use if s is, and adds two clock readings, a
// histogram observation and a counter increment to each call, without
// allocating.
func Wrap(s pace.Store, reg prometheus.Registerer, opts ...Option) (pace.Store, error) {
	if s == nil {
		return nil, fmt.Errorf("instrument: nil store: %w", pace.ErrInvalidArgument)
	}
	if reg == nil {
		return nil, errNilRegisterer
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	m := newStoreMetrics(cfg)
	if err := register(reg, m, "Wrap's metrics (pace_store_operations_total, pace_store_operation_duration_seconds)", labelFix("store", "store")); err != nil {
		return nil, err
	}
	w := &store{s: s, m: m}
	if t, ok := s.(driver.Taker); ok {
		return &takeStore{w, t}, nil
	}
	return w, nil
}

// takeStore is the Store returned by Wrap for a store that also implements
// driver.Taker: it counts the take methods too.
type takeStore struct {
	*store
	t driver.Taker
}

var _ driver.Taker = (*takeStore)(nil)

// store is the Store returned by Wrap.
type store struct {
	s pace.Store
	m *storeMetrics
}

var _ pace.Store = (*store)(nil)

func (w *store) TokenBucket(ctx context.Context, key string, capacity, refillPerSec, cost float64) (bool, time.Duration, error) {
	start := w.m.now()
	allowed, retryAfter, err := w.s.TokenBucket(ctx, key, capacity, refillPerSec, cost)
	w.m.done(opTokenBucket, start, outcome(err, true, allowed))
	return allowed, retryAfter, err
}

func (w *store) AcquireSlot(ctx context.Context, key string, limit int64, ttl time.Duration) (bool, int64, error) {
	start := w.m.now()
	acquired, current, err := w.s.AcquireSlot(ctx, key, limit, ttl)
	w.m.done(opAcquireSlot, start, outcome(err, true, acquired))
	return acquired, current, err
}

func (w *store) AcquireSlotBurst(ctx context.Context, key string, sustained, ceiling int64, burstBudget, ttl time.Duration) (bool, int64, error) {
	start := w.m.now()
	acquired, current, err := w.s.AcquireSlotBurst(ctx, key, sustained, ceiling, burstBudget, ttl)
	w.m.done(opAcquireSlotBurst, start, outcome(err, true, acquired))
	return acquired, current, err
}

func (w *store) ReleaseSlot(ctx context.Context, key string) error {
	start := w.m.now()
	err := w.s.ReleaseSlot(ctx, key)
	w.m.done(opReleaseSlot, start, outcome(err, false, false))
	return err
}

func (w *store) RefreshSlot(ctx context.Context, key string, ttl time.Duration) error {
	start := w.m.now()
	err := w.s.RefreshSlot(ctx, key, ttl)
	w.m.done(opRefreshSlot, start, outcome(err, false, false))
	return err
}

func (w *store) ReleaseSlotBurst(ctx context.Context, key string) error {
	start := w.m.now()
	err := w.s.ReleaseSlotBurst(ctx, key)
	w.m.done(opReleaseSlotBurst, start, outcome(err, false, false))
	return err
}

func (w *store) RefreshSlotBurst(ctx context.Context, key string, ttl time.Duration) error {
	start := w.m.now()
	err := w.s.RefreshSlotBurst(ctx, key, ttl)
	w.m.done(opRefreshSlotBurst, start, outcome(err, false, false))
	return err
}

func (w *store) Get(ctx context.Context, key string) ([]byte, error) {
	start := w.m.now()
	v, err := w.s.Get(ctx, key)
	w.m.done(opGet, start, outcome(err, false, false))
	return v, err
}

func (w *store) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	start := w.m.now()
	err := w.s.Set(ctx, key, value, ttl)
	w.m.done(opSet, start, outcome(err, false, false))
	return err
}

func (w *takeStore) Take(ctx context.Context, key string, shapes []driver.Shape) (driver.Grant, error) {
	start := w.m.now()
	g, err := w.t.Take(ctx, key, shapes)
	w.m.done(opTake, start, outcome(err, true, g.OK))
	return g, err
}

func (w *takeStore) TakeMany(ctx context.Context, keys []string, shapes []driver.Shape, out []driver.Grant) error {
	start := w.m.now()
	err := w.t.TakeMany(ctx, keys, shapes, out)
	w.m.done(opTakeMany, start, outcome(err, false, false))
	return err
}

func (w *takeStore) Refund(ctx context.Context, key string, shapes []driver.Shape, r driver.Receipt) error {
	start := w.m.now()
	err := w.t.Refund(ctx, key, shapes, r)
	w.m.done(opRefund, start, outcome(err, false, false))
	return err
}

func (w *store) Delete(ctx context.Context, key string) error {
	start := w.m.now()
	err := w.s.Delete(ctx, key)
	w.m.done(opDelete, start, outcome(err, false, false))
	return err
}

func (w *store) Close(ctx context.Context) error {
	start := w.m.now()
	err := w.s.Close(ctx)
	w.m.done(opClose, start, outcome(err, false, false))
	return err
}
