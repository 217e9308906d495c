package pgstore

import (
	"context"
	"testing"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/internal/fakeclock"
	"github.com/ratepace/pace/storetest"
)

// TestContract runs the pace.Store contract suite against PostgreSQL, on the
// database clock (the production path: subtests in parallel, real waits).
func TestContract(t *testing.T) {
	pool := testPool(t)
	schema := testSchema(t, pool)
	if _, err := New(context.Background(), pool, WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	storetest.Run(t, func(t *testing.T) pace.Store {
		s, err := New(context.Background(), pool, WithSchema(schema))
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		return s
	})
	storetest.RunTaker(t, func(t *testing.T) storetest.TakeStore {
		s, err := New(context.Background(), pool, WithSchema(schema))
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		return s
	})
}

// TestContractFakeClock runs the suite again with every function's p_now
// driven by a fake clock, so that expiries and refills are exact and the
// suite never sleeps.
func TestContractFakeClock(t *testing.T) {
	pool := testPool(t)
	schema := testSchema(t, pool)
	if _, err := New(context.Background(), pool, WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	c := fakeclock.New(time.Unix(0, t0))
	storetest.Run(t, func(t *testing.T) pace.Store {
		s, err := New(context.Background(), pool, WithSchema(schema))
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		return withClock(s, c)
	}, storetest.WithAdvance(c.Advance))
	storetest.RunTaker(t, func(t *testing.T) storetest.TakeStore {
		s, err := New(context.Background(), pool, WithSchema(schema))
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		return withClock(s, c)
	}, storetest.WithAdvance(c.Advance))
}
