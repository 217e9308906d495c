package redisstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/redisstore"
	"github.com/redis/go-redis/v9"
)

// A Store shared by every replica of a service, refusing (fail-closed) when
// Redis does not answer within 50 ms. The example needs a Redis server, so it
// is compiled but not run.
func ExampleNew() {
	client := redis.NewClient(&redis.Options{
		Addr:                  "127.0.0.1:6379",
		ContextTimeoutEnabled: true, // let a context deadline bound every call
	})
	defer client.Close()

	rs, err := redisstore.New(client)
	if err != nil {
		panic(err)
	}
	store, err := pace.WithFailurePolicy(rs, pace.FailClosed, 50*time.Millisecond)
	if err != nil {
		panic(err)
	}
	defer store.Close(context.Background())

	// 10 requests of burst, 2 per second sustained, per client.
	ok, retryAfter, err := store.TokenBucket(context.Background(), "client:42", 10, 2, 1)
	switch {
	case err != nil:
		fmt.Println("error:", err)
	case !ok:
		fmt.Println("too many requests; retry after", retryAfter)
	default:
		fmt.Println("allowed")
	}
}

// A Cluster client works as it is: the keys of one user key share a hash
// slot, so every script is valid on the Cluster.
func ExampleNew_cluster() {
	client := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 []string{"redis-1:6379", "redis-2:6379", "redis-3:6379"},
		ContextTimeoutEnabled: true,
	})
	defer client.Close()
	store, err := redisstore.New(client, redisstore.WithPrefix("api:"))
	if err != nil {
		panic(err)
	}
	defer store.Close(context.Background())
}
