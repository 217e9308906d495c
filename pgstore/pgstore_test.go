package pgstore

import (
	"bytes"
	"context"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/ratepace/pace"
	"github.com/ratepace/pace/driver"
	"github.com/ratepace/pace/internal/takemodel"
)

// t0 is the fake clock's starting instant: 2026-01-01T00:00:00Z.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()

func TestNewConcurrentIsIdempotent(t *testing.T) {
	p1, p2 := newPool(t, 4), newPool(t, 4)
	schema := testSchema(t, p1)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		pool := p1
		if i%2 == 1 {
			pool = p2
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := New(context.Background(), pool, WithSchema(schema))
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent New: %v", err)
		}
	}
	var version int
	if err := p1.QueryRow(context.Background(), "SELECT max(version) FROM "+pgx.Identifier{schema, "meta"}.Sanitize()).Scan(&version); err != nil {
		t.Fatal(err)
	}
	if version != schemaVersion {
		t.Fatalf("meta version = %d, want %d", version, schemaVersion)
	}
	if n := countRows(t, p1, schema, "meta"); n != 1 {
		t.Fatalf("meta has %d rows, want 1", n)
	}
}

// TestUpgrade checks that New upgrades a schema of an earlier version in
// place: the rows stay, the version becomes schemaVersion, the functions
// are exactly those of this version, and version 3's release and refresh
// functions, which processes of that version still call during a rolling
// upgrade, work (as the settle functions under their old names).
func TestUpgrade(t *testing.T) {
	pool := testPool(t)
	ctx := context.Background()
	s, schema := newTestStore(t, pool)
	if ok, _, err := s.TokenBucket(ctx, "k", 1, 1.0/3600, 1); !ok || err != nil {
		t.Fatalf("TokenBucket = %v, %v; want true, nil", ok, err)
	}
	quoted := pgx.Identifier{schema}.Sanitize()
	// What version 3 left: its number, and its own bodies of the four
	// functions this version keeps as wrappers of settle_slot and
	// settle_burst.
	if _, err := pool.Exec(ctx, `UPDATE `+quoted+`.meta SET version = 3;
		DROP FUNCTION `+quoted+`.release_slot(bytea, bigint);
		CREATE FUNCTION `+quoted+`.release_slot(bytea, bigint) RETURNS void LANGUAGE sql AS 'SELECT';
		DROP FUNCTION `+quoted+`.refresh_slot(bytea, bigint, bigint);
		CREATE FUNCTION `+quoted+`.refresh_slot(bytea, bigint, bigint) RETURNS void LANGUAGE sql AS 'SELECT';
		DROP FUNCTION `+quoted+`.release_burst(bytea, bigint);
		CREATE FUNCTION `+quoted+`.release_burst(bytea, bigint) RETURNS void LANGUAGE sql AS 'SELECT';
		DROP FUNCTION `+quoted+`.refresh_burst(bytea, bigint, bigint);
		CREATE FUNCTION `+quoted+`.refresh_burst(bytea, bigint, bigint) RETURNS void LANGUAGE sql AS 'SELECT';`); err != nil {
		t.Fatal(err)
	}
	s, err := New(ctx, pool, WithSchema(schema))
	if err != nil {
		t.Fatalf("New over version 3: %v", err)
	}
	var version int
	if err := pool.QueryRow(ctx, `SELECT max(version) FROM `+quoted+`.meta HAVING count(*) = 1`).Scan(&version); err != nil || version != schemaVersion {
		t.Errorf("meta after the upgrade: version %d, %v; want one row, %d", version, err, schemaVersion)
	}
	if bodies, want := installedBodies(t, pool, schema), functionBodies(quoted); !slices.Equal(bodies, want) {
		t.Errorf("after the upgrade: %d functions; want this version's %d", len(bodies), len(want))
	}
	if ok, _, err := s.TokenBucket(ctx, "k", 1, 1.0/3600, 1); ok || err != nil {
		t.Errorf("TokenBucket after the upgrade = %v, %v; want false, nil (the bucket emptied before it)", ok, err)
	}
	if ok, n, err := s.AcquireSlot(ctx, "v3", 2, time.Hour); !ok || n != 1 || err != nil {
		t.Fatalf("AcquireSlot after the upgrade = %v, %d, %v; want true, 1, nil", ok, n, err)
	}
	for _, call := range []string{"refresh_slot($1, 1000000000, NULL)", "release_slot($1, NULL)", "refresh_burst($1, 1000000000, NULL)", "release_burst($1, NULL)"} {
		if _, err := pool.Exec(ctx, "SELECT "+quoted+"."+call, s.rowKey("v3")); err != nil {
			t.Errorf("version 3's %s after the upgrade: %v", call, err)
		}
	}
	if n := countRows(t, pool, schema, "slots"); n != 0 {
		t.Errorf("after version 3's release_slot: %d slot rows; want 0 (the one slot released)", n)
	}
}

