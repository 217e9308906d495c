package takemodel

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratepace/pace/driver"
	"github.com/ratepace/pace/storetest"
)

// shapes returns the shapes the Take scenarios draw from: everyday paces,
// a few nanoseconds per take (several takes inside one microsecond), a
// tolerance of 31 years (beyond 2^53 ns: the script's pairs must stay
// exact), takes of cost zero, and fractional costs.
func shapes(t *testing.T) []driver.Shape {
	t.Helper()
	var all []driver.Shape
	for _, s := range []struct{ capacity, rate, cost float64 }{
		{5, 5, 1},            // 5/s, a bucket of one second
		{20, 20.0 / 60, 1},   // 20 a minute
		{10, 1, 1},           // 1/s, 10 at once
		{2, 1e9 / 3, 1},      // 3 ns a take
		{1e6, 0.001, 1},      // 1000 s a take, 31 years to refill
		{100, 1e6, 0},        // free takes: never debit
		{3.5, 7, 0.25},       // fractional
		{1000, 1.0 / 3.6, 1}, // 1000 an hour
	} {
		b, err := driver.NewShape(s.capacity, s.rate, s.cost)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, b)
	}
	return all
}

// heldReceipt is a take a scenario may refund later, in any order, once or
// more.
type heldReceipt struct {
	key    string
	shapes []driver.Shape
	r      driver.Receipt
}

// Store is what a Scenario drives: Take, TakeMany and Refund, and
// a way to read back the stored state of a key.
type Store interface {
	Take(ctx context.Context, key string, shapes []driver.Shape) (driver.Grant, error)
	TakeMany(ctx context.Context, keys []string, shapes []driver.Shape, out []driver.Grant) error
	Refund(ctx context.Context, key string, shapes []driver.Shape, r driver.Receipt) error
}

// clockStep returns how far the clock moves before the next operation:
// mostly nothing or a little (takes and refunds within one interval), now
// and then seconds to hours, rarely days (expiry of the 1000-an-hour shape)
// or a small step back.
func clockStep(r *rand.Rand) time.Duration {
	switch x := r.IntN(100); {
	case x < 25:
		return 0
	case x < 40:
		return time.Duration(r.Int64N(int64(time.Microsecond)))
	case x < 70:
		return time.Duration(r.Int64N(int64(300 * time.Millisecond)))
	case x < 90:
		return time.Duration(r.Int64N(int64(5 * time.Second)))
	case x < 96:
		return time.Duration(r.Int64N(int64(2 * time.Hour)))
	case x < 98:
		return time.Duration(r.Int64N(int64(10 * 24 * time.Hour)))
	default:
		return -time.Duration(r.Int64N(int64(100 * time.Millisecond)))
	}
}

