package pacersim

import (
	"fmt"
	"math"
)

// Goal is one of the pacer's goals for one client count, worst over seeds
// (docs/pacer.md, "Tuning and validation").
type Goal struct {
	Name    string
	Clients int
	Target  float64
	AtMost  bool
	Value   func(r ZooRow) float64
}

// Goals are the goals every validation kind and real library is held to:
// at N = 1 utilisation >= 0.85 and no 429 after the first window; at N = 4
// utilisation >= 0.80, 429s <= 3%, Jain >= 0.90; at N = 16 429s <= 5%; at
// every N no call before a Retry-After.
var Goals = []Goal{
	{"utilisation", 1, 0.85, false, func(r ZooRow) float64 { return r.Utilisation }},
	{"429 after window 1", 1, 0, true, func(r ZooRow) float64 { return float64(r.LateRejected) }},
	{"utilisation", 4, 0.80, false, func(r ZooRow) float64 { return r.Utilisation }},
	{"429 ratio", 4, 0.03, true, func(r ZooRow) float64 { return r.RejectRatio }},
	{"J", 4, 0.90, false, func(r ZooRow) float64 { return r.Fairness }},
	{"429 ratio", 16, 0.05, true, func(r ZooRow) float64 { return r.RejectRatio }},
	{"early calls", 0, 0, true, func(r ZooRow) float64 { return float64(r.Early) }},
}

// Met reports whether v meets g.
func (g Goal) Met(v float64) bool {
	if g.AtMost {
		return v <= g.Target+1e-9
	}
	return v >= g.Target-1e-9
}

// Applies reports whether g holds row r (churn rows are the zoo's own).
func (g Goal) Applies(r ZooRow) bool {
	return !r.Churn && (g.Clients == 0 || g.Clients == r.Clients)
}

// String names the goal: "N=4 429 ratio <= 0.03".
func (g Goal) String() string {
	op, n := ">=", "every N"
	if g.AtMost {
		op = "<="
	}
	if g.Clients > 0 {
		n = fmt.Sprintf("N=%d", g.Clients)
	}
	return fmt.Sprintf("%s %s %s %g", n, g.Name, op, g.Target)
}

// Tally is how a set of rows fares on one goal: rows meeting it of the
// rows it applies to, and the worst figure.
type Tally struct {
	Met, Of int
	Worst   float64
}

// TallyGoal counts the rows meeting g.
func TallyGoal(g Goal, rows []ZooRow) Tally {
	t := Tally{Worst: math.NaN()}
	for _, r := range rows {
		if !g.Applies(r) {
			continue
		}
		v := g.Value(r)
		if math.IsNaN(v) {
			continue
		}
		t.Of++
		if g.Met(v) {
			t.Met++
		}
		if math.IsNaN(t.Worst) || (g.AtMost && v > t.Worst) || (!g.AtMost && v < t.Worst) {
			t.Worst = v
		}
	}
	return t
}
