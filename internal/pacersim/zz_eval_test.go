package pacersim

import (
	"fmt"
	"math"
	"os"
	"testing"
)

func TestZZEval(t *testing.T) {
	if os.Getenv("ZZ") == "" {
		t.Skip()
	}
	for _, sc := range []struct {
		n     int
		churn bool
	}{{1, false}, {4, false}, {16, false}, {4, true}, {16, true}} {
		var u, minU, r, j, c, worstJ, worstR, worstC float64
		worstJ, minU = 1, 1
		k := 0.0
		for seed := uint64(1); seed <= 6; seed++ {
			m := Measure(Run(Scenario(sc.n, sc.churn, seed), NewPacer))
			u += m.Utilisation
			for _, x := range m.PhaseUtilisation {
				minU = math.Min(minU, x)
			}
			r += m.RejectRatio
			worstR = math.Max(worstR, m.RejectRatio)
			if !math.IsNaN(m.FairnessMin) {
				j += m.FairnessMin
				worstJ = math.Min(worstJ, m.FairnessMin)
			}
			if !math.IsNaN(m.Convergence) {
				c += math.Min(m.Convergence, 10)
				worstC = math.Max(worstC, m.Convergence)
			}
			k++
		}
		fmt.Printf("N=%d churn=%v: u=%.3f minPhase=%.3f r=%.2f%% (worst %.2f%%) J=%.3f (worst %.3f) conv=%.2f (worst %.2f)\n",
			sc.n, sc.churn, u/k, minU, 100*r/k, 100*worstR, j/k, worstJ, c/k, worstC)
	}
}