// Scenario runs random takes (Take and TakeMany, keys repeated), refunds
// of any outstanding receipt in any order (some twice, some after their key
// was deleted) and clock steps, through s and through takemodel, and
// requires after every step the same grant to the nanosecond and the same
// stored state: reorder count, remembered receipt, arrival times. now
// returns the clock the store decides with, advance moves it, and stored
// reads a key's state from the server (nil when absent). back lets the
// clock step backwards now and then; a store that deletes rows full at a
// later now (a sweep) cannot be compared so, since going back revives them
// in the reference. It returns the situations reached, by name.
func Scenario(t *testing.T, s Store, seed uint64, steps int, back bool, now func() time.Duration, advance func(time.Duration),
	stored func(key string) *State) map[string]int {
	t.Helper()
	ctx := context.Background()
	r := rand.New(rand.NewPCG(seed, 0x7a4e))
	all := shapes(t)
	pick := func() []driver.Shape {
		n := 1 + r.IntN(driver.MaxShapes)
		perm := r.Perm(len(all))[:n]
		shapes := make([]driver.Shape, n)
		for i, j := range perm {
			shapes[i] = all[j]
		}
		return shapes
	}
	// The key "slow" always has a shape of one take in 116 days: its waits
	// pass 2^53 ns, and it keeps the others' keys from being refused for
	// months.
	slow, err := driver.NewShape(2, 1e-7, 1)
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"a", "b", "c", "slow"}
	shapesOf := map[string][]driver.Shape{}
	pickFor := func(k string) []driver.Shape {
		shapes := pick()
		if k == "slow" {
			shapes = append([]driver.Shape{slow}, shapes[:min(len(shapes), driver.MaxShapes-1)]...)
		}
		return shapes
	}
	for _, k := range keys {
		shapesOf[k] = pickFor(k)
	}
	var m Model
	var held []heldReceipt
	seen := map[string]int{}

	check := func(step int, what, k string) {
		t.Helper()
		at := now()
		want, got := m.Get(k, at), stored(k)
		if want == nil {
			if got.Live(at) {
				t.Fatalf("seed %d step %d: after %s key %s stored %+v; the reference holds it full (absent)", seed, step, what, k, *got)
			}
			return
		}
		if !same(got, want) {
			t.Fatalf("seed %d step %d at %d: after %s key %s stored %+v; reference %+v", seed, step, at, what, k, got, *want)
		}
	}
	take := func(step int, k string, shapes []driver.Shape, g driver.Grant, what string) {
		t.Helper()
		var before []time.Duration // the key's arrival times before the take
		if st := m.Get(k, now()); st != nil {
			before = slices.Clone(st.TATs)
		}
		want, err := m.Take(k, shapes, now(), g.Receipt.Gen)
		if err != nil {
			t.Fatalf("seed %d step %d: %s: %v", seed, step, what, err)
		}
		if g != want {
			t.Fatalf("seed %d step %d at %d: %s = %+v;\nreference %+v", seed, step, now(), what, g, want)
		}
		switch {
		case g.OK:
			seen["taken"]++
			held = append(held, heldReceipt{k, shapes, g.Receipt})
		case g.RetryAfter >= 1<<53:
			seen["refused, wait of 2^53 ns or more"]++
		default:
			seen["refused"]++
		}
		if !g.OK {
			for i, b := range shapes {
				tat := now()
				if i < len(before) {
					tat = before[i]
				}
				if _, _, fits := b.Take(tat, now()); fits {
					seen["refused by one shape while another fits"]++
					break
				}
			}
		}
	}

	refund := func(step int, h heldReceipt, shapes []driver.Shape) {
		t.Helper()
		if err := s.Refund(ctx, h.key, shapes, h.r); err != nil {
			t.Fatalf("seed %d step %d: Refund(%s): %v", seed, step, h.key, err)
		}
		intact := m.Get(h.key, now()) != nil && m.Get(h.key, now()).Gen == h.r.Gen
		what := m.Refund(h.key, shapes, h.r, now())
		seen["refund: "+what]++
		if !intact && what != "absent" && what != "older" && what != "copy" && what != "nothing" {
			seen["refund not intact, gave"]++
		}
		check(step, fmt.Sprintf("Refund(%s, %+v)", h.key, h.r), h.key)
	}

	for step := range steps {
		if d := clockStep(r); d >= 0 || back {
			advance(d)
		}
		// Now and then land exactly on an edge, where a < for a <= would
		// show: a shape just full, a take that just fits or just does not,
		// a receipt's reserved time or the end of its interval. With back,
		// the clock may go back to one, as a server's clock stepped back
		// would.
		if r.IntN(4) == 0 {
			var edges []time.Duration
			k := keys[r.IntN(len(keys))]
			if st := m.Get(k, now()); st != nil {
				for i, b := range shapesOf[k] {
					if i < len(st.TATs) {
						fit := st.TATs[i] + b.Interval() - b.Tolerance()
						edges = append(edges, st.TATs[i], fit, fit-1)
					}
				}
			}
			if len(held) > 0 {
				h := held[r.IntN(len(held))]
				for i, b := range h.shapes {
					edges = append(edges, h.r.Reserved[i], h.r.At+b.Interval())
				}
			}
			if len(edges) > 0 {
				if e := edges[r.IntN(len(edges))]; (e > now() || back && e < now()) && (e-now()).Abs() < 10*time.Second {
					advance(e - now())
					seen["on an edge"]++
				}
			}
		}
		if r.IntN(20) == 0 {
			k := keys[r.IntN(len(keys))]
			shapesOf[k] = pickFor(k) // a key's limits change
		}
		switch op := r.IntN(10); {
		case op < 4:
			k := keys[r.IntN(len(keys))]
			shapes, what := shapesOf[k], "Take("+k+")"
			if r.IntN(8) == 0 {
				shapes, what = settlement(r, shapes, seen), what+" of a settlement"
			}
			g, err := s.Take(ctx, k, shapes)
			if err != nil {
				t.Fatalf("seed %d step %d: %s: %v", seed, step, what, err)
			}
			take(step, k, shapes, g, what)
			check(step, what, k)
		case op < 6:
			// TakeMany of 1 to 5 keys, repeats included, with the shapes
			// of the first.
			batch := make([]string, 1+r.IntN(5))
			for i := range batch {
				batch[i] = keys[r.IntN(len(keys))]
			}
			shapes := shapesOf[batch[0]]
			out := make([]driver.Grant, len(batch))
			if err := s.TakeMany(ctx, batch, shapes, out); err != nil {
				t.Fatalf("seed %d step %d: TakeMany(%v): %v", seed, step, batch, err)
			}
			for i, k := range batch {
				take(step, k, shapes, out[i], fmt.Sprintf("TakeMany(%v)[%d]", batch, i))
			}
			for _, k := range batch {
				check(step, fmt.Sprintf("TakeMany(%v)", batch), k)
			}
			seen["TakeMany"]++
		default:
			if len(held) == 0 {
				continue
			}
			i := r.IntN(len(held))
			h := held[i]
			if r.IntN(4) != 0 { // now and then keep it, to refund it again
				held = slices.Delete(held, i, i+1)
			}
			shapes := h.shapes
			if r.IntN(3) == 0 {
				shapes = partial(r, shapes)
				seen["settle: a part given back"]++
			}
			refund(step, h, shapes)
		}
	}
	// Every run reaches a refund on an absent key, however its draws went:
	// a take on a key left to fill, then the time it takes to fill again,
	// then the take's refund.
	k := keys[0]
	fill := func() {
		if st := m.Get(k, now()); st != nil {
			advance(slices.Max(st.TATs) - now() + time.Second)
		}
	}
	fill()
	g, err := s.Take(ctx, k, shapesOf[k])
	if err != nil || !g.OK {
		t.Fatalf("seed %d: Take(%s) on a full key = %+v, %v; want admitted", seed, k, g, err)
	}
	take(steps, k, shapesOf[k], g, "Take("+k+") on a full key")
	check(steps, "Take("+k+") on a full key", k)
	fill()
	refund(steps, held[len(held)-1], shapesOf[k])
	return seen
}

