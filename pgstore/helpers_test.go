package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ratepace/pace/internal/fakeclock"
)

// defaultURL is where the tests look for PostgreSQL unless PACE_POSTGRES_URL
// says otherwise.
const defaultURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

func testURL() string {
	if u := os.Getenv("PACE_POSTGRES_URL"); u != "" {
		return u
	}
	return defaultURL
}

// unavailable skips the test, or fails it under CI, where a missing server
// is a broken setup rather than a developer's machine.
func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// howToRun is the message of a test skipped (or, under CI, failed) for want
// of a server.
const howToRun = "PostgreSQL not reachable at %s: %v\n" +
	"These tests need a PostgreSQL server: start one on 127.0.0.1:5432 (user postgres, trust auth, database test),\n" +
	"or set PACE_POSTGRES_URL=postgres://USER@HOST:PORT/DB?sslmode=disable (the role needs CREATE on the database).\n" +
	"Under CI (CI non-empty) a missing server fails the tests instead of skipping them."

var (
	poolsMu sync.Mutex
	pools   []*pgxpool.Pool
	skipErr error
	tried   bool
)

// newPool returns a new pool on the test server, closed when the test binary
// exits, or skips the test (fails it under CI) when the server is not
// reachable. Each call returns a distinct pool, so two calls stand for two
// processes.
func newPool(t testing.TB, maxConns int32) *pgxpool.Pool {
	t.Helper()
	poolsMu.Lock()
	defer poolsMu.Unlock()
	if tried && skipErr != nil {
		unavailable(t, howToRun, testURL(), skipErr)
	}
	cfg, err := pgxpool.ParseConfig(testURL())
	if err != nil {
		t.Fatalf("PACE_POSTGRES_URL: %v", err)
	}
	cfg.MaxConns = maxConns
	cfg.ConnConfig.ConnectTimeout = 3 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = pool.Ping(ctx)
	}
	tried = true
	if err != nil {
		skipErr = err
		if pool != nil {
			pool.Close()
		}
		unavailable(t, howToRun, testURL(), err)
	}
	pools = append(pools, pool)
	return pool
}

var (
	sharedMu   sync.Mutex
	sharedPool *pgxpool.Pool
)

// testPool returns the pool most tests share.
func testPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if sharedPool == nil {
		sharedPool = newPool(t, 20)
	}
	return sharedPool
}

func TestMain(m *testing.M) {
	code := m.Run()
	poolsMu.Lock()
	for _, p := range pools {
		p.Close()
	}
	poolsMu.Unlock()
	os.Exit(code)
}

// testSchema returns a fresh random schema name, dropped with everything in
// it when the test ends, so that tests and packages running at the same time
// never share rows.
func testSchema(t testing.TB, pool *pgxpool.Pool) string {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	name := "pace_test_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("dropping test schema %s: %v", name, err)
		}
	})
	return name
}

// newTestStore returns a Store in a fresh schema on pool.
func newTestStore(t testing.TB, pool *pgxpool.Pool, opts ...Option) (*Store, string) {
	t.Helper()
	schema := testSchema(t, pool)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := New(ctx, pool, append([]Option{WithSchema(schema)}, opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s, schema
}

// withClock makes s read c, in nanoseconds since the Unix epoch, passed
// to the SQL functions as p_now in place of the database clock.
func withClock(s *Store, c *fakeclock.Clock) *Store {
	s.now = func() int64 { return c.Now().UnixNano() }
	return s
}

// newClockedStore returns a Store in a fresh schema on pool whose clock is
// the fake clock it also returns, set to start (nanoseconds since the Unix
// epoch).
func newClockedStore(t testing.TB, pool *pgxpool.Pool, start int64, opts ...Option) (*Store, string, *fakeclock.Clock) {
	t.Helper()
	c := fakeclock.New(time.Unix(0, start))
	s, schema := newTestStore(t, pool, opts...)
	return withClock(s, c), schema, c
}

// databaseNow reads the clock of the database behind pool, through the
// now_ns function of schema, in nanoseconds since the Unix epoch.
func databaseNow(t testing.TB, pool *pgxpool.Pool, schema string) int64 {
	t.Helper()
	var ns int64
	if err := pool.QueryRow(context.Background(), "SELECT "+pgx.Identifier{schema}.Sanitize()+".now_ns()").Scan(&ns); err != nil {
		t.Fatal(err)
	}
	return ns
}

// expectRows reports an error for each of the store's tables that does not
// hold want rows after what the test did (after, for the message).
func expectRows(t testing.TB, pool *pgxpool.Pool, schema string, want int64, after string) {
	t.Helper()
	for _, table := range tables {
		if n := countRows(t, pool, schema, table); n != want {
			t.Errorf("%s has %d rows after %s, want %d", table, n, after, want)
		}
	}
}

// countRows returns the number of rows in one of the store's tables.
func countRows(t testing.TB, pool *pgxpool.Pool, schema, table string) int64 {
	t.Helper()
	var n int64
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM "+pgx.Identifier{schema, table}.Sanitize()).Scan(&n); err != nil {
		t.Fatalf("counting %s: %v", table, err)
	}
	return n
}

// seeds returns the seeds of a differential test's n random sequences:
// 1 to n, or, with $PACE_SEED set, n seeds from it (to search more
// sequences, or replay one).
func seeds(t testing.TB, n uint64) []uint64 {
	t.Helper()
	first := uint64(1)
	if v := os.Getenv("PACE_SEED"); v != "" {
		var err error
		if first, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("PACE_SEED=%q: %v", v, err)
		}
	}
	out := make([]uint64, n)
	for i := range out {
		out[i] = first + uint64(i)
	}
	return out
}
