package instrument

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratepace/pace"
)

var errNilRegisterer = fmt.Errorf("instrument: nil registerer: %w", pace.ErrInvalidArgument)

// FailureHook returns a pace.FailureHook, for pace.OnFailure, that counts the
// decisions a Store wrapped by pace.WithFailurePolicy makes in place of its
// failed backend in pace_store_failure_decisions_total{op, result},
// registered on reg: op is token_bucket, acquire_slot or acquire_slot_burst;
// result is allowed (fail-open) or rejected (fail-closed). All six series
// exist from registration, at zero. The backend error is not a label (its
// text is unbounded): to log it, call the returned hook from your own.
// FailureHook returns an error wrapping pace.ErrInvalidArgument, and no hook,
// when reg is nil or refuses the metrics (wrapping the registry's error
// too; one hook serves any number of stores, or give each a label value of
// its own, see the package doc). The hook is safe for
// concurrent use by multiple goroutines.
func FailureHook(reg prometheus.Registerer) (pace.FailureHook, error) {
	if reg == nil {
		return nil, errNilRegisterer
	}
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace,
		Subsystem: "store",
		Name:      "failure_decisions_total",
		Help:      "Decisions made by the failure policy in place of a failed backend, by method (op) and decision (result: allowed or rejected).",
	}, []string{"op", "result"})
	var count [numOps][2]prometheus.Counter // [op][allowed]
	for _, o := range []op{opTokenBucket, opAcquireSlot, opAcquireSlotBurst} {
		count[o][0] = vec.WithLabelValues(opNames[o], resultNames[resRejected])
		count[o][1] = vec.WithLabelValues(opNames[o], resultNames[resAllowed])
	}
	if err := register(reg, vec, "FailureHook's pace_store_failure_decisions_total", labelFix("store", "failure policy")); err != nil {
		return nil, err
	}
	return func(method string, _ error, allowed bool) {
		var o op
		switch method {
		case "TokenBucket":
			o = opTokenBucket
		case "AcquireSlot":
			o = opAcquireSlot
		case "AcquireSlotBurst":
			o = opAcquireSlotBurst
		default:
			return // pace.WithFailurePolicy decides for these three methods only
		}
		a := 0
		if allowed {
			a = 1
		}
		count[o][a].Inc()
	}, nil
}