// settlement returns the shapes of a take a reservation of several units
// makes of shapes, as pace.Shared makes them: n intervals of a shape with
// its own tolerance (n of them fit its bucket), or the debit of an
// overdraft, 1 to 10 intervals (at most driver.MaxTolerance) with a tolerance of
// driver.MaxTolerance, so that it always fits; a shape left alone now and
// then (a quota counting reservations, not units).
func settlement(r *rand.Rand, shapes []driver.Shape, seen map[string]int) []driver.Shape {
	out := make([]driver.Shape, len(shapes))
	over := r.IntN(2) == 0
	for i, b := range shapes {
		switch {
		case r.IntN(4) == 0:
			out[i] = b
		case over:
			k := time.Duration(1 + r.IntN(10))
			cost := driver.MaxTolerance
			if b.Interval() == 0 || k < driver.MaxTolerance/b.Interval() {
				cost = k * b.Interval()
			}
			out[i] = driver.ShapeOf(cost, driver.MaxTolerance)
		default:
			n := time.Duration(1)
			if b.Interval() > 0 {
				n += time.Duration(r.Int64N(int64(b.Tolerance() / b.Interval())))
			}
			out[i] = driver.ShapeOf(n*b.Interval(), b.Tolerance())
		}
	}
	if over {
		seen["settle: an overdraft"]++
	} else {
		seen["settle: several units"]++
	}
	return out
}

// partial returns the shapes of a refund that gives back only part of a
// take of shapes, as a settlement below the reservation does: j quarters
// of each interval (0 to 4), with the shape's tolerance.
func partial(r *rand.Rand, shapes []driver.Shape) []driver.Shape {
	out := make([]driver.Shape, len(shapes))
	for i, b := range shapes {
		out[i] = driver.ShapeOf(b.Interval()*time.Duration(r.IntN(5))/4, b.Tolerance())
	}
	return out
}

