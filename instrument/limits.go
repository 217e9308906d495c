package instrument

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratepace/pace/httplimit"
)

// limitMetrics is the httplimit.Observer Limits gives a Middleware (or a
// Limiter): a counter bound per limit and outcome, so that a decision does
// no label lookup.
type limitMetrics struct {
	count [][]prometheus.Counter // [limit][outcome]
}

// Observe implements httplimit.Observer.
func (m *limitMetrics) Observe(limit int, o httplimit.Outcome) {
	if limit >= 0 && limit < len(m.count) && int(o) < len(m.count[limit]) {
		if c := m.count[limit][o]; c != nil {
			c.Inc()
		}
	}
}

// Limits returns an option for httplimit.New (or httplimit.NewLimiter, and
// so for the interceptors of grpclimit) that counts the decisions of each
// limit in pace_limit_decisions_total{limit, outcome}, registered on reg when
// New succeeds. limit is the limit's name, so the series are bounded by the
// limits you declare; outcome is admitted, refused, returned, key_error or
// store_error (docs/metrics.md). New fails with the registration error, or
// with an error wrapping pace.ErrInvalidArgument when reg is nil. Counting
// costs one atomic addition per limit and request.
func Limits(reg prometheus.Registerer) httplimit.Option {
	return httplimit.WithObserver(func(names []string) (httplimit.Observer, error) {
		if reg == nil {
			return nil, errNilRegisterer
		}
		vec := prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Subsystem: "limit",
			Name:      "decisions_total",
			Help:      "Decisions of the rate limits of httplimit (or grpclimit), by limit name and outcome: admitted, refused, returned, key_error, store_error.",
		}, []string{"limit", "outcome"})
		m := &limitMetrics{count: make([][]prometheus.Counter, len(names))}
		for i, name := range names {
			m.count[i] = make([]prometheus.Counter, httplimit.Outcomes[len(httplimit.Outcomes)-1]+1)
			for _, o := range httplimit.Outcomes {
				m.count[i][o] = vec.WithLabelValues(name, o.String())
			}
		}
		if err := reg.Register(vec); err != nil {
			return nil, err
		}
		return m, nil
	})
}
