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

// Reserved implements pace.Observer.
func (m *paceMetrics) Reserved(ok bool) {
	if ok {
		m.reserved.Inc()
	} else {
		m.refused.Inc()
	}
}

// Returned implements pace.Observer.
func (m *paceMetrics) Returned() { m.returned.Inc() }

// NewPace returns pace.New(perSecond, opts...) with its decisions counted in
// three metrics registered on reg:
//
//   - pace_reservations_total{result}, a counter of Reserve and Allow calls
//     by outcome, result "reserved" (admitted and debited) or "refused";
//   - pace_returned_total, a counter of reservations given back by
//     Reservation.Return (so reserved − returned is what was spent);
//   - pace_rows, a gauge of the Pace's live rows (Pace.Len), read at each
//     scrape rather than mirrored on the decision path.
//
// The counting is done by a pace.Observer appended to opts, which replaces
// any WithObserver in opts. It costs one atomic addition per decision, on a
// counter every core shares.
//
// NewPace returns the error of pace.New (wrapping pace.ErrInvalidArgument
// for a bad perSecond) without registering anything, and the registration
// error (a prometheus.AlreadyRegisteredError when reg already has these
// metrics, say from another NewPace) without returning the Pace. The error
// wraps pace.ErrInvalidArgument when reg is nil. To register two Paces on one
// registry, give each a registerer from prometheus.WrapRegistererWith with a
// distinguishing label.
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
	if err := reg.Register(collectors{m.reservations, m.returned, m.rows}); err != nil {
		return nil, err
	}
	return p, nil
}
