package pace_test

import (
	"fmt"
	"testing"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/internal/benchkit"
)

// Rates are chosen so that each path is the one its name says.
//
// admit: one event per nanosecond per key, far faster than any key is asked,
// so every decision admits. Such buckets are full again a nanosecond after
// each take, as for any client well under its pace; their rows are dropped
// by the sweep once per horizon and inserted again at the next take.
// A flood of keys never seen before uses one event per second instead:
// every made-up key then holds a row for a whole second, the heaviest case.
//
// refuse: one event per 1000 s, and every key spent before the timer starts,
// so every decision refuses.
const refuseRate = 1e-3

func admitRate(_ *testing.B, n int) float64 {
	if n >= floodKeys {
		return 1
	}
	return pace.MaxRate
}

// floodKeys is the key count from which the admit and return benchmarks hand
// out keys never seen before.
const floodKeys = 1_000_000

func newPace(b *testing.B, rate float64) *pace.Pace {
	b.Helper()
	p, err := pace.New(rate)
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// flood hands out keys never seen before: the key set is walked once per
// Pace, and a fresh Pace (made before the timer) takes over when it runs out.
type flood struct {
	keys  []string
	paces []*pace.Pace
}

func newFlood(b *testing.B, keys []string, rate float64) *flood {
	f := &flood{keys: keys}
	for range b.N/len(keys) + 2 {
		f.paces = append(f.paces, newPace(b, rate))
	}
	return f
}

func (f *flood) at(i int) (*pace.Pace, string) {
	return f.paces[i/len(f.keys)], f.keys[i%len(f.keys)]
}

type op func(p *pace.Pace, key string) bool

func reserve(p *pace.Pace, key string) bool {
	r := p.Reserve(key)
	return r.OK()
}

func reserveReturn(p *pace.Pace, key string) bool {
	r := p.Reserve(key)
	ok := r.OK()
	r.Return()
	return ok
}

// run benchmarks do over n keys, serial and parallel, and checks that the
// number of admitted decisions is the one wanted (all or none). The keys are
// visited in turn, or in the fixed pseudo-random order of benchkit.Order
// when random is set.
func run(b *testing.B, n int, rateOf func(b *testing.B, n int) float64, do op, wantAll, random bool) {
	keys := benchkit.Keys(b, n)
	if n >= floodKeys && wantAll {
		benchkit.Run(b, 0, func(b *testing.B) benchkit.Decide {
			f := newFlood(b, keys, rateOf(b, n))
			return func(i int) bool { return do(f.at(i)) }
		}, true)
		return
	}
	cycle, at := n, func(i int) string { return keys[i] }
	if random {
		order := benchkit.Order(n)
		cycle, at = len(order), func(i int) string { return keys[order[i]] }
	}
	benchkit.Run(b, cycle, func(b *testing.B) benchkit.Decide {
		p := newPace(b, rateOf(b, n))
		for _, k := range keys {
			p.Allow(k) // create every row; at the refuse rate this spends it
		}
		if !wantAll && p.Len() != n {
			b.Fatalf("Len() = %d after spending %d keys", p.Len(), n)
		}
		return func(i int) bool { return do(p, at(i)) }
	}, wantAll)
}

// BenchmarkReserve measures Reserve (admit, refuse) and Reserve then Return
// on one hot key, 10,000 keys in turn and in a random order, and a million
// keys.
func BenchmarkReserve(b *testing.B) {
	refuse := func(*testing.B, int) float64 { return refuseRate }
	paths := []struct {
		name    string
		rate    func(*testing.B, int) float64
		do      op
		wantAll bool
	}{
		{"admit", admitRate, reserve, true},
		{"refuse", refuse, reserve, false},
		{"return", admitRate, reserveReturn, true},
	}
	for _, path := range paths {
		for _, n := range []int{1, 10_000, 1_000_000} {
			b.Run(fmt.Sprintf("%s/keys=%d", path.name, n), func(b *testing.B) { run(b, n, path.rate, path.do, path.wantAll, false) })
			if n == 10_000 {
				b.Run(fmt.Sprintf("%s/keys=%d/random", path.name, n), func(b *testing.B) { run(b, n, path.rate, path.do, path.wantAll, true) })
			}
		}
	}
}
