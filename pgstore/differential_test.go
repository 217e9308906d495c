package pgstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/ratepace/pace"
	"github.com/ratepace/pace/driver"
)

// The differential tests run random operation sequences through the SQL
// functions (on a fake clock passed as p_now) and through pace's Go
// arithmetic, and require identical decisions and identical stored states
// after every step.
//
// The Go reference is the pure functions (driver.Shape.Take, pace.AdmitBurst,
// pace.ReleaseBurst, pace.RefreshBurst) plus the one rule the store adds: a
// state that is indistinguishable from an absent one (a bucket whose TAT is
// not after now, a burst slot whose ReclaimAt is not after now) is absent.

// burstRow is a stored burst slot; ok is false when the row is absent.
type burstRow struct {
	ok                                 bool
	live, remaining, assessed, expires int64
	sustained, budget, reclaim         int64
}

func readBurst(t *testing.T, s *Store, schema, key string) burstRow {
	t.Helper()
	var r burstRow
	err := s.pool.QueryRow(context.Background(),
		"SELECT live, remaining, assessed, expires, sustained, budget, reclaim FROM "+pgx.Identifier{schema, "bursts"}.Sanitize()+" WHERE key = $1",
		digest(key)).Scan(&r.live, &r.remaining, &r.assessed, &r.expires, &r.sustained, &r.budget, &r.reclaim)
	if errors.Is(err, pgx.ErrNoRows) {
		return burstRow{}
	}
	if err != nil {
		t.Fatal(err)
	}
	r.ok = true
	return r
}

func modelRow(st *pace.BurstSlotState) burstRow {
	if st == nil {
		return burstRow{}
	}
	return burstRow{
		ok: true, live: st.Count, remaining: int64(st.BurstRemaining), assessed: st.LastAssessed.UnixNano(),
		expires: st.Expires.UnixNano(), sustained: st.Sustained, budget: int64(st.BurstBudget), reclaim: st.ReclaimAt().UnixNano(),
	}
}

// burstModel is the Go reference for burst slots.
type burstModel map[string]*pace.BurstSlotState

// get returns the state at k, or nil when it is absent at now.
func (m burstModel) get(k string, now time.Time) *pace.BurstSlotState {
	st := m[k]
	if st != nil && !st.ReclaimAt().After(now) {
		delete(m, k)
		return nil
	}
	return st
}

// put stores st at k, unless it is indistinguishable from absent at now.
func (m burstModel) put(k string, st *pace.BurstSlotState, now time.Time) {
	if !st.ReclaimAt().After(now) {
		delete(m, k)
		return
	}
	m[k] = st
}

// burstShape is one key's AcquireSlotBurst arguments.
type burstShape struct {
	sustained, ceiling int64
	budget, ttl        time.Duration
}

func randomBurstShape(r *rand.Rand) burstShape {
	sustained := 1 + r.Int64N(4)
	budgets := []time.Duration{0, 1, 7, time.Duration(r.Int64N(int64(time.Hour))), time.Hour, time.Hour + 7,
		time.Duration(r.Int64N(int64(10 * time.Minute))), time.Duration(r.Int64N(int64(2 * time.Second))),
		100_000 * time.Hour} // the last saturates the refill
	return burstShape{
		sustained: sustained,
		ceiling:   sustained + r.Int64N(sustained+1),
		budget:    budgets[r.IntN(len(budgets))],
		ttl:       time.Millisecond + time.Duration(r.Int64N(int64(20*time.Minute))),
	}
}

// randomStep returns how far the fake clock moves before the next operation:
// often not at all or by nanoseconds (to exercise floor), sometimes by
// minutes or hours (expiry, refill), and, when back is set, sometimes
// backwards (a clock that was stepped back).
func randomStep(r *rand.Rand, back bool) time.Duration {
	switch n := r.IntN(20); {
	case n < 3:
		return 0
	case n < 6:
		return time.Duration(1 + r.Int64N(1000))
	case n < 11:
		return time.Duration(r.Int64N(int64(5 * time.Second)))
	case n < 16:
		return time.Duration(r.Int64N(int64(10 * time.Minute)))
	case n < 18:
		return time.Duration(r.Int64N(int64(3 * time.Hour)))
	case n < 19 && back:
		return -time.Duration(r.Int64N(int64(time.Minute)))
	default:
		return time.Duration(r.Int64N(int64(30 * 24 * time.Hour)))
	}
}

