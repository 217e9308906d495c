package pacersim

import (
	"fmt"
	"os"
	"strconv"
	"testing"
)

func TestDebugClients(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("PACERSIM_CN"))
	if n == 0 {
		t.Skip()
	}
	tr := Run(Scenario(n, true, 1), NewPacer)
	per := make([][]int, tr.Clients)
	for i := range per {
		per[i] = make([]int, 30)
	}
	for _, d := range tr.Decisions {
		if d.Accepted {
			per[d.Client][int(d.At.Minutes())]++
		}
	}
	for i := range per {
		fmt.Println(i, per[i])
	}
	m := Measure(tr)
	fmt.Println(m.Fairness, m.Convergence)
}