func TestNewOptions(t *testing.T) {
	pool := testPool(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"EmptySchema", []Option{WithSchema("")}},
		{"LongSchema", []Option{WithSchema(strings.Repeat("s", 64))}},
		{"NegativeSweep", []Option{WithSweepBatch(-1)}},
		{"NULInSchema", []Option{WithSchema("pa\x00ce")}},
		{"InvalidUTF8Schema", []Option{WithSchema("pa\xffce")}},
	} {
		if _, err := New(ctx, pool, tc.opts...); !errors.Is(err, pace.ErrInvalidArgument) {
			t.Errorf("%s: New = %v, want ErrInvalidArgument", tc.name, err)
		}
	}
	if _, err := New(ctx, nil); !errors.Is(err, pace.ErrInvalidArgument) {
		t.Errorf("New(nil pool) = %v, want ErrInvalidArgument", err)
	}
}

func persistence(t *testing.T, schema string) map[string]string {
	t.Helper()
	rows, err := testPool(t).Query(context.Background(), `SELECT c.relname, c.relpersistence::text FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = ANY($2)`, schema, tables)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for rows.Next() {
		var name, p string
		if err := rows.Scan(&name, &p); err != nil {
			t.Fatal(err)
		}
		got[name] = p
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(tables) {
		t.Fatalf("found tables %v, want %v", got, tables)
	}
	return got
}

func TestUnlogged(t *testing.T) {
	pool := testPool(t)
	ctx := context.Background()
	_, schema := newTestStore(t, pool, WithUnlogged(true))
	for name, p := range persistence(t, schema) {
		if p != "u" {
			t.Errorf("WithUnlogged(true): %s relpersistence = %q, want u", name, p)
		}
	}
	// Reopening with the default converts the tables back.
	if _, err := New(ctx, pool, WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	for name, p := range persistence(t, schema) {
		if p != "p" {
			t.Errorf("default: %s relpersistence = %q, want p", name, p)
		}
	}
}

func TestClose(t *testing.T) {
	pool := testPool(t)
	ctx := context.Background()
	s, _ := newTestStore(t, pool)
	if err := s.Set(ctx, "k", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := s.Close(ctx); err != nil {
			t.Fatalf("Close = %v, want nil (idempotent)", err)
		}
	}
	checks := map[string]error{}
	_, _, checks["TokenBucket"] = s.TokenBucket(ctx, "k", 1, 1, 1)
	_, _, checks["AcquireSlot"] = s.AcquireSlot(ctx, "k", 1, time.Second)
	_, _, checks["AcquireSlotBurst"] = s.AcquireSlotBurst(ctx, "k", 1, 2, time.Second, time.Second)
	checks["ReleaseSlot"] = s.ReleaseSlot(ctx, "k")
	checks["RefreshSlot"] = s.RefreshSlot(ctx, "k", time.Second)
	checks["ReleaseSlotBurst"] = s.ReleaseSlotBurst(ctx, "k")
	checks["RefreshSlotBurst"] = s.RefreshSlotBurst(ctx, "k", time.Second)
	_, checks["Get"] = s.Get(ctx, "k")
	checks["Set"] = s.Set(ctx, "k", nil, 0)
	checks["Delete"] = s.Delete(ctx, "k")
	_, checks["Sweep"] = s.Sweep(ctx, 1)
	// Even invalid arguments report the closed store first.
	_, _, checks["TokenBucket(invalid)"] = s.TokenBucket(ctx, "", -1, 1, 1)
	checks["RefreshSlot(invalid)"] = s.RefreshSlot(ctx, "", -1)
	for op, err := range checks {
		if !errors.Is(err, pace.ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", op, err)
		}
	}
	// The pool is the caller's and stays open.
	if err := pool.Ping(ctx); err != nil {
		t.Fatalf("pool after Close: %v", err)
	}
}

func TestInvalidArguments(t *testing.T) {
	pool := testPool(t)
	ctx := context.Background()
	s, schema := newTestStore(t, pool)
	long := strings.Repeat("k", driver.MaxKeyLen+1)
	checks := map[string]error{}
	_, _, checks["TokenBucket(NaN rate)"] = s.TokenBucket(ctx, "k", 1, math.NaN(), 1)
	_, _, checks["TokenBucket(cost>capacity)"] = s.TokenBucket(ctx, "k", 1, 1, 2)
	_, _, checks["TokenBucket(empty key)"] = s.TokenBucket(ctx, "", 1, 1, 1)
	_, _, checks["TokenBucket(huge key)"] = s.TokenBucket(ctx, long, 1, 1, 1)
	_, _, checks["TokenBucket(Inf capacity)"] = s.TokenBucket(ctx, "k", math.Inf(1), 1, 1)
	_, _, checks["AcquireSlot(limit 0)"] = s.AcquireSlot(ctx, "k", 0, time.Second)
	_, _, checks["AcquireSlot(ttl 0)"] = s.AcquireSlot(ctx, "k", 1, 0)
	_, _, checks["AcquireSlotBurst(ceiling>2x)"] = s.AcquireSlotBurst(ctx, "k", 2, 5, time.Second, time.Second)
	_, _, checks["AcquireSlotBurst(negative budget)"] = s.AcquireSlotBurst(ctx, "k", 2, 3, -1, time.Second)
	checks["ReleaseSlot(empty key)"] = s.ReleaseSlot(ctx, "")
	checks["RefreshSlot(negative ttl)"] = s.RefreshSlot(ctx, "k", -time.Second)
	checks["ReleaseSlotBurst(huge key)"] = s.ReleaseSlotBurst(ctx, long)
	checks["RefreshSlotBurst(ttl 0)"] = s.RefreshSlotBurst(ctx, "k", 0)
	_, checks["Get(empty key)"] = s.Get(ctx, "")
	checks["Set(negative ttl)"] = s.Set(ctx, "k", nil, -1)
	checks["Delete(huge key)"] = s.Delete(ctx, long)
	_, checks["Sweep(0)"] = s.Sweep(ctx, 0)
	for op, err := range checks {
		if !errors.Is(err, pace.ErrInvalidArgument) {
			t.Errorf("%s = %v, want ErrInvalidArgument", op, err)
		}
	}
	expectRows(t, pool, schema, 0, "invalid calls")
}

func TestBinaryAndLongKeys(t *testing.T) {
	pool := testPool(t)
	ctx := context.Background()
	s, _ := newTestStore(t, pool)
	keys := []string{"a", "a\x00", "\xff\xfe", strings.Repeat("\x00", 7), strings.Repeat("k", driver.MaxKeyLen), strings.Repeat("k", driver.MaxKeyLen-1) + "j"}
	for i, k := range keys {
		if err := s.Set(ctx, k, []byte{byte(i)}, 0); err != nil {
			t.Fatalf("Set(key %d): %v", i, err)
		}
	}
	for i, k := range keys {
		v, err := s.Get(ctx, k)
		if err != nil || !bytes.Equal(v, []byte{byte(i)}) {
			t.Fatalf("Get(key %d) = %v, %v; want [%d], nil", i, v, err, i)
		}
	}
}

func TestNamespacesAndDelete(t *testing.T) {
	pool := testPool(t)
	ctx := context.Background()
	s, schema := newTestStore(t, pool)
	const k = "shared"
	if ok, _, err := s.TokenBucket(ctx, k, 1, 1, 1); err != nil || !ok {
		t.Fatalf("TokenBucket = %v, %v", ok, err)
	}
	if ok, n, err := s.AcquireSlot(ctx, k, 1, time.Minute); err != nil || !ok || n != 1 {
		t.Fatalf("AcquireSlot = %v, %d, %v; want true, 1, nil", ok, n, err)
	}
	if ok, n, err := s.AcquireSlotBurst(ctx, k, 1, 1, time.Minute, time.Minute); err != nil || !ok || n != 1 {
		t.Fatalf("AcquireSlotBurst = %v, %d, %v; want true, 1, nil", ok, n, err)
	}
	if err := s.Set(ctx, k, []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	if g, err := s.Take(ctx, k, []driver.Shape{takemodel.MustBucket(t, 1, 1, 1)}); err != nil || !g.OK {
		t.Fatalf("Take = %+v, %v", g, err)
	}
	expectRows(t, pool, schema, 1, "one call of each kind")
	if t.Failed() {
		t.FailNow() // Delete below would have nothing to prove
	}
	if err := s.Delete(ctx, k); err != nil {
		t.Fatal(err)
	}
	expectRows(t, pool, schema, 0, "Delete")
	if err := s.Delete(ctx, "never-set"); err != nil {
		t.Fatalf("Delete(absent) = %v, want nil", err)
	}
	if _, err := s.Get(ctx, k); !errors.Is(err, pace.ErrNotFound) {
		t.Fatalf("Get after Delete = %v, want ErrNotFound", err)
	}
}

// TestDatabaseClock checks the production path, where time comes from the
// server: the stored TAT of a first take lies one interval after an instant
// read from the database clock during the call, and a bucket of one token
// refilled once an hour refuses the second take with a wait of at most an
// hour.
func TestDatabaseClock(t *testing.T) {
	pool := testPool(t)
	s, schema := newTestStore(t, pool)
	ctx := context.Background()
	before := databaseNow(t, pool, schema)
	const perHour = 1.0 / 3600
	if ok, _, err := s.TokenBucket(ctx, "k", 1, perHour, 1); err != nil || !ok {
		t.Fatalf("first take = %v, %v; want true", ok, err)
	}
	after := databaseNow(t, pool, schema)
	var tat int64
	if err := pool.QueryRow(ctx, "SELECT tat FROM "+pgx.Identifier{schema, "buckets"}.Sanitize()).Scan(&tat); err != nil {
		t.Fatal(err)
	}
	if at := tat - int64(time.Hour); at < before || at > after || at%1000 != 0 {
		t.Fatalf("stored TAT - 1h = %d; want a microsecond reading of the database clock in [%d, %d]", at, before, after)
	}
	ok, wait, err := s.TokenBucket(ctx, "k", 1, perHour, 1)
	if err != nil || ok || wait <= 0 || wait > time.Hour {
		t.Fatalf("second take = %v, %v, %v; want false, (0, 1h], nil", ok, wait, err)
	}
}

// TestSlotsWithClock walks a plain counter through a story on the fake clock.
func TestSlotsWithClock(t *testing.T) {
	pool := testPool(t)
	ctx := context.Background()
	s, schema, c := newClockedStore(t, pool, t0)
	acquire := func(want bool, wantN int64) {
		t.Helper()
		ok, n, err := s.AcquireSlot(ctx, "k", 2, 10*time.Second)
		if err != nil || ok != want || n != wantN {
			t.Fatalf("at %v AcquireSlot(k, 2, 10s) = %v, %d, %v; want %v, %d, nil", c.Now().Sub(time.Unix(0, t0)), ok, n, err, want, wantN)
		}
	}
	acquire(true, 1)
	acquire(true, 2)
	acquire(false, 2)
	c.Advance(9 * time.Second)
	if err := s.RefreshSlot(ctx, "k", 10*time.Second); err != nil { // now expires at 19s
		t.Fatal(err)
	}
	c.Advance(9 * time.Second) // 18s: still live
	acquire(false, 2)
	if err := s.ReleaseSlot(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	acquire(true, 2) // expires at 28s
	c.Advance(10 * time.Second)
	// Expired: a refresh does not resurrect it, and it counts as zero.
	if err := s.RefreshSlot(ctx, "k", time.Hour); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, pool, schema, "slots"); n != 0 {
		t.Fatalf("slots rows after refresh of expired counter = %d, want 0", n)
	}
	acquire(true, 1)
	for range 3 { // clamped at zero, and the last release deletes the row
		if err := s.ReleaseSlot(ctx, "k"); err != nil {
			t.Fatal(err)
		}
	}
	if n := countRows(t, pool, schema, "slots"); n != 0 {
		t.Fatalf("slots rows after releasing every holder = %d, want 0", n)
	}
	acquire(true, 1)
}

func TestValuesWithClock(t *testing.T) {
	pool := testPool(t)
	ctx := context.Background()
	s, _, c := newClockedStore(t, pool, t0)
	if err := s.Set(ctx, "ttl", []byte("a"), time.Second); err != nil {
		t.Fatal(err)
	}
	if err := s.Set(ctx, "forever", nil, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Set(ctx, "huge", []byte("h"), math.MaxInt64); err != nil {
		t.Fatalf("Set with the largest ttl: %v", err)
	}
	v, err := s.Get(ctx, "forever")
	if err != nil || v == nil || len(v) != 0 {
		t.Fatalf("Get(forever) = %#v, %v; want empty non-nil value", v, err)
	}
	c.Advance(time.Second - 1)
	if v, err := s.Get(ctx, "ttl"); err != nil || string(v) != "a" {
		t.Fatalf("Get(ttl) before expiry = %q, %v", v, err)
	}
	c.Advance(1)
	if _, err := s.Get(ctx, "ttl"); !errors.Is(err, pace.ErrNotFound) {
		t.Fatalf("Get(ttl) at expiry = %v, want ErrNotFound", err)
	}
	c.Advance(100 * 365 * 24 * time.Hour)
	for _, k := range []string{"forever", "huge"} {
		if _, err := s.Get(ctx, k); err != nil {
			t.Fatalf("Get(%s) a century later = %v", k, err)
		}
	}
}

// TestTwoReplicas races callers on two pools, standing for two processes,
// for the same slots and buckets, and counts exactly.
func TestTwoReplicas(t *testing.T) {
	p1, p2 := newPool(t, 8), newPool(t, 8)
	ctx := context.Background()
	s1, schema := newTestStore(t, p1)
	s2, err := New(ctx, p2, WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	stores := []*Store{s1, s2}
	const callers = 48
	race := func(name string, want int64, call func(s *Store) (bool, error)) {
		t.Helper()
		var admitted atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make(chan error, callers)
		for i := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				ok, err := call(stores[i%2])
				if err != nil {
					errs <- err
					return
				}
				if ok {
					admitted.Add(1)
				}
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("%s: %v", name, err)
		}
		if got := admitted.Load(); got != want {
			t.Errorf("%s: %d callers on two replicas admitted %d, want exactly %d", name, callers, got, want)
		}
	}
	race("AcquireSlot limit 7", 7, func(s *Store) (bool, error) {
		ok, _, err := s.AcquireSlot(ctx, "slot", 7, time.Minute)
		return ok, err
	})
	race("AcquireSlotBurst sustained 5 ceiling 9", 9, func(s *Store) (bool, error) {
		ok, _, err := s.AcquireSlotBurst(ctx, "burst", 5, 9, time.Hour, time.Minute)
		return ok, err
	})
	race("TokenBucket capacity 10", 10, func(s *Store) (bool, error) {
		ok, _, err := s.TokenBucket(ctx, "bucket", 10, 0.001, 1)
		return ok, err
	})
	race("TokenBucket capacity 12 cost 3", 4, func(s *Store) (bool, error) {
		ok, _, err := s.TokenBucket(ctx, "bucket3", 12, 0.001, 3)
		return ok, err
	})
	// Budget exhausted: with a zero budget nothing passes sustained.
	race("AcquireSlotBurst zero budget", 3, func(s *Store) (bool, error) {
		ok, _, err := s.AcquireSlotBurst(ctx, "nobudget", 3, 6, 0, time.Minute)
		return ok, err
	})
	var live int64
	if err := p1.QueryRow(ctx, "SELECT live FROM "+pgx.Identifier{schema, "slots"}.Sanitize()).Scan(&live); err != nil || live != 7 {
		t.Fatalf("stored slot count = %d, %v; want 7", live, err)
	}
}

// TestBoundedGrowth floods the store with distinct keys on the fake clock and
// checks that the amortised sweep keeps every table within its live rows plus
// the sweep batch.
func TestBoundedGrowth(t *testing.T) {
	pool := testPool(t)
	ctx := context.Background()
	const batch = 2
	s, schema, c := newClockedStore(t, pool, t0, WithSweepBatch(batch))
	const (
		keys = 600
		live = 20 // keys alive at any time: each lives 20 steps of 1ms
	)
	fiftyPerSecond := []driver.Shape{takemodel.MustBucket(t, 1, 50, 1)} // full again after 20ms
	maxRows := map[string]int64{}
	for i := range keys {
		k := "k" + strconv.Itoa(i)
		if _, _, err := s.TokenBucket(ctx, k, 1, 50, 1); err != nil { // full again after 20ms
			t.Fatal(err)
		}
		if _, _, err := s.AcquireSlot(ctx, k, 1, 20*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if err := s.Set(ctx, k, []byte("v"), 20*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		// A burst slot is reclaimable once its budget has refilled: hold it
		// within sustained so that happens at expiry.
		if _, _, err := s.AcquireSlotBurst(ctx, k, 1, 2, 0, 20*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if g, err := s.Take(ctx, k, fiftyPerSecond); !g.OK || err != nil {
			t.Fatalf("Take = %+v, %v", g, err)
		}
		c.Advance(time.Millisecond)
		if i%50 == 49 {
			for _, table := range tables {
				maxRows[table] = max(maxRows[table], countRows(t, pool, schema, table))
			}
		}
	}
	t.Logf("peak rows per table over %d distinct keys, %d live at a time: %v", keys, live, maxRows)
	// A row is swept at most half its horizon late (see sweep_after), so
	// the keys of the last 1.5 horizons may still have rows.
	for _, table := range tables {
		if maxRows[table] > live*3/2+batch+1 {
			t.Errorf("%s peaked at %d rows for %d live keys and a sweep batch of %d", table, maxRows[table], live, batch)
		}
	}
	// Sweep clears what is left once everything has expired.
	c.Advance(time.Hour)
	n, err := s.Sweep(ctx, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 || n > int64(len(tables))*(live*3/2+batch+1) {
		t.Errorf("Sweep deleted %d rows, want between 1 and %d", n, int64(len(tables))*(live*3/2+batch+1))
	}
	expectRows(t, pool, schema, 0, "Sweep")
}

// TestNoSweep checks that WithSweepBatch(0) really leaves dead rows for Sweep.
func TestNoSweep(t *testing.T) {
	pool := testPool(t)
	ctx := context.Background()
	s, schema, c := newClockedStore(t, pool, t0, WithSweepBatch(0))
	for i := range 10 {
		if _, _, err := s.TokenBucket(ctx, string(rune('a'+i)), 1, 1000, 1); err != nil {
			t.Fatal(err)
		}
		c.Advance(time.Second)
	}
	if n := countRows(t, pool, schema, "buckets"); n != 10 {
		t.Fatalf("buckets rows without sweep = %d, want 10", n)
	}
	if n, err := s.Sweep(ctx, 4); err != nil || n != 4 {
		t.Fatalf("Sweep(4) = %d, %v; want 4, nil", n, err)
	}
	if n := countRows(t, pool, schema, "buckets"); n != 6 {
		t.Fatalf("buckets rows after Sweep(4) = %d, want 6", n)
	}
}

// TestContextCanceled checks that a cancelled context is honoured.
func TestContextCanceled(t *testing.T) {
	s, _ := newTestStore(t, testPool(t))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := s.TokenBucket(ctx, "k", 1, 1, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("TokenBucket(cancelled ctx) = %v, want context.Canceled", err)
	}
}

// TestAsynchronousCommit checks that by default a call turns synchronous
// commit off for its own transaction only, and that WithSynchronousCommit
// leaves the server's setting alone.
func TestAsynchronousCommit(t *testing.T) {
	pool := newPool(t, 1) // one connection: every statement below shares it
	ctx := context.Background()
	for _, tc := range []struct {
		opts []Option
		want string
	}{{nil, "off"}, {[]Option{WithSynchronousCommit(true)}, "on"}} {
		s, _ := newTestStore(t, pool, tc.opts...)
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var allowed bool
		var wait int64
		if err := tx.QueryRow(ctx, s.q.take, digest("k"), int64(time.Second), int64(time.Second), nil, int32(1)).Scan(&allowed, &wait); err != nil || !allowed {
			t.Fatalf("take = %v, %v", allowed, err)
		}
		var got string
		if err := tx.QueryRow(ctx, "SHOW synchronous_commit").Scan(&got); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("synchronous_commit inside the call's transaction = %q, want %q", got, tc.want)
		}
		if err := pool.QueryRow(ctx, "SHOW synchronous_commit").Scan(&got); err != nil || got != "on" {
			t.Errorf("synchronous_commit after the transaction = %q, %v; want the session's on", got, err)
		}
	}
}

// TestHotKeyKeepsIndexesSmall pins the point of sweep_at: a key in steady use
// is updated in place (HOT updates, no new index entries), so 3000 decisions
// on one key leave its table and indexes at a page or two instead of growing
// with every update until the next VACUUM (a 7-page index and a 6-page heap
// when the swept column was the TAT itself).
func TestHotKeyKeepsIndexesSmall(t *testing.T) {
	pool := testPool(t)
	ctx := context.Background()
	s, schema, c := newClockedStore(t, pool, t0)
	for range 3000 {
		if _, _, err := s.TokenBucket(ctx, "hot", 100, 100, 1); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.AcquireSlot(ctx, "hot", 1<<40, time.Minute); err != nil {
			t.Fatal(err)
		}
		c.Advance(5 * time.Millisecond)
	}
	for _, rel := range []string{"buckets", "buckets_sweep_at", "buckets_pkey", "slots", "slots_sweep_at", "slots_pkey"} {
		var size int64
		if err := pool.QueryRow(ctx, "SELECT pg_relation_size($1::regclass)", pgx.Identifier{schema, rel}.Sanitize()).Scan(&size); err != nil {
			t.Fatal(err)
		}
		if size > 3*8192 {
			t.Errorf("%s is %d bytes after 3000 updates of one row; want at most 3 pages (are updates still HOT?)", rel, size)
		}
	}
}
