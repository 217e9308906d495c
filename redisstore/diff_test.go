package redisstore

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/driver"
	"github.com/ratepace/pace/internal/fakeclock"
	"github.com/redis/go-redis/v9"
)

// newFakeClock returns the test's clock, handed to the scripts through
// withClock. It starts an hour after the real time and only moves forward
// (or back a little), so that no key's expiry (set from this clock, in
// absolute milliseconds) can fire on the server's real clock during a
// test: the scripts' own view of the state is then the only thing that
// decides, and the Go reference sees the same states.
func newFakeClock() *fakeclock.Clock {
	// Round(0) strips the monotonic reading; the nanosecond remainder keeps
	// now off the microsecond grid of TIME, to exercise the nanoseconds.
	return fakeclock.New(time.Now().Add(time.Hour).Round(0).Add(123))
}

// step returns a random clock step: mostly small, sometimes hours, days or
// years (long enough to take the script's path for intervals above 2^53 ns),
// now and then a small step back, as a server clock stepped by NTP would.
func step(r *rand.Rand) time.Duration {
	switch x := r.IntN(100); {
	case x < 10:
		return 0
	case x < 30:
		return time.Duration(r.Int64N(int64(time.Millisecond)))
	case x < 60:
		return time.Duration(r.Int64N(int64(10 * time.Second)))
	case x < 80:
		return time.Duration(r.Int64N(int64(2 * time.Hour)))
	case x < 95:
		return time.Duration(r.Int64N(int64(30 * 24 * time.Hour)))
	case x < 97:
		return time.Duration(r.Int64N(1 << 58)) // up to 9 years
	default:
		return -time.Duration(r.Int64N(int64(time.Second)))
	}
}

// testSeed returns the seed of a random scenario: $PACE_SEED when set (to
// replay a failure), else a new one, logged.
func testSeed(t *testing.T) uint64 {
	t.Helper()
	if v := os.Getenv("PACE_SEED"); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("PACE_SEED=%q: %v", v, err)
		}
		return seed
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d (replay with PACE_SEED=%d)", seed, seed)
	return seed
}

// unpack decodes the little-endian doubles the scripts store, as integers.
func unpack(t *testing.T, v string, n int) []int64 {
	t.Helper()
	if len(v) != 8*n {
		t.Fatalf("stored state of %d bytes; want %d doubles", len(v), n)
	}
	out := make([]int64, n)
	for i := range out {
		f := math.Float64frombits(binary.LittleEndian.Uint64([]byte(v[8*i:])))
		if f != math.Trunc(f) || math.Abs(f) >= 1<<63 {
			t.Fatalf("stored field %d = %v; want an integer in int64 range", i, f)
		}
		out[i] = int64(f)
	}
	return out
}

// burstState decodes the burst state the script stores.
func burstState(t *testing.T, c *redis.Client, key string) (pace.BurstSlotState, bool) {
	t.Helper()
	v, err := c.Get(context.Background(), key).Result()
	if errors.Is(err, redis.Nil) {
		return pace.BurstSlotState{}, false
	}
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	n := unpack(t, v, 8)
	return pace.BurstSlotState{
		Count:          n[0],
		BurstRemaining: time.Duration(n[1]),
		LastAssessed:   time.Unix(n[2], n[3]),
		Expires:        time.Unix(n[4], n[5]),
		Sustained:      n[6],
		BurstBudget:    time.Duration(n[7]),
	}, true
}

// expiryMillis returns the absolute expiry of key in Unix milliseconds.
func expiryMillis(t *testing.T, c *redis.Client, key string) int64 {
	t.Helper()
	ms, err := c.Do(context.Background(), "PEXPIRETIME", key).Int64()
	if err != nil {
		t.Fatalf("PEXPIRETIME %s: %v", key, err)
	}
	return ms
}

