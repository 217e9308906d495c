package instrument

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratepace/pace"
)

// paceMetrics is both the pace.Observer given to the Pace and the Collector
// registered for it.
type paceMetrics struct {
	reservations *prometheus.CounterVec
	reserved     prometheus.Counter
	refused      prometheus.Counter
	returned     prometheus.Counter
	rows         prometheus.GaugeFunc
}

var _ pace.Observer = (*paceMetrics)(nil)

// Decided implements pace.Observer.
func (m *paceMetrics) Decided(_ pace.Source, ok bool) {
	if ok {
		m.reserved.Inc()
	} else {
		m.refused.Inc()
	}
}

// Returned implements pace.Observer.
func (m *paceMetrics) Returned(pace.Source) { m.returned.Inc() }

// RoundTrip implements pace.Observer; a Pace makes none.
func (m *paceMetrics) RoundTrip(int) {}

// Failed implements pace.Observer; a Pace has no backend to fail.
func (m *paceMetrics) Failed(string, error, bool) {}

// NewPace returns pace.New(perSecond, opts...) with its decisions counted in
// pace_reservations_total{result} (reserved or refused),
// pace_returned_total and the gauge pace_rows (Pace.Len, read at each
// scrape), registered on reg (docs/metrics.md). A pace.Observer appended to
// opts does the counting, and replaces any WithObserver in opts; it costs one
// atomic addition per decision.
//
// NewPace returns pace.New's error without registering anything, or an
// error wrapping pace.ErrInvalidArgument when reg is nil or refuses the
// metrics (wrapping the registry's error too, a
// prometheus.AlreadyRegisteredError for a second Pace with the same labels:
// give each Pace on one registry a label value of its own, as
// prometheus.WrapRegistererWith(prometheus.Labels{"limit": "per-ip"}, reg)).
func NewPace(perSecond float64, reg prometheus.Registerer, opts ...pace.Option) (*pace.Pace, error) {
	if reg == nil {
		return nil, errNilRegisterer
	}
	m := &paceMetrics{
		reservations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "reservations_total",
			Help:      "Pace reservations (Reserve and Allow) by outcome: reserved or refused.",
		}, []string{"result"}),
		returned: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "returned_total",
			Help:      "Pace reservations given back by Reservation.Return.",
		}),
	}
	m.reserved = m.reservations.WithLabelValues("reserved")
	m.refused = m.reservations.WithLabelValues("refused")

	p, err := pace.New(perSecond, append(opts[:len(opts):len(opts)], pace.WithObserver(m))...)
	if err != nil {
		return nil, err
	}
	m.rows = rowsGauge("", "rows", "Live rows of the Pace: keys whose bucket was not full when last looked at.", p.Len)
	if err := register(reg, collectors{m.reservations, m.returned, m.rows}, "NewPace's metrics (pace_reservations_total, pace_returned_total, pace_rows)", labelFix("limit", "Pace")); err != nil {
		return nil, err
	}
	return p, nil
}
