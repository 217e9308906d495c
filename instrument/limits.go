package instrument

import (
	"fmt"

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
// store_error (docs/metrics.md). Counting costs one atomic addition per
// limit and request.
//
// Several middlewares count on one registry, each limit under its own name:
// a limit whose name another middleware already counts there (two default
// names "pace-0", say) makes New fail with an error wrapping
// pace.ErrInvalidArgument and the registry's, and registers nothing; name
// the limits apart with httplimit.Name, or label each middleware's
// registerer (prometheus.WrapRegistererWith). New fails with an error
// wrapping pace.ErrInvalidArgument when reg is nil too.
func Limits(reg prometheus.Registerer) httplimit.Option {
	return httplimit.WithObserver(func(names []string) (httplimit.Observer, error) {
		if reg == nil {
			return nil, errNilRegisterer
		}
		m := &limitMetrics{count: make([][]prometheus.Counter, len(names))}
		vecs := make(collectors, len(names))
		for i, name := range names {
			// A vector per limit, the name a constant label: the limits of
			// two middlewares are different series to the registry when
			// their names differ, and a duplicate it reports when not.
			vec := prometheus.NewCounterVec(prometheus.CounterOpts{
				Namespace:   namespace,
				Subsystem:   "limit",
				Name:        "decisions_total",
				Help:        "Decisions of the rate limits of httplimit (or grpclimit), by limit name and outcome: admitted, refused, returned, key_error, store_error.",
				ConstLabels: prometheus.Labels{"limit": name},
			}, []string{"outcome"})
			m.count[i] = make([]prometheus.Counter, httplimit.Outcomes[len(httplimit.Outcomes)-1]+1)
			for _, o := range httplimit.Outcomes {
				m.count[i][o] = vec.WithLabelValues(o.String())
			}
			vecs[i] = vec
		}
		what := "pace_limit_decisions_total"
		switch {
		case len(names) == 1:
			what = fmt.Sprintf("pace_limit_decisions_total of limit %q", names[0])
		case len(names) > 1:
			what = fmt.Sprintf("pace_limit_decisions_total of one of the limits %q", names)
		}
		if err := register(reg, vecs, what, limitsFix); err != nil {
			return nil, err
		}
		return m, nil
	})
}

// limitsFix says how to count the limits of two middlewares on one registry.
const limitsFix = "give the limits of different middlewares different names (httplimit.Name), or register each middleware's metrics under a label of its own (prometheus.WrapRegistererWith(prometheus.Labels{\"route\": NAME}, reg))"