func TestDifferentialBurst(t *testing.T) {
	for _, tc := range []struct {
		name string
		keys int
		back bool
	}{
		{"ThreeKeys", 3, false},       // the sweep runs across keys on a forward clock
		{"OneKeyClockSteps", 1, true}, // a clock that sometimes goes backwards
		{"FiveKeys", 5, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cov := map[string]int{}
			for _, seed := range seeds(t, 3) {
				differentialBurst(t, seed, tc.keys, tc.back, 250, cov)
			}
			// The sequences must have reached every corner of the model.
			for _, what := range []string{"admitted above sustained", "refused at the ceiling", "refused for budget",
				"expired with holders, debt kept", "exactly at expiry", "reclaimed"} {
				if cov[what] == 0 {
					t.Errorf("no step %s: the random sequences miss part of the model (%v)", what, cov)
				}
			}
			t.Logf("coverage: %v", cov)
		})
	}
}

func differentialBurst(t *testing.T, seed uint64, nkeys int, back bool, steps int, cov map[string]int) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, uint64(nkeys)))
	s, schema, c := newClockedStore(t, testPool(t), t0+r.Int64N(int64(time.Hour)))
	ctx := context.Background()
	model := burstModel{}
	keys := make([]string, nkeys)
	shapes := make([]burstShape, nkeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("burst-%d-%d", seed, i)
		shapes[i] = randomBurstShape(r)
	}
	i := 0
	for step := range steps {
		if r.IntN(4) == 0 { // stay on one key for a while, as a client does
			i = r.IntN(nkeys)
		}
		k := keys[i]
		c.Advance(randomStep(r, back))
		// Now and then land exactly on an edge of the key's state, where
		// a < instead of a <= would show.
		if st := model[k]; st != nil && r.IntN(6) == 0 {
			edges := []time.Time{st.Expires, st.ReclaimAt(), st.Expires.Add(-1)}
			if e := edges[r.IntN(len(edges))]; e.UnixNano() > c.Now().UnixNano() {
				c.Set(e)
			}
		}
		now := c.Now()
		if r.IntN(10) == 0 {
			shapes[i] = randomBurstShape(r)
		}
		sh := shapes[i]
		prev := model[k]
		had := prev != nil
		if had && prev.Count > 0 && !now.Before(prev.Expires) && prev.ReclaimAt().After(now) {
			cov["expired with holders, debt kept"]++
		}
		if had && now.Equal(prev.Expires) {
			cov["exactly at expiry"]++
		}
		var op string
		switch n := r.IntN(10); {
		case n < 6:
			op = fmt.Sprintf("AcquireSlotBurst(%d, %d, %d, %d)", sh.sustained, sh.ceiling, sh.budget, sh.ttl)
			ok, cur, err := s.AcquireSlotBurst(ctx, k, sh.sustained, sh.ceiling, sh.budget, sh.ttl)
			if err != nil {
				t.Fatalf("seed %d step %d: %s: %v", seed, step, op, err)
			}
			st := model.get(k, now)
			if st == nil {
				st = &pace.BurstSlotState{}
			}
			wantOK := pace.AdmitBurst(st, sh.sustained, sh.ceiling, sh.budget, sh.ttl, now)
			wantCur := st.Count
			model.put(k, st, now)
			if ok != wantOK || cur != wantCur {
				t.Fatalf("seed %d step %d key %d: %s = %v, %d; Go reference %v, %d", seed, step, i, op, ok, cur, wantOK, wantCur)
			}
			switch {
			case ok && cur > sh.sustained:
				cov["admitted above sustained"]++
			case !ok && cur >= sh.ceiling:
				cov["refused at the ceiling"]++
			case !ok:
				cov["refused for budget"]++
			}
		case n < 8:
			op = "ReleaseSlotBurst"
			if err := s.ReleaseSlotBurst(ctx, k); err != nil {
				t.Fatalf("seed %d step %d: %s: %v", seed, step, op, err)
			}
			if st := model.get(k, now); st != nil {
				pace.ReleaseBurst(st, now)
				model.put(k, st, now)
			}
		default:
			op = fmt.Sprintf("RefreshSlotBurst(%d)", sh.ttl)
			if err := s.RefreshSlotBurst(ctx, k, sh.ttl); err != nil {
				t.Fatalf("seed %d step %d: %s: %v", seed, step, op, err)
			}
			if st := model.get(k, now); st != nil {
				pace.RefreshBurst(st, sh.ttl, now)
				model.put(k, st, now)
			}
		}
		if had && model[k] == nil {
			cov["reclaimed"]++
		}
		if got, want := readBurst(t, s, schema, k), modelRow(model[k]); got != want {
			t.Fatalf("seed %d step %d key %d at %d: after %s stored %+v; Go reference %+v", seed, step, i, now.UnixNano(), op, got, want)
		}
	}
}

