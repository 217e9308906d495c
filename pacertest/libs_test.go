package pacertest

import (
	"flag"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratepace/pace/pacer"
)

var (
	runs  = flag.Int("runs", 1, "runs of each library and client count; the figures are the worst")
	table = flag.String("table", "", "TestGoalsTable: write the goals table to this file")
)

// Every run: 40 calls per 2 s window on one key, 10 windows.
const (
	libLimit    = 40
	libWindow   = 2 * time.Second
	libDuration = 20 * time.Second
)

// pacerClient is the pacer as a program uses it: pacer.New with its
// defaults, each client its own Transport.
func pacerClient(id int, seed uint64, base http.RoundTripper) http.RoundTripper {
	p, err := pacer.New(pacer.WithSeed(seed*1000 + uint64(id) + 1))
	if err != nil {
		panic(err) // a valid option
	}
	return pacer.Transport(base, p)
}

type cell struct {
	lib     string
	clients int
}

// worst keeps the worst of each figure over runs.
func worst(a, b Result) Result {
	a.Utilisation = math.Min(a.Utilisation, b.Utilisation)
	a.RejectRatio = math.Max(a.RejectRatio, b.RejectRatio)
	if !(a.Jain <= b.Jain) {
		a.Jain = b.Jain
	}
	a.Early, a.LateRefused = max(a.Early, b.Early), max(a.LateRefused, b.LateRefused)
	return a
}

// measureLibs runs every library at N = 1, 4, 16, all at once, runs times
// each, and returns the worst figures of each cell.
func measureLibs(t *testing.T, newClient Client) map[cell]Result {
	var mu sync.Mutex
	out := map[cell]Result{}
	var wg sync.WaitGroup
	for _, lib := range Libs {
		for _, n := range []int{1, 4, 16} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := range *runs {
					res, err := Run(lib, libLimit, libWindow, n, libDuration, uint64(r+1), newClient)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					c := cell{lib.Name, n}
					if old, ok := out[c]; ok {
						res = worst(old, res)
					}
					out[c] = res
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	return out
}

func writeTable(cells map[cell]Result) string {
	var keys []cell
	for c := range cells {
		keys = append(keys, c)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].lib != keys[j].lib {
			return keys[i].lib < keys[j].lib
		}
		return keys[i].clients < keys[j].clients
	})
	var b strings.Builder
	fmt.Fprintf(&b, "| library | N | util | 429 ratio | J | 429 after window 1 | early calls |\n|---|---|---|---|---|---|---|\n")
	for _, c := range keys {
		r := cells[c]
		j := "—"
		if !math.IsNaN(r.Jain) {
			j = fmt.Sprintf("%.3f", r.Jain)
		}
		fmt.Fprintf(&b, "| %s | %d | %.3f | %.2f%% | %s | %d | %d |\n", c.lib, c.clients, r.Utilisation, 100*r.RejectRatio, j, r.LateRefused, r.Early)
	}
	return b.String()
}

// TestLibs runs the pacer against every library at N = 1, 4 and 16 over
// real HTTP (about 20 s: every cell at once) and checks that no call goes
// before a Retry-After, and that no figure falls past the floors below,
// set under the worst of the pacer's runs on a loaded 2-core machine
// (docs/pacer.md has the figures and the goals, which the pacer does not
// all meet; TestGoalsTable writes them):
//
//	go test -count=1 -run TestLibs ./pacertest -args -runs 3
func TestLibs(t *testing.T) {
	cells := measureLibs(t, pacerClient)
	t.Log("\n" + writeTable(cells))
	for c, r := range cells {
		if r.Early > 0 {
			t.Errorf("%s N=%d: %d calls before a Retry-After", c.lib, c.clients, r.Early)
		}
		if r.Utilisation < libFloor.util || r.RejectRatio > libFloor.ratio || r.Jain < libFloor.jain {
			t.Errorf("%s N=%d: utilisation %.3f, 429 ratio %.4f, J %.3f; want >= %.2f, <= %.2f, >= %.2f",
				c.lib, c.clients, r.Utilisation, r.RejectRatio, r.Jain, libFloor.util, libFloor.ratio, libFloor.jain)
		}
	}
}

// libFloor is what TestLibs asserts of every cell: below the pacer's worst
// over two sets of 3 runs of every cell (utilisation 0.50 on httprate at
// N = 1, 429 ratio 19.4% on ulule at N = 16, J 0.28 on go-limiter at
// N = 16) by a margin for a loaded machine.
var libFloor = struct{ util, ratio, jain float64 }{0.40, 0.30, 0.15}
