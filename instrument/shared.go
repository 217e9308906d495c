package instrument

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/driver"
)

// sharedPaths are the values of the path label, indexed by pace.Source.
var sharedPaths = [...]pace.Source{pace.SourceStore, pace.SourceHeld, pace.SourceFallback}

// roundTripBuckets are the upper bounds of the decisions-per-round-trip
// histogram: powers of two up to the batches of a few hundred concurrent
// callers.
var roundTripBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256}

// sharedMetrics is both the pace.Observer given to the Shared and the
// Collector registered for it.
type sharedMetrics struct {
	decisions  *prometheus.CounterVec
	decided    [len(sharedPaths) + 2][2]prometheus.Counter // [path][ok]
	roundTrips prometheus.Histogram
	returns    *prometheus.CounterVec
	returned   [len(sharedPaths) + 2]prometheus.Counter
	rows       prometheus.GaugeFunc
}

var _ pace.Observer = (*sharedMetrics)(nil)

// Decided implements pace.Observer.
func (m *sharedMetrics) Decided(path pace.Source, ok bool) {
	if int(path) >= len(m.decided) || path == 0 {
		return
	}
	i := 0
	if ok {
		i = 1
	}
	if c := m.decided[path][i]; c != nil {
		c.Inc()
	}
}

// RoundTrip implements pace.Observer.
func (m *sharedMetrics) RoundTrip(decisions int) { m.roundTrips.Observe(float64(decisions)) }

// Failed implements pace.Observer; a Shared's store failures are decided by
// its fallback, which Decided counts.
func (m *sharedMetrics) Failed(string, error, bool) {}

// Returned implements pace.Observer.
func (m *sharedMetrics) Returned(path pace.Source) {
	if int(path) < len(m.returned) && m.returned[path] != nil {
		m.returned[path].Inc()
	}
}

// NewShared returns pace.NewShared(s, perSecond, opts...) with what it does
// counted in pace_shared_decisions_total{path, result},
// pace_shared_round_trip_decisions, pace_shared_returned_total{path} and the
// gauge pace_shared_local_rows, registered on reg (docs/metrics.md). A
// pace.Observer appended to opts does the counting, and replaces any
// pace.WithObserver in opts. Store errors are not counted here: wrap s
// with Wrap for those.
//
// NewShared returns pace.NewShared's error without registering anything, or
// an error wrapping pace.ErrInvalidArgument when reg is nil or refuses the
// metrics (wrapping the registry's error too; see NewPace for two on one
// registry).
func NewShared(s driver.Taker, perSecond float64, reg prometheus.Registerer, opts ...pace.Option) (*pace.Shared, error) {
	if reg == nil {
		return nil, errNilRegisterer
	}
	m := &sharedMetrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Subsystem: "shared",
			Name:      "decisions_total",
			Help:      "Shared decisions by the tier that made them (source: store, held or fallback) and outcome (result: reserved or refused).",
		}, []string{"source", "result"}),
		roundTrips: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace,
			Subsystem: "shared",
			Name:      "round_trip_decisions",
			Help:      "Decisions carried by each round trip of a Shared to its store.",
			Buckets:   roundTripBuckets,
		}),
		returns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Subsystem: "shared",
			Name:      "returned_total",
			Help:      "Shared reservations given back by SharedReservation.Return, by the tier that had admitted them (source: store or fallback).",
		}, []string{"source"}),
	}
	for _, path := range sharedPaths {
		m.decided[path][0] = m.decisions.WithLabelValues(path.String(), "refused")
		if path != pace.SourceHeld { // the local tier only refuses
			m.decided[path][1] = m.decisions.WithLabelValues(path.String(), "reserved")
			m.returned[path] = m.returns.WithLabelValues(path.String())
		}
	}
	p, err := pace.NewShared(s, perSecond, append(opts[:len(opts):len(opts)], pace.WithObserver(m))...)
	if err != nil {
		return nil, err
	}
	m.rows = rowsGauge("shared", "local_rows", "Rows of the Shared's local tier: keys refused within the last refill time of the longest limit.", p.Len)
	if err := register(reg, collectors{m.decisions, m.roundTrips, m.returns, m.rows}, "NewShared's metrics (pace_shared_*)", labelFix("limit", "Shared")); err != nil {
		return nil, err
	}
	return p, nil
}

// rowsGauge returns a gauge that reads rows at each scrape, rather than a
// count mirrored on the decision path.
func rowsGauge(subsystem, name, help string, rows func() int) prometheus.GaugeFunc {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: namespace,
		Subsystem: subsystem,
		Name:      name,
		Help:      help,
	}, func() float64 { return float64(rows()) })
}
