package instrument

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratepace/pace"
)

var errNilRegisterer = fmt.Errorf("instrument: nil registerer: %w", pace.ErrInvalidArgument)

// Failures returns a pace.Observer, for pace.WithObserver given to
// pace.WithFailurePolicy, that counts the decisions a Store so wrapped makes
// in place of its failed backend in
// pace_store_failure_decisions_total{op, result}, registered on reg: op is
// token_bucket, acquire_slot, acquire_slot_burst, take or take_many; result
// is allowed (fail-open) or rejected (fail-closed). All ten series exist
// from registration, at zero. The backend error is not a label (its text is
// unbounded): to log it, wrap the returned Observer's Failed in your own.
// Failures returns an error wrapping pace.ErrInvalidArgument, and no
// Observer, when reg is nil or refuses the metrics (wrapping the registry's
// error too; one Observer serves any number of stores, or give each a label
// value of its own, see the package doc). The Observer is safe for
// concurrent use by multiple goroutines.
func Failures(reg prometheus.Registerer) (pace.Observer, error) {
	if reg == nil {
		return nil, errNilRegisterer
	}
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace,
		Subsystem: "store",
		Name:      "failure_decisions_total",
		Help:      "Decisions made by the failure policy in place of a failed backend, by method (op) and decision (result: allowed or rejected).",
	}, []string{"op", "result"})
	m := &failureMetrics{}
	for _, o := range failureOps {
		m.count[o][0] = vec.WithLabelValues(opNames[o], resultNames[resRejected])
		m.count[o][1] = vec.WithLabelValues(opNames[o], resultNames[resAllowed])
	}
	if err := register(reg, vec, "Failures' pace_store_failure_decisions_total", labelFix("store", "failure policy")); err != nil {
		return nil, err
	}
	return m, nil
}

// failureOps are the methods a failure policy decides.
var failureOps = []op{opTokenBucket, opAcquireSlot, opAcquireSlotBurst, opTake, opTakeMany}

// failureMetrics is the Observer Failures returns.
type failureMetrics struct {
	count [numOps][2]prometheus.Counter // [op][allowed]
}

// Failed implements pace.Observer.
func (m *failureMetrics) Failed(method string, _ error, allowed bool) {
	var o op
	switch method {
	case "TokenBucket":
		o = opTokenBucket
	case "AcquireSlot":
		o = opAcquireSlot
	case "AcquireSlotBurst":
		o = opAcquireSlotBurst
	case "Take":
		o = opTake
	case "TakeMany":
		o = opTakeMany
	default:
		return // pace.WithFailurePolicy decides for these five methods only
	}
	a := 0
	if allowed {
		a = 1
	}
	m.count[o][a].Inc()
}

// Decided implements pace.Observer; a failure policy makes no other decision.
func (m *failureMetrics) Decided(pace.Source, bool) {}

// Returned implements pace.Observer.
func (m *failureMetrics) Returned(pace.Source) {}

// RoundTrip implements pace.Observer.
func (m *failureMetrics) RoundTrip(int) {}
