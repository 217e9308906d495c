package redisstore

import (
	"testing"

	"github.com/ratepace/pace/internal/outagetest"
	"github.com/redis/go-redis/v9"
)

// untuned returns a Store on the client a README user writes,
// redis.NewClient(&redis.Options{Addr: addr}), nothing tuned (go-redis's 5
// dial attempts 100 ms apart, 3 retries, 3 s reads, contexts not bounding
// reads), closed when the test ends.
func untuned(t *testing.T, addr string) *Store {
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	return mustNew(t, c)
}

// TestOutageCostsCallersNothing: a Bucket and a Slots limit behind
// WithFailurePolicy(FailOpen, 50 ms) on a redis-server of the test's own,
// killed and restarted (outagetest.FailurePolicy): a request used to wait
// out the timeout on acquire and again on release (a median of 153 ms with
// the server killed); now the added median is at most 1 ms, and limits hold
// again within 3 s of the server's return.
func TestOutageCostsCallersNothing(t *testing.T) {
	srv := startServer(t)
	outagetest.FailurePolicy(t, untuned(t, srv.addr()), srv.kill, srv.start)
}

// TestSharedOutageCostsCallersNothing: a quiet replica of a Shared with
// WithFallback(100 ms) on a redis-server of the test's own, killed and
// restarted (outagetest.Shared): each probe of the store used to make one
// caller wait (8.5% of decisions over 5 ms); now at most 2% are.
func TestSharedOutageCostsCallersNothing(t *testing.T) {
	srv := startServer(t)
	outagetest.Shared(t, untuned(t, srv.addr()), srv.kill, srv.start)
}
