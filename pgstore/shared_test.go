package pgstore

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/ratepace/pace/internal/sharedtest"
	"github.com/ratepace/pace/storetest"
)

// sharedPools are the pools sharedBackend opened, by namespace, for Calls.
var sharedPools sync.Map // string → *pgxpool.Pool

// sharedBackend is a sharedtest.Backend on PostgreSQL: config is the
// server's URL; each replica opens a pool of its own; the namespace is the
// store's schema. Function calls are tracked (track_functions), so that
// Calls counts the takes the server made.
func sharedBackend() sharedtest.Backend {
	return sharedtest.Backend{
		Processes: true,
		Open: func(t testing.TB, config, ns string) storetest.TakeStore {
			cfg, err := pgxpool.ParseConfig(config)
			if err != nil {
				t.Fatal(err)
			}
			cfg.MaxConns = 8
			cfg.ConnConfig.ConnectTimeout = time.Second
			cfg.ConnConfig.RuntimeParams["track_functions"] = "all"
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			if !sharedtest.InReplica() {
				t.Cleanup(func() {
					if _, err := pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{ns}.Sanitize()+" CASCADE"); err != nil {
						t.Errorf("dropping schema %s: %v", ns, err)
					}
				})
			}
			s, err := New(ctx, pool, WithSchema(ns))
			if err != nil {
				t.Fatal(err)
			}
			sharedPools.Store(ns, pool)
			return s
		},
		Calls: func(t testing.TB, _, ns string) int64 {
			v, ok := sharedPools.Load(ns)
			if !ok {
				t.Fatalf("no pool for %s", ns)
			}
			pool := v.(*pgxpool.Pool)
			ctx := context.Background()
			// Each connection's counts reach the server's statistics when
			// it goes idle after pg_stat_force_next_flush.
			for _, c := range pool.AcquireAllIdle(ctx) {
				_, err := c.Exec(ctx, "SELECT pg_stat_force_next_flush()")
				c.Release()
				if err != nil {
					t.Fatal(err)
				}
			}
			c, err := pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Release()
			if _, err := c.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
				t.Fatal(err)
			}
			var n int64
			err = c.QueryRow(ctx, "SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions WHERE schemaname = $1 AND funcname = 'take_all'", ns).Scan(&n)
			if err != nil {
				t.Fatal(err)
			}
			return n
		},
	}
}

// TestShared runs the scenarios of Shared (internal/sharedtest) on the test
// server, each replica an OS process of its own: two replicas of 16
// goroutines on one key, the forger, a key under 5/s and 20/min.
func TestShared(t *testing.T) {
	b := sharedBackend()
	b.Setup = func(t *testing.T) string {
		newPool(t, 1) // skips, or fails under CI, without a server
		return testURL()
	}
	sharedtest.Run(t, b)
}

// TestSharedLocalTier: 100,000 refusals on one key make a handful of takes,
// counted by the server (pg_stat_user_functions: take_all, which TakeMany
// calls once per key too).
func TestSharedLocalTier(t *testing.T) {
	b := sharedBackend()
	newPool(t, 1)
	sharedtest.LocalTier(t, b, testURL())
}

// TestSharedFallback kills a PostgreSQL server of the test's own under load
// and restarts it: decisions go on at the fallback's pace, with no error,
// and go back to the store.
func TestSharedFallback(t *testing.T) {
	if testing.Short() {
		t.Skip("starts its own PostgreSQL cluster; skipped with -short")
	}
	c := newCluster(t)
	c.start()
	sharedtest.Fallback(t, sharedBackend(), c.url(), c.kill, c.start)
}