// ceilUnixMillis is t in Unix milliseconds, rounded up.
func ceilUnixMillis(t time.Time) int64 {
	ms := t.Unix() * 1000
	return ms + (int64(t.Nanosecond())+999_999)/1_000_000
}

func sameState(a, b pace.BurstSlotState) bool {
	return a.Count == b.Count && a.BurstRemaining == b.BurstRemaining &&
		a.LastAssessed.Equal(b.LastAssessed) && a.Expires.Equal(b.Expires) &&
		a.Sustained == b.Sustained && a.BurstBudget == b.BurstBudget
}

// TestBurstMatchesReference runs random sequences of AcquireSlotBurst,
// ReleaseSlotBurst and RefreshSlotBurst through the Lua script and through
// pace.AdmitBurst, pace.ReleaseBurst and pace.RefreshBurst, and requires the
// same decision, the same count and the same state to the nanosecond after
// every step, with the key expiring at the state's ReclaimAt.
//
// The Go side models what the Store promises: a state whose ReclaimAt is not
// after now is absent. Budgets stay below 2^47 ns, inside the 2^53 range
// where the server's doubles hold them exactly (the documented limit); TTLs
// and clock steps reach years, so elapsed times pass 2^53 ns too.
func TestBurstMatchesReference(t *testing.T) {
	clock := newFakeClock()
	s, c := newTestStore(t, withClock(clock.Now))
	ctx := context.Background()
	seed := testSeed(t)
	r := rand.New(rand.NewPCG(seed, 0x5eed))

	keys := []string{"a", "b", "c"}
	model := map[string]*pace.BurstSlotState{}
	budgets := []time.Duration{0, 1, time.Millisecond, 90 * time.Second, time.Hour, 1<<47 - 1}
	ttl := func() time.Duration {
		switch r.IntN(4) {
		case 0:
			return 1 + time.Duration(r.Int64N(int64(time.Second)))
		case 1:
			return time.Duration(r.Int64N(int64(time.Hour))) + 1
		case 2:
			return time.Duration(r.Int64N(1<<56)) + 1 // past 2^53 ns
		}
		return time.Minute
	}

	// seen counts the situations the scenario must reach to mean anything.
	seen := map[string]int{}
	const steps = 3000
	for i := range steps {
		clock.Advance(step(r))
		now := clock.Now()
		k := keys[r.IntN(len(keys))]
		st := model[k]
		if st != nil && !now.Before(st.ReclaimAt()) {
			st = nil
			seen["reclaimed on load"]++
		}
		if st != nil && st.Count > 0 && !now.Before(st.Expires) {
			seen["holders expired"]++
		}
		var desc string
		switch op := r.IntN(10); {
		case op < 5:
			sus := 1 + r.Int64N(4)
			ceiling := sus + r.Int64N(sus+1)
			budget := budgets[r.IntN(len(budgets))]
			if r.IntN(3) == 0 {
				budget = time.Duration(r.Int64N(int64(2 * time.Hour)))
			}
			d := ttl()
			desc = "AcquireSlotBurst(" + k + ", " + strconv.FormatInt(sus, 10) + ", " + strconv.FormatInt(ceiling, 10) + ", " + budget.String() + ", " + d.String() + ")"
			if st == nil {
				st = &pace.BurstSlotState{}
			}
			wantOK := pace.AdmitBurst(st, sus, ceiling, budget, d, now)
			switch {
			case wantOK && st.Count > sus:
				seen["admitted on budget"]++
			case !wantOK && st.Count >= ceiling:
				seen["refused at ceiling"]++
			case !wantOK:
				seen["refused, budget exhausted"]++
			}
			ok, n, err := s.AcquireSlotBurst(ctx, k, sus, ceiling, budget, d)
			if err != nil || ok != wantOK || n != st.Count {
				t.Fatalf("step %d at %v: %s = %v, %d, %v; want %v, %d, nil", i, now, desc, ok, n, err, wantOK, st.Count)
			}
		case op < 8:
			desc = "ReleaseSlotBurst(" + k + ")"
			if st == nil {
				st = &pace.BurstSlotState{}
			}
			pace.ReleaseBurst(st, now)
			if err := s.ReleaseSlotBurst(ctx, k); err != nil {
				t.Fatalf("step %d: %s = %v", i, desc, err)
			}
		default:
			d := ttl()
			desc = "RefreshSlotBurst(" + k + ", " + d.String() + ")"
			if st == nil {
				st = &pace.BurstSlotState{}
			}
			pace.RefreshBurst(st, d, now)
			if err := s.RefreshSlotBurst(ctx, k, d); err != nil {
				t.Fatalf("step %d: %s = %v", i, desc, err)
			}
		}
		if !now.Before(st.ReclaimAt()) {
			st = nil // what the script deletes; a release or refresh of an absent slot lands here too
		}
		model[k] = st

		redisKey := s.keys.key(k, nsBurst)
		got, present := burstState(t, c, redisKey)
		switch {
		case present != (st != nil):
			t.Fatalf("step %d at %v: after %s the key is present=%v, want %v (model %+v, stored %+v)", i, now, desc, present, st != nil, st, got)
		case st == nil:
		case !sameState(got, *st):
			t.Fatalf("step %d at %v: after %s\n stored %+v\n want   %+v", i, now, desc, got, *st)
		case expiryMillis(t, c, redisKey) != ceilUnixMillis(st.ReclaimAt()):
			t.Fatalf("step %d: after %s the key expires at %d ms, want ReclaimAt %v = %d ms", i, desc, expiryMillis(t, c, redisKey), st.ReclaimAt(), ceilUnixMillis(st.ReclaimAt()))
		}
	}
	t.Logf("situations reached: %v", seen)
	for _, want := range []string{"reclaimed on load", "holders expired", "admitted on budget", "refused at ceiling", "refused, budget exhausted"} {
		if seen[want] == 0 {
			t.Errorf("the scenario never reached %q; it proves less than it claims", want)
		}
	}
}

