package pacersim

import (
	"math"
	"sort"
	"time"
)

// Metrics summarises a trace against the pacer's goals (docs/pacer.md).
type Metrics struct {
	Accepted, Rejected int
	Capacity           float64   // integral of limit/window over the run
	Utilisation        float64   // Accepted / Capacity
	PhaseUtilisation   []float64 // per limit phase (between limit changes)
	RejectRatio        float64   // Rejected / (Accepted + Rejected)
	// Fairness is Jain's index of per-client accepted counts in each
	// segment between changes (start, limit changes, join, leave),
	// excluding the first window of each; FairnessMin is the lowest.
	Fairness    []float64
	FairnessMin float64
	// PeakUsed is the highest used/limit the server reported, outside
	// the first window after a limit drop (where the count left over from
	// the higher limit exceeds the new one whatever the clients do).
	PeakUsed float64
	// DropRejects counts refusals in the first window after each limit
	// drop (the worst one).
	DropRejects int
	// Early counts calls sent before a Retry-After the same client had
	// received.
	Early int
	// LateRejected counts refusals after the first window of the run.
	LateRejected int
	// Convergence is how long after joining the newcomer's trailing-window
	// count stays within ±25% of the others' mean until the next change,
	// in windows; NaN when there is no newcomer, +Inf when it never does.
	Convergence float64
}

// changes returns the times at which the limit changes within the run.
func limitChanges(cfg Config) []time.Duration {
	var out []time.Duration
	prev := cfg.Limit(0)
	for t := time.Second; t < cfg.Duration; t += time.Second {
		if l := cfg.Limit(t); l != prev {
			out = append(out, t)
			prev = l
		}
	}
	return out
}

// Measure computes the metrics of tr.
func Measure(tr *Trace) Metrics {
	cfg := tr.Config
	var m Metrics
	lc := limitChanges(cfg)
	bounds := append(append([]time.Duration{0}, lc...), cfg.Duration)
	phaseAcc := make([]int, len(bounds)-1)
	phaseCap := make([]float64, len(bounds)-1)
	// Integrate limit/window second by second, in integers until the
	// end so that the figures come out exact.
	total := 0
	phaseSum := make([]int, len(phaseCap))
	step := time.Second
	if cfg.Demand != nil {
		// Only the time some client wants to call has capacity to use.
		step = min(step, cfg.Window/30)
	}
	for t := time.Duration(0); t < cfg.Duration; t += step {
		if !wanted(cfg, tr, t) {
			continue
		}
		total += cfg.Limit(t)
		phaseSum[phaseOf(bounds, t)] += cfg.Limit(t)
	}
	perCall := step.Seconds() / cfg.Window.Seconds()
	m.Capacity = float64(total) * perCall
	if cfg.Kind != nil && cfg.Kind.Burst {
		m.Capacity += float64(cfg.Limit(0)) // the full bucket at the start
	}
	m.Early = tr.Early
	for i, v := range phaseSum {
		phaseCap[i] = float64(v) * perCall
	}
	drops := map[int]int{}
	for _, d := range tr.Decisions {
		if d.Accepted {
			m.Accepted++
			phaseAcc[phaseOf(bounds, d.At)]++
		} else {
			m.Rejected++
			if d.At >= cfg.Window {
				m.LateRejected++
			}
		}
		inDrop := -1
		for i, c := range lc {
			if d.At >= c && d.At < c+cfg.Window && cfg.Limit(c) < cfg.Limit(c-time.Second) {
				inDrop = i
			}
		}
		if inDrop >= 0 {
			if !d.Accepted {
				drops[inDrop]++
			}
			continue
		}
		if r := float64(d.Used) / float64(d.Limit); r > m.PeakUsed {
			m.PeakUsed = r
		}
	}
	for _, v := range drops {
		m.DropRejects = max(m.DropRejects, v)
	}
	m.Utilisation = float64(m.Accepted) / m.Capacity
	for i := range phaseAcc {
		m.PhaseUtilisation = append(m.PhaseUtilisation, float64(phaseAcc[i])/phaseCap[i])
	}
	if total := m.Accepted + m.Rejected; total > 0 {
		m.RejectRatio = float64(m.Rejected) / float64(total)
	}

	// Fairness segments.
	cuts := append([]time.Duration{0}, lc...)
	if cfg.Join > 0 {
		cuts = append(cuts, cfg.Join)
	}
	if cfg.Leave > 0 {
		cuts = append(cuts, cfg.Leave)
	}
	sort.Slice(cuts, func(i, j int) bool { return cuts[i] < cuts[j] })
	cuts = append(cuts, cfg.Duration)
	m.FairnessMin = 1
	for i := 0; i+1 < len(cuts); i++ {
		a, b := cuts[i]+cfg.Window, cuts[i+1]
		if b <= a {
			continue
		}
		var xs []float64
		for c := 0; c < tr.Clients; c++ {
			if tr.Start[c] <= cuts[i]+cfg.StartSpread+time.Second && tr.Stop[c] >= b {
				xs = append(xs, float64(countAccepted(tr, c, a, b)))
			}
		}
		if len(xs) < 2 {
			continue
		}
		j := Jain(xs)
		m.Fairness = append(m.Fairness, j)
		m.FairnessMin = math.Min(m.FairnessMin, j)
	}
	if len(m.Fairness) == 0 {
		m.FairnessMin = math.NaN()
	}
	m.Convergence = convergence(tr)
	return m
}

