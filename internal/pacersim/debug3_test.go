package pacersim

import (
	"fmt"
	"os"
	"strconv"
	"testing"
)

func TestDebugRejects(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("PACERSIM_RN"))
	if n == 0 {
		t.Skip()
	}
	tr := Run(Scenario(n, false, 1), NewPacer)
	perMin := make([]int, 30)
	accMin := make([]int, 30)
	perClient := make([]int, tr.Clients)
	for _, d := range tr.Decisions {
		m := int(d.At.Minutes())
		if !d.Accepted {
			perMin[m]++
			perClient[d.Client]++
		} else {
			accMin[m]++
		}
	}
	fmt.Println("rej/min", perMin)
	fmt.Println("acc/min", accMin)
	fmt.Println("rej/client", perClient)
}
