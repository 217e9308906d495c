//go:build pacerzoo

package pacersim

import (
	"fmt"
	"math"
	"testing"
)

// TestZooGoals holds the pacer (pacer.New() with its defaults, no option
// naming the server) to the goals of docs/pacer.md against every server kind
// of the zoo, worst over seeds 1-6: utilisation >= 0.85 of what the
// algorithm allows, 429 ratio <= 1% at N = 1 and 4 (<= 3% at N = 16), Jain's
// index >= 0.95 at N = 4 (>= 0.90 at N = 16), and no call ever sent before a
// Retry-After the same client received. A goal not met must be listed in
// zooShortfalls with the figure reached, which the test then holds the pacer
// to; a listed goal that is met fails too, so that the list and
// docs/pacer.md stay true. All 14 kinds, the 3000/5 min and 10,000/min ones
// included (a decision costs the same whatever the calls in the window),
// take one to three minutes on 2 shared cores, hence the build tag:
//
//	go test -tags pacerzoo -run TestZooGoals -timeout 20m ./internal/pacersim
func TestZooGoals(t *testing.T) {
	rows := ZooWorst(NewPacer, seeds)
	seen := map[string]bool{}
	for _, r := range rows {
		sc := fmt.Sprintf("N=%d", r.Clients)
		if r.Churn {
			sc += " churn"
		}
		maxRatio, minJ := 0.01, 0.95
		if r.Clients >= 16 {
			maxRatio, minJ = 0.03, 0.90
		}
		gs := []goal{
			{"utilisation", r.Utilisation, 0.85, false},
			{"429 ratio", r.RejectRatio, maxRatio, true},
			{"early calls", float64(r.Early), 0, true},
		}
		if !math.IsNaN(r.Fairness) {
			gs = append(gs, goal{"fairness", r.Fairness, minJ, false})
		}
		for _, g := range gs {
			name := fmt.Sprintf("%v %s %s", r.Kind, sc, g.name)
			seen[name] = true
			reached, listed := zooShortfalls[name]
			switch {
			case g.met() && listed:
				t.Errorf("%s = %.4f meets the goal %.4f but is listed as a shortfall: remove it from zooShortfalls and docs/pacer.md", name, g.got, g.target)
			case g.met():
			case !listed:
				t.Errorf("%s = %.4f; goal %.4f, and no documented shortfall", name, g.got, g.target)
			case g.atMost && g.got > reached+1e-3, !g.atMost && g.got < reached-1e-3:
				t.Errorf("%s = %.4f; goal %.4f (not met), and worse than the documented %.4f", name, g.got, g.target, reached)
			default:
				t.Logf("goal not met: %s = %.4f (goal %.4f)", name, g.got, g.target)
			}
		}
	}
	for name := range zooShortfalls {
		if !seen[name] {
			t.Errorf("zooShortfalls lists %q, which no row has", name)
		}
	}
}

// zooShortfalls are the goals not met, with the worst figure over seeds
// 1-6 (from the zoo table in docs/pacer.md; the reasons are there).
var zooShortfalls = map[string]float64{
	"sliding log, refused counted; x-delta, RA s; 20/1s; rtt 5ms N=16 429 ratio":                  0.0625,
	"sliding log, refused counted; x-delta, RA s; 20/1s; rtt 5ms N=4 churn utilisation":           0.8300,
	"sliding log; x-no reset, RA s; 200/20s; rtt 20ms N=4 churn fairness":                         0.8622,
	"fixed window (clock); x-epoch s, RA s; 30/3s; rtt 10ms N=16 429 ratio":                       0.0827,
	"fixed window (clock); x-epoch ms, RA absent; 5/10s; rtt 1ms N=16 429 ratio":                  0.3605,
	"fixed window (clock); x-epoch ms, RA absent; 5/10s; rtt 1ms N=16 fairness":                   0.6934,
	"fixed window (clock); x-epoch ms, RA absent; 5/10s; rtt 1ms N=4 churn 429 ratio":             0.0309,
	"fixed window (clock), refused counted; retry-after only; 40/2s; rtt 5ms N=16 429 ratio":      0.0614,
	"fixed window (clock), refused counted; retry-after only; 40/2s; rtt 5ms N=16 fairness":       0.8684,
	"fixed window (clock), refused counted; retry-after only; 40/2s; rtt 5ms N=4 churn 429 ratio": 0.0196,
	"token bucket; x-date UTC, RA UTC; 20/2s; rtt 10ms N=16 429 ratio":                            0.1310,
	"token bucket; x-date UTC, RA UTC; 20/2s; rtt 10ms N=4 churn fairness":                        0.9278,
}
