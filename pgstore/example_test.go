package pgstore_test

import (
	"context"
	"log"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/ratepace/pace"
	"github.com/ratepace/pace/pgstore"
)

// Replicas that open a Store on the same database and schema share every
// bucket and counter. The example needs a server, so it is compiled but not
// run by go test.
func ExampleNew() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@127.0.0.1:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close() // after the store: Close does not close the pool

	store, err := pgstore.New(ctx, pool, pgstore.WithSchema("ratelimit"))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close(ctx)

	// Bound every decision, and decide explicitly what an outage means.
	limiter, err := pace.WithFailurePolicy(store, pace.FailClosed, 50*time.Millisecond)
	if err != nil {
		log.Fatal(err)
	}
	ok, retryAfter, err := limiter.TokenBucket(ctx, "client:42", 10, 1, 1)
	if err != nil {
		log.Fatal(err)
	}
	if !ok {
		log.Printf("limited: retry in %v", retryAfter)
	}
}
