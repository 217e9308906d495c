// Package instrument exports Prometheus metrics for a pace.Store, a pace.Pace, a pace.Shared and the limits of httplimit.
//
// Wrap decorates a Store and returns the same interface; NewPace builds a
// Pace whose decisions are counted, NewShared a Shared whose decisions are
// counted by source; Failures counts the decisions a
// Store wrapped by pace.WithFailurePolicy makes in place of a failed backend;
// Limits counts the decisions of an httplimit.Middleware per limit.
// Every metric is registered only on the prometheus.Registerer given, never
// on the global one, and is named in the pace_ namespace:
//
//	pace_store_operations_total{op, result}         counter   Wrap
//	pace_store_operation_duration_seconds{op}       histogram Wrap
//	pace_store_failure_decisions_total{op, result}  counter   Failures
//	pace_reservations_total{result}                 counter   NewPace
//	pace_returned_total                             counter   NewPace
//	pace_rows                                       gauge     NewPace
//	pace_shared_decisions_total{path, result}       counter   NewShared
//	pace_shared_round_trip_decisions                histogram NewShared
//	pace_shared_returned_total{path}                counter   NewShared
//	pace_shared_local_rows                          gauge     NewShared
//	pace_limit_decisions_total{limit, outcome}      counter   Limits
//
// Labels are few and fixed; a key is never a label, since keys come from
// clients and a label per key is a cardinality explosion an attacker
// controls. Every series a constructor can produce is created, at zero, when
// it registers, so that rates and alerts see a zero rather than a gap.
//
// Several middlewares count on one registry, their limits told apart by the
// limit label (their names). To register two instances of another
// constructor on one registry (two stores, two Paces), give each a value of
// a constant label through prometheus.WrapRegistererWith:
//
//	perIP, err := instrument.NewPace(50, prometheus.WrapRegistererWith(prometheus.Labels{"limit": "per-ip"}, reg))
//	s, err := instrument.Wrap(redisStore, prometheus.WrapRegistererWith(prometheus.Labels{"store": "redis"}, reg))
//
// A registration the registry refuses (the same metrics with the same labels
// twice, or differing label names) is an error wrapping
// pace.ErrInvalidArgument and the registry's error, which says what to do.
package instrument

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/ratepace/pace"
)

// namespace is the first component of every metric name.
const namespace = "pace"

// Option configures Wrap.
type Option func(*config)

type config struct {
	buckets []float64
	now     func() time.Time
}

// defaultBuckets are the upper bounds, in seconds, of the latency histogram
// when WithBuckets is not given: 100µs to 1s in 1-2.5-5 steps, which spans a
// store on a local or nearby Redis or PostgreSQL server and a timeout of up to
// a second. An in-memory store answers in well under the first bound.
var defaultBuckets = []float64{
	0.0001, 0.00025, 0.0005,
	0.001, 0.0025, 0.005,
	0.01, 0.025, 0.05,
	0.1, 0.25, 0.5,
	1,
}

// WithBuckets sets the upper bounds, in seconds, of the buckets of
// pace_store_operation_duration_seconds. They must be strictly increasing and
// not NaN; a final +Inf is implied and may be omitted. The default is 100µs
// to 1s in 1-2.5-5 steps (0.0001, 0.00025, 0.0005, 0.001, …, 0.5, 1). An
// empty list keeps the default. The slice is copied.
func WithBuckets(upperBounds []float64) Option {
	return func(c *config) {
		if len(upperBounds) > 0 {
			c.buckets = append([]float64(nil), upperBounds...)
		}
	}
}

// WithClock makes Wrap time each call with now instead of time.Now, for tests
// and simulations. now is called twice per call, before and after it, and
// must be safe for concurrent use. A nil now keeps the default.
func WithClock(now func() time.Time) Option {
	return func(c *config) {
		if now != nil {
			c.now = now
		}
	}
}

func newConfig(opts []Option) (config, error) {
	c := config{buckets: defaultBuckets, now: time.Now}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	for i, b := range c.buckets {
		if math.IsNaN(b) {
			return c, fmt.Errorf("instrument: histogram bucket %d is NaN: %w", i, pace.ErrInvalidArgument)
		}
		if i > 0 && b <= c.buckets[i-1] {
			return c, fmt.Errorf("instrument: histogram buckets not strictly increasing: %g after %g: %w", b, c.buckets[i-1], pace.ErrInvalidArgument)
		}
	}
	return c, nil
}

// collectors is one prometheus.Collector made of several, so that the
// metrics of one constructor register (or fail to) all or nothing.
type collectors []prometheus.Collector

// Describe implements prometheus.Collector.
func (cs collectors) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range cs {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (cs collectors) Collect(ch chan<- prometheus.Metric) {
	for _, c := range cs {
		c.Collect(ch)
	}
}

// register registers c, one constructor's metrics, on reg. The registry
// refuses a second collector of the same metrics with the same labels (a
// prometheus.AlreadyRegisteredError) and one whose label names differ from
// those registered before; either is a configuration error, returned
// wrapping pace.ErrInvalidArgument and the registry's error, naming what
// (the metrics) and saying how to tell instances apart (fix).
func register(reg prometheus.Registerer, c prometheus.Collector, what, fix string) error {
	err := reg.Register(c)
	if err == nil {
		return nil
	}
	if errors.As(err, new(prometheus.AlreadyRegisteredError)) {
		return fmt.Errorf("instrument: %s already registered on this registry with the same labels; %s: %w: %w", what, fix, pace.ErrInvalidArgument, err)
	}
	return fmt.Errorf("instrument: registering %s: %s: %w: %w", what, fix, pace.ErrInvalidArgument, err)
}

// labelFix says how to register several instances of one constructor on one
// registry: each under its own value of a constant label.
func labelFix(label, instance string) string {
	return fmt.Sprintf("register each %s's metrics under a label value of its own, as prometheus.WrapRegistererWith(prometheus.Labels{%q: NAME}, reg), every one of them on this registry with the same label names", instance, label)
}
