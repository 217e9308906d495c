package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/internal/takemodel"
	"github.com/redis/go-redis/v9"
)

// takeShapes are the shapes the Take scenarios draw from: everyday paces,
// a few nanoseconds per take (several takes inside one microsecond), a
// tolerance of 31 years (beyond 2^53 ns: the script's pairs must stay
// exact), takes of cost zero, and fractional costs.
func takeShapes(t *testing.T) []pace.Bucket {
	t.Helper()
	var shapes []pace.Bucket
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
		b, err := pace.NewBucket(s.capacity, s.rate, s.cost)
		if err != nil {
			t.Fatal(err)
		}
		shapes = append(shapes, b)
	}
	return shapes
}

// heldReceipt is a take a scenario may refund later, in any order, once or
// more.
type heldReceipt struct {
	key    string
	shapes []pace.Bucket
	r      pace.Receipt
}

// takeStore is what a Take scenario drives: Take, TakeMany and Refund, and
// a way to read back the stored state of a key.
type takeStore interface {
	Take(ctx context.Context, key string, shapes []pace.Bucket) (pace.Grant, error)
	TakeMany(ctx context.Context, keys []string, shapes []pace.Bucket, out []pace.Grant) error
	Refund(ctx context.Context, key string, shapes []pace.Bucket, r pace.Receipt) error
}

var _ takeStore = (*Store)(nil)

// storedTake decodes the state the scripts keep at key: nil when absent.
func storedTake(t *testing.T, c redis.UniversalClient, key string) *takemodel.State {
	t.Helper()
	v, err := c.Get(context.Background(), key).Result()
	if errors.Is(err, redis.Nil) {
		return nil
	}
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	f := unpack(t, v, len(v)/8)
	if len(f) < 9 || len(f)%2 == 0 {
		t.Fatalf("stored take state of %d doubles; want 7 + 2 per shape", len(f))
	}
	st := &takemodel.State{
		Gen:          uint64(f[0]),
		Born:         uint64(f[1]),
		MemoAt:       time.Duration(f[2])*time.Second + time.Duration(f[3]),
		MemoReserved: time.Duration(f[4])*time.Second + time.Duration(f[5]),
		MemoGen:      uint64(f[6]),
	}
	for i := 7; i < len(f); i += 2 {
		st.TATs = append(st.TATs, time.Duration(f[i])*time.Second+time.Duration(f[i+1]))
	}
	return st
}