// TestTokenBucketMatchesReference runs random takes, with random shapes and
// clock steps, through the Lua script and through driver.Shape.Take, and
// requires the same decision, the same wait and the same stored TAT to the
// nanosecond, with the key expiring when the bucket is full again.
func TestTokenBucketMatchesReference(t *testing.T) {
	clock := newFakeClock()
	s, c := newTestStore(t, withClock(clock.Now))
	ctx := context.Background()
	seed := testSeed(t)
	r := rand.New(rand.NewPCG(seed, 0xb0c))

	type shape struct{ capacity, rate, cost float64 }
	shapes := []shape{
		{10, 1, 1}, {10, 100, 3}, {1, 0.001, 1}, {3.5, 7, 0.25}, {100, 1e6, 0},
		{5, 1e9 / 3, 1},     // interval 3 ns: takes inside one microsecond
		{2, 1e9 / 1.5, 1.5}, // exact 2.25 ns rounded up
	}
	// Shapes so slow that a key they have used refuses every other shape for
	// years get a key of their own.
	slowShapes := []shape{
		{1e6, 0.001, 1}, // tolerance ~31 years, beyond 2^53 ns
		{2, 1e-7, 1},    // interval ~116 days: waits above 2^53 ns, returned as text
	}
	keys := []string{"x", "y"}
	tats := map[string]time.Duration{} // since the Unix epoch; absent is full
	seen := map[string]int{}
	for i := range 3000 {
		switch r.IntN(3) {
		case 0:
			clock.Advance(time.Duration(r.Int64N(int64(time.Microsecond))))
		case 1:
			clock.Advance(time.Duration(r.Int64N(int64(time.Second))))
		default:
			clock.Advance(step(r))
		}
		now := time.Duration(clock.Now().UnixNano())
		k := keys[r.IntN(len(keys))]
		sh := shapes[r.IntN(len(shapes))]
		switch r.IntN(8) {
		case 0, 1:
			sh = shape{1 + r.Float64()*50, 0.01 + r.Float64()*1000, 0}
			sh.cost = r.Float64() * sh.capacity
		case 2:
			k, sh = "slow", slowShapes[r.IntN(len(slowShapes))]
		}
		b, err := driver.NewShape(sh.capacity, sh.rate, sh.cost)
		ok, wait, gotErr := s.TokenBucket(ctx, k, sh.capacity, sh.rate, sh.cost)
		if err != nil {
			if !errors.Is(gotErr, pace.ErrInvalidArgument) {
				t.Fatalf("step %d: TokenBucket(%s, %v) = %v; want an error wrapping ErrInvalidArgument like NewBucket's %v", i, k, sh, gotErr, err)
			}
			continue
		}
		tat, stored := tats[k]
		next, wantWait, wantOK := b.Take(tat, now)
		if gotErr != nil || ok != wantOK || wait != wantWait {
			t.Fatalf("step %d: TokenBucket(%s, %v) at %d = %v, %v, %v; want %v, %v, nil (tat %d)", i, k, sh, now, ok, wait, gotErr, wantOK, wantWait, tat)
		}
		switch {
		case wantOK:
			seen["admitted"]++
		case wantWait >= 1<<53:
			seen["refused, wait of 2^53 ns or more"]++
		default:
			seen["refused"]++
		}
		if wantOK && b.Interval() > 0 {
			tats[k], stored = next, true
		}
		if !stored {
			continue
		}
		redisKey := s.keys.key(k, nsBucket)
		v, err := c.Get(ctx, redisKey).Result()
		if err != nil {
			t.Fatalf("step %d: GET %s: %v", i, redisKey, err)
		}
		f := unpack(t, v, 2)
		if got := time.Duration(f[0]*1e9 + f[1]); got != tats[k] {
			t.Fatalf("step %d: stored TAT %v = %d; want %d", i, f, got, tats[k])
		}
		if got, want := expiryMillis(t, c, redisKey), ceilUnixMillis(time.Unix(0, int64(tats[k]))); got != want {
			t.Fatalf("step %d: bucket expires at %d ms; want its TAT, %d ms", i, got, want)
		}
	}
	t.Logf("situations reached: %v", seen)
	for _, want := range []string{"admitted", "refused", "refused, wait of 2^53 ns or more"} {
		if seen[want] == 0 {
			t.Errorf("the scenario never reached %q; it proves less than it claims", want)
		}
	}
}