// wanted reports whether some client present at t wants to call then.
func wanted(cfg Config, tr *Trace, t time.Duration) bool {
	if cfg.Demand == nil {
		return true
	}
	for c := 0; c < tr.Clients; c++ {
		if tr.Start[c] <= t && t < tr.Stop[c] && cfg.Demand(c, t) <= t {
			return true
		}
	}
	return false
}

func phaseOf(bounds []time.Duration, t time.Duration) int {
	for i := 0; i+1 < len(bounds); i++ {
		if t < bounds[i+1] {
			return i
		}
	}
	return len(bounds) - 2
}

func countAccepted(tr *Trace, client int, a, b time.Duration) int {
	n := 0
	for _, d := range tr.Decisions {
		if d.Client == client && d.Accepted && d.At >= a && d.At < b {
			n++
		}
	}
	return n
}

// Jain returns Jain's fairness index (Σx)²/(n·Σx²) of xs: 1 when all are
// equal, 1/n when one takes everything. It returns 1 for all zeros.
func Jain(xs []float64) float64 {
	var s, s2 float64
	for _, x := range xs {
		s += x
		s2 += x * x
	}
	if s2 == 0 {
		return 1
	}
	return s * s / (float64(len(xs)) * s2)
}

// convergence measures, in windows, how long after joining the newcomer's
// trailing-window count stays within ±25% of the mean of the others (the
// clients present the whole window) until the next change.
func convergence(tr *Trace) float64 {
	cfg := tr.Config
	if cfg.Join <= 0 {
		return math.NaN()
	}
	newcomer := tr.Clients - 1
	end := cfg.Duration
	for _, c := range limitChanges(cfg) {
		if c > cfg.Join {
			end = min(end, c)
		}
	}
	if cfg.Leave > cfg.Join {
		end = min(end, cfg.Leave)
	}
	// Per-client accepted times, for trailing-window counts.
	times := make([][]time.Duration, tr.Clients)
	for _, d := range tr.Decisions {
		if d.Accepted {
			times[d.Client] = append(times[d.Client], d.At)
		}
	}
	trailing := func(c int, t time.Duration) int {
		ts := times[c]
		lo := sort.Search(len(ts), func(i int) bool { return ts[i] > t-cfg.Window })
		hi := sort.Search(len(ts), func(i int) bool { return ts[i] > t })
		return hi - lo
	}
	converged := time.Duration(-1)
	for t := cfg.Join + time.Second; t < end; t += time.Second {
		var sum float64
		n := 0
		for c := 0; c < tr.Clients; c++ {
			if c != newcomer && tr.Start[c] <= t-cfg.Window && tr.Stop[c] >= t {
				sum += float64(trailing(c, t))
				n++
			}
		}
		if n == 0 {
			continue
		}
		mean := sum / float64(n)
		x := float64(trailing(newcomer, t))
		ok := math.Abs(x-mean) <= 0.25*mean
		switch {
		case ok && converged < 0:
			converged = t
		case !ok:
			converged = -1
		}
	}
	if converged < 0 {
		return math.Inf(1)
	}
	return (converged - cfg.Join).Seconds() / cfg.Window.Seconds()
}