// RequireSeen fails the test unless the scenario reached every situation
// that makes it mean something.
func RequireSeen(t *testing.T, seen map[string]int, want ...string) {
	t.Helper()
	t.Logf("situations reached: %v", seen)
	for _, w := range want {
		if seen[w] == 0 {
			t.Errorf("the scenario never reached %q; it proves less than it claims", w)
		}
	}
}

// Situations are what every Take scenario must reach.
var Situations = []string{"on an edge", "taken", "refused", "refused by one shape while another fits", "TakeMany",
	"refund: exact", "refund: reordered", "refund: copy", "refund: absent", "refund: older", "refund: deleted", "refund: nothing",
	"refund not intact, gave", "settle: several units", "settle: an overdraft", "settle: a part given back"}

// InvalidCalls makes a call of each kind with an argument out of range on
// s (no shape, five shapes, the zero Bucket, an empty or too long key, a
// TakeMany whose out does not match its keys) and returns their errors, by
// name: each must wrap pace.ErrInvalidArgument, and none may write. The
// keys named are "k" and "j".
func InvalidCalls(s Store) map[string]error {
	ctx := context.Background()
	ok, err := driver.NewShape(5, 5, 1)
	if err != nil {
		panic(err)
	}
	five := []driver.Shape{ok, ok, ok, ok, ok}
	take := func(key string, shapes []driver.Shape) error { _, err := s.Take(ctx, key, shapes); return err }
	return map[string]error{
		"no shapes":      take("k", nil),
		"five shapes":    take("k", five),
		"zero Bucket":    take("k", []driver.Shape{ok, {}}),
		"empty key":      take("", []driver.Shape{ok}),
		"long key":       take(strings.Repeat("k", driver.MaxKeyLen+1), []driver.Shape{ok}),
		"many, bad key":  s.TakeMany(ctx, []string{"k", ""}, []driver.Shape{ok}, make([]driver.Grant, 2)),
		"many, short":    s.TakeMany(ctx, []string{"k", "j"}, []driver.Shape{ok}, make([]driver.Grant, 1)),
		"many, zero":     s.TakeMany(ctx, []string{"k"}, []driver.Shape{{}}, make([]driver.Grant, 1)),
		"refund, zero":   s.Refund(ctx, "k", []driver.Shape{{}}, driver.Receipt{At: 1}),
		"refund, no key": s.Refund(ctx, "", []driver.Shape{ok}, driver.Receipt{At: 1}),
	}
}

// WriteAll writes key in all five namespaces of s: a take of a token bucket
// and of Take (one an hour), a plain and a burst slot, and a value. It
// returns the shapes of the Take.
func WriteAll(t *testing.T, s storetest.TakeStore, key string) []driver.Shape {
	t.Helper()
	ctx := context.Background()
	b, err := driver.NewShape(1, 1.0/3600, 1)
	if err != nil {
		t.Fatal(err)
	}
	shapes := []driver.Shape{b}
	if ok, _, err := s.TokenBucket(ctx, key, 1, 1.0/3600, 1); !ok || err != nil {
		t.Fatalf("TokenBucket = %v, %v", ok, err)
	}
	if ok, _, err := s.AcquireSlot(ctx, key, 1, time.Minute); !ok || err != nil {
		t.Fatalf("AcquireSlot = %v, %v", ok, err)
	}
	if ok, _, err := s.AcquireSlotBurst(ctx, key, 1, 2, time.Minute, time.Minute); !ok || err != nil {
		t.Fatalf("AcquireSlotBurst = %v, %v", ok, err)
	}
	if err := s.Set(ctx, key, []byte("v"), time.Minute); err != nil {
		t.Fatal(err)
	}
	if g, err := s.Take(ctx, key, shapes); !g.OK || err != nil {
		t.Fatalf("Take = %+v, %v", g, err)
	}
	return shapes
}

// MustBucket returns driver.NewShape(capacity, perSecond, cost), failing tb
// on an error: the stores' tests build their shapes with it.
func MustBucket(tb testing.TB, capacity, perSecond, cost float64) driver.Shape {
	tb.Helper()
	b, err := driver.NewShape(capacity, perSecond, cost)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}