func TestDifferentialTokenBucket(t *testing.T) {
	for _, seed := range seeds(t, 4) {
		differentialBucket(t, seed, 3, 250)
	}
}

func randomBucket(r *rand.Rand) (capacity, rate, cost float64) {
	caps := []float64{1, 2.5, 10, 1 + r.Float64()*100}
	rates := []float64{0.5, 1, 3, 1000, r.Float64() * 50, 1e6}
	capacity = caps[r.IntN(len(caps))]
	rate = rates[r.IntN(len(rates))]
	costs := []float64{0, 1, capacity, r.Float64() * capacity}
	return capacity, rate, costs[r.IntN(len(costs))]
}

func differentialBucket(t *testing.T, seed uint64, nkeys, steps int) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 77))
	s, schema, c := newClockedStore(t, testPool(t), t0+r.Int64N(int64(time.Hour)))
	ctx := context.Background()
	model := map[string]time.Duration{}
	for step := range steps {
		switch n := r.IntN(10); {
		case n < 4:
		case n < 7:
			c.Advance(time.Duration(r.Int64N(int64(time.Millisecond))))
		case n < 9:
			c.Advance(time.Duration(r.Int64N(int64(2 * time.Second))))
		default:
			c.Advance(time.Duration(r.Int64N(int64(time.Minute))))
		}
		now := time.Duration(c.Now().UnixNano())
		i := r.IntN(nkeys)
		k := fmt.Sprintf("bucket-%d-%d", seed, i)
		capacity, rate, cost := randomBucket(r)
		b, berr := driver.NewShape(capacity, rate, cost)
		ok, wait, err := s.TokenBucket(ctx, k, capacity, rate, cost)
		if berr != nil {
			if !errors.Is(err, pace.ErrInvalidArgument) {
				t.Fatalf("seed %d step %d: TokenBucket(%v, %v, %v) = %v; NewBucket says %v", seed, step, capacity, rate, cost, err, berr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("seed %d step %d: TokenBucket(%v, %v, %v): %v", seed, step, capacity, rate, cost, err)
		}
		tat, present := model[k]
		if !present || tat <= now {
			tat = now
		}
		next, wantWait, wantOK := b.Take(tat, now)
		if wantOK {
			if next <= now {
				delete(model, k)
			} else {
				model[k] = next
			}
		}
		if ok != wantOK || wait != wantWait {
			t.Fatalf("seed %d step %d key %d: TokenBucket(%v, %v, %v) = %v, %d; Go reference %v, %d", seed, step, i, capacity, rate, cost, ok, wait, wantOK, wantWait)
		}
		var stored int64
		err = s.pool.QueryRow(ctx, "SELECT tat FROM "+pgx.Identifier{schema, "buckets"}.Sanitize()+" WHERE key = $1", digest(k)).Scan(&stored)
		want, wantPresent := model[k]
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			if wantPresent && want > now {
				t.Fatalf("seed %d step %d key %d: no stored TAT; Go reference %d", seed, step, i, want)
			}
		case err != nil:
			t.Fatal(err)
		case !wantPresent || stored != int64(want):
			t.Fatalf("seed %d step %d key %d: stored TAT %d; Go reference %d (present %v)", seed, step, i, stored, want, wantPresent)
		}
	}
}