// TestElapsedRoundsOnce checks the script's conversion of an interval given
// as (seconds, nanoseconds) to a double against Go's float64 of the exact
// time.Duration, across the whole int64 range of nanoseconds, including the
// intervals above 146 years that the random scenarios cannot reach.
func TestElapsedRoundsOnce(t *testing.T) {
	c := testClient(t)
	ctx := context.Background()
	probe := redis.NewScript(luaElapsed + `return string.format('%.0f', elapsed(tonumber(ARGV[1]), tonumber(ARGV[2])))`)
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	check := func(d time.Duration) {
		t.Helper()
		got, err := probe.Run(ctx, c, nil, int64(d/time.Second), int64(d%time.Second)).Text()
		if err != nil {
			t.Fatal(err)
		}
		if want := strconv.FormatFloat(float64(d), 'f', 0, 64); got != want {
			t.Fatalf("elapsed(%v) = %s; want float64 %s", d, got, want)
		}
	}
	for _, d := range []time.Duration{0, 1, 1<<53 - 1, 1 << 53, 1<<53 + 1, 4e18 - 1, 4e18, 4e18 + 513, 1<<62 + 1<<9, 1<<63 - 1} {
		check(d)
	}
	for range 500 {
		check(time.Duration(r.Int64N(1<<63-4e18) + 4e18))
		check(time.Duration(r.Int64N(1 << 62)))
	}
}
