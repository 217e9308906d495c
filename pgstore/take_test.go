package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/ratepace/pace"
	"github.com/ratepace/pace/driver"
	"github.com/ratepace/pace/internal/takemodel"
)

// readTake returns the stored state of key in the takes table, or nil.
func readTake(t *testing.T, s *Store, schema, key string) *takemodel.State {
	t.Helper()
	var st takemodel.State
	var tats []int64
	var gen, born, memoAt, memoReserved, memoGen int64
	err := s.pool.QueryRow(context.Background(),
		"SELECT tats, gen, born, memo_at, memo_reserved, memo_gen FROM "+pgx.Identifier{schema, "takes"}.Sanitize()+" WHERE key = $1",
		digest(key)).Scan(&tats, &gen, &born, &memoAt, &memoReserved, &memoGen)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	st.Gen, st.Born, st.MemoGen = uint64(gen), uint64(born), uint64(memoGen)
	st.MemoAt, st.MemoReserved = time.Duration(memoAt), time.Duration(memoReserved)
	for _, v := range tats {
		st.TATs = append(st.TATs, time.Duration(v))
	}
	return &st
}

// TestDifferentialTake runs the Take scenario (random takes and TakeMany,
// refunds of any receipt in any order, some twice, some after their key was
// deleted, clock steps) through the SQL functions on a fake clock and
// through the Go reference, requiring the same grants and stored states.
// The clock only moves forward: the sweep deletes rows that are full at a
// later now, which a clock stepped back would revive in the reference.
func TestDifferentialTake(t *testing.T) {
	for _, seed := range seeds(t, 2) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			s, schema, c := newClockedStore(t, testPool(t), t0)
			seen := takemodel.Scenario(t, s, seed, 1200, false, func() time.Duration { return time.Duration(c.Now().UnixNano()) }, c.Advance,
				func(k string) *takemodel.State { return readTake(t, s, schema, k) })
			takemodel.RequireSeen(t, seen, takemodel.Situations...)
		})
	}
}

// TestTakeInvalidArguments checks that out-of-range arguments return an
// error wrapping ErrInvalidArgument and write nothing.
func TestTakeInvalidArguments(t *testing.T) {
	pool := testPool(t)
	s, schema := newTestStore(t, pool)
	ctx := context.Background()
	ok := takemodel.MustBucket(t, 5, 5, 1)
	for name, err := range takemodel.InvalidCalls(s) {
		if !errors.Is(err, pace.ErrInvalidArgument) {
			t.Errorf("%s: %v; want an error wrapping ErrInvalidArgument", name, err)
		}
	}
	if n := countRows(t, pool, schema, "takes"); n != 0 {
		t.Errorf("invalid calls wrote %d rows; want none", n)
	}
	if err := s.TakeMany(ctx, nil, []driver.Shape{ok}, nil); err != nil {
		t.Errorf("TakeMany of no keys = %v; want nil", err)
	}
	if err := s.Refund(ctx, "k", []driver.Shape{ok}, driver.Receipt{At: 1, Gen: 1 << 63}); err != nil {
		t.Errorf("Refund of a receipt whose Gen no bigint holds = %v; want nil (nothing to give back)", err)
	}
}

// TestTakeDatabaseClock checks a take at the database clock: the receipt is
// dated within clock_timestamp() around the call, reserves one interval past
// it, reports what is left and when the key is full, and the key is stored
// as its SHA-256 digest, never in the clear.
func TestTakeDatabaseClock(t *testing.T) {
	pool := testPool(t)
	s, schema := newTestStore(t, pool)
	ctx := context.Background()
	perSecond, perMinute := takemodel.MustBucket(t, 5, 5, 1), takemodel.MustBucket(t, 20, 20.0/60, 1)
	const id = "client-42@203.0.113.7"
	before := databaseNow(t, pool, schema)
	g, err := s.Take(ctx, id, []driver.Shape{perSecond, perMinute})
	after := databaseNow(t, pool, schema)
	if err != nil || !g.OK || int64(g.Receipt.At) < before || int64(g.Receipt.At) > after {
		t.Fatalf("Take = %+v, %v; want OK, dated within [%d, %d]", g, err, before, after)
	}
	want := driver.Grant{OK: true, Remaining: 4, Reset: 3 * time.Second, Receipt: driver.Receipt{
		At: g.Receipt.At, Gen: g.Receipt.Gen,
		Reserved: [driver.MaxShapes]time.Duration{g.Receipt.At + 200*time.Millisecond, g.Receipt.At + 3*time.Second},
	}}
	if g != want {
		t.Errorf("Take of 5/s and 20/min on a new key = %+v; want %+v", g, want)
	}
	var stored []byte
	if err := pool.QueryRow(ctx, "SELECT key FROM "+pgx.Identifier{schema, "takes"}.Sanitize()).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if string(stored) != string(digest(id)) || strings.Contains(string(stored), "client-42") {
		t.Errorf("stored key %x; want the SHA-256 digest of the client id", stored)
	}
}

