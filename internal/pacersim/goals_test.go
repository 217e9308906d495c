package pacersim

import (
	"fmt"
	"math"
	"sync"
	"testing"
)

// The pacer's goals in the simulation (the worst figure over seeds 1–6), and
// the figures actually reached where a goal is out of reach. A goal that is
// met needs no entry in shortfalls; one that is not must be listed there
// with the figure reached, which the test then holds the pacer to. The goals
// themselves are never loosened here: the README's "Client-side pacing"
// section explains each shortfall.
var shortfalls = map[string]float64{
	// After the limit drops from 120 to 40, the 110 calls counted in the
	// window keep it full for about 40 s; the pacer then refills the
	// window at its new, lower rate while the old calls are still leaving
	// it quickly, and only part of that first minute's capacity is used.
	// The rest of the phase runs below the target, as every phase does
	// with more than one client, because of the fairness penalty.
	"N=4 utilisation phase 2":        0.7925,
	"N=4 churn utilisation phase 2":  0.8000,
	"N=16 utilisation phase 2":       0.8300,
	"N=16 churn utilisation phase 2": 0.8350,
	// At N = 16 each client sees the shared count only once every 8 s (27 s
	// at 40 a minute) and estimates the others' rate from those samples:
	// its own estimation error decides where it settles, and shares set
	// during the first windows even out only slowly, since once the total
	// sits on the target only the fairness penalty pulls the rates
	// together. A newcomer starts at a quarter of the count, four times
	// its fair share among 17.
	"N=16 fairness":                         0.9236,
	"N=16 churn fairness":                   0.8046,
	"N=16 churn join convergence (windows)": math.Inf(1),
	// 17 clients at 40 a minute send one call every 27 s each: the count
	// moves by whole calls as the window slides, and the pacer's samples
	// are that old. 33 of the 60–80 refusals are fixed costs: one per
	// client at the start (16 clients at the lone-client rate fill the
	// window in about 4 s) and one per client at the drop; most of the
	// rest come while the window refills after the drop.
	"N=16 churn 429 ratio": 0.0312,
}

type goal struct {
	name   string
	got    float64
	target float64
	atMost bool // the goal is got <= target (else got >= target)
}

func (g goal) met() bool {
	if g.atMost {
		return g.got <= g.target
	}
	return g.got >= g.target
}

var (
	compareOnce sync.Once
	compareRows []Row
)

// table runs the whole comparison once per test binary.
func table() []Row {
	compareOnce.Do(func() { compareRows = Compare(1) })
	return compareRows
}

func pacerRow(t *testing.T, n int, churn bool) Metrics {
	t.Helper()
	for _, r := range table() {
		if r.Policy == "pacer" && r.Clients == n && r.Churn == churn {
			return r.Metrics
		}
	}
	t.Fatalf("no pacer row for N=%d churn=%v", n, churn)
	return Metrics{}
}

// seeds are the runs the goals are checked on: each goal is held to the
// worst of them, not to a lucky one.
var seeds = []uint64{1, 2, 3, 4, 5, 6}

func goals(t *testing.T) []goal {
	var gs []goal
	for _, sc := range []struct {
		n        int
		churn    bool
		maxRatio float64
		minJ     float64
		maxConv  float64
	}{
		{1, false, 0.005, 0, 0},
		{4, false, 0.01, 0.97, 0},
		{16, false, 0.03, 0.93, 0},
		{4, true, 0.01, 0.97, 3},
		{16, true, 0.03, 0.93, 5},
	} {
		name := fmt.Sprintf("N=%d", sc.n)
		clients := sc.n
		if sc.churn {
			name += " churn"
			clients++
		}
		// worst over the seeds
		u, r, j, c, drop := 1.0, 0.0, 1.0, 0.0, 0
		var phase []float64
		for _, seed := range seeds {
			var m Metrics
			if seed == 1 {
				m = pacerRow(t, sc.n, sc.churn)
			} else {
				m = Measure(Run(Scenario(sc.n, sc.churn, seed), NewPacer))
			}
			u = math.Min(u, m.Utilisation)
			if phase == nil {
				phase = append([]float64(nil), m.PhaseUtilisation...)
			}
			for i, x := range m.PhaseUtilisation {
				phase[i] = math.Min(phase[i], x)
			}
			r = math.Max(r, m.RejectRatio)
			if !math.IsNaN(m.FairnessMin) {
				j = math.Min(j, m.FairnessMin)
			}
			if !math.IsNaN(m.Convergence) {
				c = math.Max(c, m.Convergence)
			}
			drop = max(drop, m.DropRejects)
		}
		gs = append(gs, goal{name + " utilisation", u, 0.85, false})
		for i, x := range phase {
			gs = append(gs, goal{fmt.Sprintf("%s utilisation phase %d", name, i+1), x, 0.85, false})
		}
		gs = append(gs, goal{name + " 429 ratio", r, sc.maxRatio, true})
		if sc.minJ > 0 {
			gs = append(gs, goal{name + " fairness", j, sc.minJ, false})
		}
		if sc.maxConv > 0 {
			gs = append(gs, goal{name + " join convergence (windows)", c, sc.maxConv, true})
		}
		gs = append(gs, goal{name + " 429s in the window after the drop", float64(drop), float64(clients + 3), true})
	}
	return gs
}

func TestGoals(t *testing.T) {
	for _, g := range goals(t) {
		if g.met() {
			if _, listed := shortfalls[g.name]; listed {
				t.Errorf("%s = %.4f meets the goal %.4f but is listed as a shortfall: remove it from shortfalls and the docs", g.name, g.got, g.target)
			}
			continue
		}
		reached, listed := shortfalls[g.name]
		if !listed {
			t.Errorf("%s = %.4f; goal %.4f, and no documented shortfall", g.name, g.got, g.target)
			continue
		}
		worse := g.got < reached-1e-3
		if g.atMost {
			worse = g.got > reached+1e-3 && !math.IsInf(reached, 1)
		}
		if worse {
			t.Errorf("%s = %.4f; goal %.4f (not met), and worse than the documented %.4f", g.name, g.got, g.target, reached)
			continue
		}
		t.Logf("goal not met: %s = %.4f (goal %.4f)", g.name, g.got, g.target)
	}
}

// TestNoBaselineBeatsThePacer checks the last goal: at every N, no
// baseline has both a higher utilisation and a lower 429 ratio.
func TestNoBaselineBeatsThePacer(t *testing.T) {
	for _, r := range table() {
		if r.Policy == "pacer" {
			continue
		}
		p := pacerRow(t, r.Clients, r.Churn)
		if r.Metrics.Utilisation > p.Utilisation && r.Metrics.RejectRatio < p.RejectRatio {
			t.Errorf("N=%d churn=%v: %s has utilisation %.3f > %.3f and 429 ratio %.4f < %.4f",
				r.Clients, r.Churn, r.Policy, r.Metrics.Utilisation, p.Utilisation, r.Metrics.RejectRatio, p.RejectRatio)
		}
	}
}
