package takemodel

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/driver"
)

// ExtremeShapes returns shape sets at the edges of what driver.NewShape
// accepts: a capacity of one, one take a nanosecond (pace.MaxRate), a free
// take of a one-nanosecond bucket, a take every 31 years, a tolerance at
// the largest driver.NewShape allows (about 73 years, far beyond 2^53 ns),
// and a fractional cost.
func ExtremeShapes(t *testing.T) [][]driver.Shape {
	t.Helper()
	type spec struct{ capacity, rate, cost float64 }
	sets := [][]spec{
		{{1, pace.MaxRate, 1}, {1, 1, 1}, {3, 1e9 / 7, 1}},
		{{1, pace.MaxRate, 0}, {2, 1e-9, 1}, {1, pace.MaxRate, 1}},
		{{1, 1 / 2.3e9, 1}, {1, pace.MaxRate, 1}, {1e6, 0.001, 1}},
		{{1, 1, 1}, {1, 1 / 2.3e9, 1}},
		{{2.5, 1e9 / 3, 0.5}, {1, 1, 0}, {1, 1e-9, 1}},
	}
	out := make([][]driver.Shape, len(sets))
	for i, set := range sets {
		for _, s := range set {
			b, err := driver.NewShape(s.capacity, s.rate, s.cost)
			if err != nil {
				t.Fatalf("NewBucket(%v, %v, %v): %v", s.capacity, s.rate, s.cost, err)
			}
			out[i] = append(out[i], b)
		}
	}
	return out
}

// Alternate drives one key of s through takes of shapes' first shape alone
// (the single-shape path of a store) and of all of shapes, TakeMany of the
// key repeated, refunds of either kind of receipt in any order (some
// twice), and clock steps of a nanosecond, of the shapes' intervals, of
// years and (with back) backwards, and requires after every step the
// grant and the stored state that Model (driver.TakeAll, RemainingAll,
// RefundAll) gives, and returns the situations reached by name. now, advance and stored are as for Scenario. The clock
// never passes 2^62 + 2^60 ns (the year 2189), where an arrival time a
// tolerance (at most 2^61 ns) ahead still fits an int64.
func Alternate(t *testing.T, s Store, seed uint64, steps int, shapes []driver.Shape, back bool, now func() time.Duration,
	advance func(time.Duration), stored func(key string) *State) map[string]int {
	t.Helper()
	seen := map[string]int{}
	ctx := context.Background()
	r := rand.New(rand.NewPCG(seed, 0xa17e))
	const k = "alt"
	const latest = 1<<62 + 1<<60
	var m Model
	type held struct {
		shapes []driver.Shape
		r      driver.Receipt
	}
	var receipts []held
	check := func(step int, what string) {
		t.Helper()
		at := now()
		want, got := m.Get(k, at), stored(k)
		if want == nil {
			if got.Live(at) {
				t.Fatalf("seed %d step %d at %d: after %s stored %+v; the reference holds the key full", seed, step, at, what, *got)
			}
			return
		}
		if !same(got, want) {
			t.Fatalf("seed %d step %d at %d: after %s stored %+v; reference %+v", seed, step, at, what, got, *want)
		}
	}
	take := func(step int, sh []driver.Shape, g driver.Grant, what string) {
		t.Helper()
		want, err := m.Take(k, sh, now(), g.Receipt.Gen)
		if err != nil {
			t.Fatalf("seed %d step %d: %s: %v", seed, step, what, err)
		}
		if g != want {
			t.Fatalf("seed %d step %d at %d: %s = %+v;\nreference %+v", seed, step, now(), what, g, want)
		}
		outcome := "refused"
		if g.OK {
			outcome = "taken"
			receipts = append(receipts, held{sh, g.Receipt})
		}
		seen[fmt.Sprintf("%s, %d of %d shapes", outcome, len(sh), len(shapes))]++
	}
	for step := range steps {
		var d time.Duration
		switch x := r.IntN(12); {
		case x < 3:
		case x < 5:
			d = time.Duration(1 + r.IntN(3))
		case x < 8:
			b := shapes[r.IntN(len(shapes))]
			d = b.Interval() / time.Duration(1+r.IntN(3))
			if r.IntN(2) == 0 {
				d = b.Tolerance() - b.Interval() + time.Duration(r.IntN(3)-1)
			}
			d = min(d, 40*365*24*time.Hour)
		case x < 10:
			d = time.Duration(r.Int64N(int64(time.Second)))
		case x < 11:
			if back {
				d = -time.Duration(1 + r.Int64N(int64(time.Second)))
			}
		default:
			d = time.Duration(r.Int64N(int64(10 * 365 * 24 * time.Hour)))
		}
		if now()+d > latest {
			d = 0 // beyond, driver.TakeAll's arrival times could overflow an int64
		}
		advance(d)
		sh := shapes[:1]
		if r.IntN(2) == 0 {
			sh = shapes
		}
		switch op := r.IntN(10); {
		case op < 4:
			g, err := s.Take(ctx, k, sh)
			if err != nil {
				t.Fatalf("seed %d step %d: Take of %d shapes: %v", seed, step, len(sh), err)
			}
			take(step, sh, g, fmt.Sprintf("Take of %d shapes", len(sh)))
			check(step, fmt.Sprintf("Take of %d shapes", len(sh)))
		case op < 6:
			out := make([]driver.Grant, 1+r.IntN(3))
			if err := s.TakeMany(ctx, slices.Repeat([]string{k}, len(out)), sh, out); err != nil {
				t.Fatalf("seed %d step %d: TakeMany of %d shapes: %v", seed, step, len(sh), err)
			}
			for i, g := range out {
				take(step, sh, g, fmt.Sprintf("TakeMany of %d shapes [%d]", len(sh), i))
			}
			check(step, fmt.Sprintf("TakeMany of %d shapes", len(sh)))
		default:
			if len(receipts) == 0 {
				continue
			}
			i := r.IntN(len(receipts))
			h := receipts[i]
			if r.IntN(4) != 0 {
				receipts = slices.Delete(receipts, i, i+1)
			}
			if err := s.Refund(ctx, k, h.shapes, h.r); err != nil {
				t.Fatalf("seed %d step %d: Refund: %v", seed, step, err)
			}
			seen[fmt.Sprintf("refund of %d shapes: %s", len(h.shapes), m.Refund(k, h.shapes, h.r, now()))]++
			check(step, fmt.Sprintf("Refund of %d shapes %+v", len(h.shapes), h.r))
		}
	}
	return seen
}