// TestTakeManyDeadlockFree races calls of TakeMany over the same keys in
// opposite orders (and Refunds) from two pools: take_many locks keys in one
// order, so none of them fails with a deadlock, and each key admits exactly
// its capacity.
func TestTakeManyDeadlockFree(t *testing.T) {
	p1, p2 := newPool(t, 8), newPool(t, 8)
	s1, schema := newTestStore(t, p1, WithSweepBatch(8))
	s2, err := New(context.Background(), p2, WithSchema(schema), WithSweepBatch(8))
	if err != nil {
		t.Fatal(err)
	}
	shapes := []driver.Shape{takemodel.MustBucket(t, 40, 40.0/3600, 1)}
	keys := make([]string, 30)
	for i := range keys {
		keys[i] = fmt.Sprint("k", i)
	}
	reversed := make([]string, len(keys))
	for i, k := range keys {
		reversed[len(keys)-1-i] = k
	}
	var mu sync.Mutex
	admitted := map[string]int{}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, order := s1, keys
			if g%2 == 1 {
				s, order = s2, reversed
			}
			for range 5 {
				out := make([]driver.Grant, len(order))
				if err := s.TakeMany(context.Background(), order, shapes, out); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				for i, gr := range out {
					if gr.OK {
						admitted[order[i]]++
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("TakeMany: %v", err)
	}
	for _, k := range keys {
		if admitted[k] != 40 {
			t.Errorf("key %s admitted %d of 80 takes; want its capacity, 40", k, admitted[k])
		}
	}
}

// TestRefillWindowFromGo checks that the burst refill window in the SQL is
// pace.BurstRefillWindow as New writes it in, not a number of its own.
func TestRefillWindowFromGo(t *testing.T) {
	pool := testPool(t)
	_, schema := newTestStore(t, pool)
	var src string
	err := pool.QueryRow(context.Background(), `SELECT string_agg(p.prosrc, ' ') FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = $1 AND p.proname IN ('burst_charge', 'burst_reclaim')`, schema).Scan(&src)
	if err != nil {
		t.Fatal(err)
	}
	window := fmt.Sprint(int64(pace.BurstRefillWindow))
	if strings.Count(src, window) != 2 || strings.Contains(src, "@") {
		t.Errorf("burst_charge and burst_reclaim hold %q %d times (want 2) in:\n%s", window, strings.Count(src, window), src)
	}
}

// TestTakeAlternatesShapesAtExtremes drives one key through takes of one
// shape and of several, TakeMany of the key repeated, and refunds of either,
// on the shapes at the edges of what driver.NewShape accepts, from instants
// near 2^53 ns, t0 and in 2116, and requires the grants and stored states
// of the Go arithmetic (takemodel) to the nanosecond. The clock only moves
// forward, as in TestDifferentialTake.
func TestTakeAlternatesShapesAtExtremes(t *testing.T) {
	starts := []int64{1<<53 - 3, t0, 1<<62 + 999_999_999}
	seen := map[string]int{}
	for i, shapes := range takemodel.ExtremeShapes(t) {
		for j, start := range starts {
			t.Run(fmt.Sprintf("shapes%d/start%d", i, j), func(t *testing.T) {
				s, schema, c := newClockedStore(t, testPool(t), start)
				for what, n := range takemodel.Alternate(t, s, uint64(10*i+j), 100, shapes, false,
					func() time.Duration { return time.Duration(c.Now().UnixNano()) }, c.Advance,
					func(k string) *takemodel.State { return readTake(t, s, schema, k) }) {
					seen[what] += n
				}
			})
		}
	}
	takemodel.RequireSeen(t, seen, "taken, 1 of 3 shapes", "taken, 3 of 3 shapes", "refused, 1 of 3 shapes", "refused, 3 of 3 shapes",
		"taken, 1 of 2 shapes", "taken, 2 of 2 shapes", "refund of 1 shapes: exact", "refund of 3 shapes: exact",
		"refund of 1 shapes: reordered", "refund of 3 shapes: reordered")
}
