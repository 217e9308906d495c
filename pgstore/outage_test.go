package pgstore

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/ratepace/pace/internal/outagetest"
)

// untuned starts a PostgreSQL cluster of the test's own and returns a Store
// on the pool a README user writes, pgxpool.New(ctx, url), nothing tuned
// (no connect timeout but the context's), with the cluster's kill and
// restart. It skips the test with -short.
func untuned(t *testing.T) (s *Store, kill, restart func()) {
	if testing.Short() {
		t.Skip("starts its own PostgreSQL cluster; skipped with -short")
	}
	c := newCluster(t)
	c.start()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, c.url())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if s, err = New(ctx, pool); err != nil {
		t.Fatal(err)
	}
	return s, c.kill, c.start
}

// TestOutageCostsCallersNothing: a Bucket and a Slots limit behind
// WithFailurePolicy(FailOpen, 50 ms) on a PostgreSQL cluster of the test's
// own, killed and restarted (outagetest.FailurePolicy): with the server
// down the added median is at most 1 ms, and limits hold again within 3 s
// of the server's return.
func TestOutageCostsCallersNothing(t *testing.T) {
	s, kill, restart := untuned(t)
	outagetest.FailurePolicy(t, s, kill, restart)
}

// TestSharedOutageCostsCallersNothing: a quiet replica of a Shared with
// WithFallback(100 ms) on a PostgreSQL cluster of the test's own, killed
// and restarted (outagetest.Shared): at most 2% of decisions take over 5 ms
// while it is down.
func TestSharedOutageCostsCallersNothing(t *testing.T) {
	s, kill, restart := untuned(t)
	outagetest.Shared(t, s, kill, restart)
}