// takeStep returns how far the clock moves before the next operation:
// mostly nothing or a little (takes and refunds within one interval), now
// and then seconds to hours, rarely days (expiry of the 1000-an-hour shape)
// or a small step back.
func takeStep(r *rand.Rand) time.Duration {
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

// takeScenario runs random takes (Take and TakeMany, keys repeated), refunds
// of any outstanding receipt in any order (some twice, some after their key
// was deleted) and clock steps, through s and through takemodel, and
// requires after every step the same grant to the nanosecond and the same
// stored state: reorder count, remembered receipt, arrival times. now
// returns the clock the store decides with, advance moves it, and stored
// reads a key's state from the server (nil when absent). It returns the
// situations reached, by name.
func takeScenario(t *testing.T, s takeStore, seed uint64, steps int, now func() time.Duration, advance func(time.Duration),
	stored func(key string) *takemodel.State) map[string]int {
	t.Helper()
	ctx := context.Background()
	r := rand.New(rand.NewPCG(seed, 0x7a4e))
	all := takeShapes(t)
	pick := func() []pace.Bucket {
		n := 1 + r.IntN(pace.MaxShapes)
		perm := r.Perm(len(all))[:n]
		shapes := make([]pace.Bucket, n)
		for i, j := range perm {
			shapes[i] = all[j]
		}
		return shapes
	}
	// The key "slow" always has a shape of one take in 116 days: its waits
	// pass 2^53 ns, and it keeps the others' keys from being refused for
	// months.
	slow, err := pace.NewBucket(2, 1e-7, 1)
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"a", "b", "c", "slow"}
	shapesOf := map[string][]pace.Bucket{}
	pickFor := func(k string) []pace.Bucket {
		shapes := pick()
		if k == "slow" {
			shapes = append([]pace.Bucket{slow}, shapes[:min(len(shapes), pace.MaxShapes-1)]...)
		}
		return shapes
	}
	for _, k := range keys {
		shapesOf[k] = pickFor(k)
	}
	var m takemodel.Model
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
		if got == nil || got.Gen != want.Gen || got.Born != want.Born || got.MemoAt != want.MemoAt || got.MemoReserved != want.MemoReserved ||
			got.MemoGen != want.MemoGen || !slices.Equal(got.TATs, want.TATs) {
			t.Fatalf("seed %d step %d at %d: after %s key %s stored %+v; reference %+v", seed, step, at, what, k, got, *want)
		}
	}
	take := func(step int, k string, shapes []pace.Bucket, g pace.Grant, what string) {
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

	for step := range steps {
		advance(takeStep(r))
		if r.IntN(20) == 0 {
			k := keys[r.IntN(len(keys))]
			shapesOf[k] = pickFor(k) // a key's limits change
		}
		switch op := r.IntN(10); {
		case op < 4:
			k := keys[r.IntN(len(keys))]
			g, err := s.Take(ctx, k, shapesOf[k])
			if err != nil {
				t.Fatalf("seed %d step %d: Take(%s): %v", seed, step, k, err)
			}
			take(step, k, shapesOf[k], g, "Take("+k+")")
			check(step, "Take("+k+")", k)
		case op < 6:
			// TakeMany of 1 to 5 keys, repeats included, with the shapes
			// of the first.
			batch := make([]string, 1+r.IntN(5))
			for i := range batch {
				batch[i] = keys[r.IntN(len(keys))]
			}
			shapes := shapesOf[batch[0]]
			out := make([]pace.Grant, len(batch))
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
			if err := s.Refund(ctx, h.key, h.shapes, h.r); err != nil {
				t.Fatalf("seed %d step %d: Refund(%s): %v", seed, step, h.key, err)
			}
			intact := m.Get(h.key, now()) != nil && m.Get(h.key, now()).Gen == h.r.Gen
			what := m.Refund(h.key, h.shapes, h.r, now())
			seen["refund: "+what]++
			if !intact && what != "absent" && what != "older" && what != "copy" && what != "nothing" {
				seen["refund not intact, gave"]++
			}
			check(step, fmt.Sprintf("Refund(%s, %+v)", h.key, h.r), h.key)
		}
	}
	return seen
}

// requireSeen fails the test unless the scenario reached every situation
// that makes it mean something.
func requireSeen(t *testing.T, seen map[string]int, want ...string) {
	t.Helper()
	t.Logf("situations reached: %v", seen)
	for _, w := range want {
		if seen[w] == 0 {
			t.Errorf("the scenario never reached %q; it proves less than it claims", w)
		}
	}
}

// takeSituations are what every Take scenario must reach.
var takeSituations = []string{"taken", "refused", "refused by one shape while another fits", "TakeMany",
	"refund: exact", "refund: reordered", "refund: copy", "refund: absent", "refund: older", "refund: deleted", "refund: nothing",
	"refund not intact, gave"}

// TestTakeMatchesReference runs the Take scenario against the Lua scripts on
// the test server, with the clock given to the scripts by the test.
func TestTakeMatchesReference(t *testing.T) {
	clock := newFakeClock()
	s, c := newTestStore(t, withClock(clock.Now))
	seed := testSeed(t)
	seen := takeScenario(t, s, seed, 2000,
		func() time.Duration { return time.Duration(clock.now.UnixNano()) },
		func(d time.Duration) { clock.now = clock.now.Add(d) },
		func(k string) *takemodel.State {
			key := s.keys.key(k, nsTake)
			st := storedTake(t, c, key)
			if st != nil {
				if got, want := expiryMillis(t, c, key), ceilUnixMillis(time.Unix(0, int64(st.Last()))); got != want {
					t.Fatalf("key %s expires at %d ms; want its latest arrival time, %d ms", k, got, want)
				}
			}
			return st
		})
	requireSeen(t, seen, append(takeSituations, "refused, wait of 2^53 ns or more")...)
}
