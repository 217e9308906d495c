package pacersim

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"
)

func TestDebugSeries(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("PACERSIM_N"))
	if n == 0 {
		t.Skip()
	}
	tr := Run(Scenario(n, os.Getenv("PACERSIM_CHURN") != "", 1), NewPacer)
	// per 10 s: accepted, rejected, last used
	step := 10 * time.Second
	acc := map[int]int{}
	rej := map[int]int{}
	used := map[int]int{}
	for _, d := range tr.Decisions {
		k := int(d.At / step)
		if d.Accepted {
			acc[k]++
		} else {
			rej[k]++
		}
		used[k] = d.Used
	}
	for k := 0; k < int(tr.Config.Duration/step); k++ {
		fmt.Printf("%4ds acc=%3d rej=%3d used=%3d\n", k*10, acc[k], rej[k], used[k])
	}
	fmt.Printf("%+v\n", Measure(tr))
}
