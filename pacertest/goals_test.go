package pacertest

import (
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/ratepace/pace/internal/pacersim"
)

var seeds = []uint64{1, 2, 3, 4, 5, 6}

// libRows turns the libraries' figures into rows the goals read.
func libRows(cells map[cell]Result) []pacersim.ZooRow {
	var rows []pacersim.ZooRow
	for _, lib := range Libs {
		for _, n := range []int{1, 4, 16} {
			r, ok := cells[cell{lib.Name, n}]
			if !ok {
				continue
			}
			rows = append(rows, pacersim.ZooRow{
				Kind:    pacersim.Kind{Name: lib.Name + " (" + lib.Algorithm + ")", Limit: libLimit, Window: libWindow},
				Clients: n, Utilisation: r.Utilisation, RejectRatio: r.RejectRatio, Fairness: r.Jain,
				Early: r.Early, LateRejected: r.LateRefused,
			})
		}
	}
	return rows
}

func tallyCell(g pacersim.Goal, rows []pacersim.ZooRow) string {
	t := pacersim.TallyGoal(g, rows)
	if t.Of == 0 {
		return "—"
	}
	return fmt.Sprintf("%d/%d (worst %.3g)", t.Met, t.Of, t.Worst)
}

func rowsTable(b *strings.Builder, rows []pacersim.ZooRow) {
	fmt.Fprintln(b, "| server | N | util | 429 ratio | J (min) | 429 after window 1 | early calls |")
	fmt.Fprintln(b, "|---|---|---|---|---|---|---|")
	for _, r := range rows {
		sc := fmt.Sprint(r.Clients)
		if r.Churn {
			sc += " churn"
		}
		j := "—"
		if !math.IsNaN(r.Fairness) {
			j = fmt.Sprintf("%.3f", r.Fairness)
		}
		name := r.Kind.Name
		if r.Kind.New != nil {
			name = r.Kind.String()
		}
		fmt.Fprintf(b, "| %s | %s | %.3f | %.2f%% | %s | %d | %d |\n", name, sc, r.Utilisation, 100*r.RejectRatio, j, r.LateRejected, r.Early)
	}
}

// TestGoalsTable writes the goals table of docs/pacer.md: every goal with
// how the tuning kinds (the zoo) and the validation kinds (simulated, and
// the real libraries over HTTP) fare, then every row. It takes about two
// minutes, and runs only when asked for a file:
//
//	go test -count=1 -run TestGoalsTable ./pacertest -args -runs 3 -table /tmp/goals.md
func TestGoalsTable(t *testing.T) {
	if *table == "" {
		t.Skip("writes the table only when given -table FILE")
	}
	libs := libRows(measureLibs(t, pacerClient))
	zoo := pacersim.ZooWorst(pacersim.NewPacer, seeds)
	val := pacersim.Worst(pacersim.Validation, pacersim.ValidationScenarios, pacersim.NewPacer, seeds)
	var b strings.Builder
	fmt.Fprintf(&b, "Goals met (rows meeting / rows), worst over seeds 1-6 in the simulation and over %d runs of 20 s over HTTP.\n\n", *runs)
	fmt.Fprintln(&b, "| goal | tuning kinds (zoo, simulated) | validation kinds (simulated) | real libraries (HTTP) |")
	fmt.Fprintln(&b, "|---|---|---|---|")
	for _, g := range pacersim.Goals {
		fmt.Fprintf(&b, "| %v | %s | %s | %s |\n", g, tallyCell(g, zoo), tallyCell(g, val), tallyCell(g, libs))
	}
	fmt.Fprintln(&b, "\nValidation kinds, simulated:")
	fmt.Fprintln(&b)
	rowsTable(&b, val)
	fmt.Fprintln(&b, "\nReal libraries over HTTP, 40 calls per 2 s on one key:")
	fmt.Fprintln(&b)
	rowsTable(&b, libs)
	fmt.Fprintln(&b, "\nTuning kinds (the zoo), simulated:")
	fmt.Fprintln(&b)
	rowsTable(&b, zoo)
	if err := os.WriteFile(*table, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}
