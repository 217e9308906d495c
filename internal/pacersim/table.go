package pacersim

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// Row is one line of the comparison table.
type Row struct {
	Policy  string
	Clients int
	Churn   bool
	Metrics Metrics
}

// Compare runs every policy on every reference scenario (N = 1, 4, 16
// steady; N = 4, 16 with churn) with the given seed.
func Compare(seed uint64) []Row {
	type sc struct {
		n     int
		churn bool
	}
	scs := []sc{{1, false}, {4, false}, {16, false}, {4, true}, {16, true}}
	var rows []Row
	for _, s := range scs {
		for _, p := range Policies {
			tr := Run(Scenario(s.n, s.churn, seed), p.New)
			rows = append(rows, Row{Policy: p.Name, Clients: s.n, Churn: s.churn, Metrics: Measure(tr)})
		}
	}
	return rows
}

// WriteTable writes rows as a Markdown table.
func WriteTable(w io.Writer, rows []Row) {
	fmt.Fprintln(w, "| scenario | policy | util | util by phase | 429 ratio | J (min) | peak used/limit | 429s after drop | join conv. (windows) |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		m := r.Metrics
		sc := fmt.Sprintf("N=%d", r.Clients)
		if r.Churn {
			sc += " churn"
		}
		var ph []string
		for _, u := range m.PhaseUtilisation {
			ph = append(ph, fmt.Sprintf("%.3f", u))
		}
		fmt.Fprintf(w, "| %s | %s | %.3f | %s | %.2f%% | %s | %.2f | %d | %s |\n",
			sc, r.Policy, m.Utilisation, strings.Join(ph, " / "), 100*m.RejectRatio,
			num(m.FairnessMin, "%.3f"), m.PeakUsed, m.DropRejects, num(m.Convergence, "%.2f"))
	}
}

func num(x float64, f string) string {
	switch {
	case math.IsNaN(x):
		return "—"
	case math.IsInf(x, 1):
		return "never"
	}
	return fmt.Sprintf(f, x)
}
