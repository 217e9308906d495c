package redisstore

import (
	"strings"
	"testing"

	"github.com/ratepace/pace/internal/sharedtest"
	"github.com/ratepace/pace/storetest"
	"github.com/redis/go-redis/v9"
)

// sharedBackend is a sharedtest.Backend on Redis: config is the server's
// address, or the cluster's addresses joined by commas; each replica opens
// a client of its own. The namespace is the store's prefix.
func sharedBackend() sharedtest.Backend {
	return sharedtest.Backend{
		Processes: true,
		Open: func(t testing.TB, config, ns string) storetest.TakeStore {
			var c redis.UniversalClient
			if addrs := strings.Split(config, ","); len(addrs) > 1 {
				c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
			} else {
				c = redis.NewClient(&redis.Options{Addr: config, ContextTimeoutEnabled: true})
			}
			t.Cleanup(func() { c.Close() })
			return mustNew(t, c, WithPrefix("pacetest:"+ns+":"))
		},
		Calls: func(t testing.TB, config, _ string) int64 {
			c := redis.NewClient(&redis.Options{Addr: config})
			defer c.Close()
			calls, _ := evalshaStats(t, c)
			return calls
		},
	}
}

// TestShared runs the scenarios of Shared (internal/sharedtest) on the test
// server, each replica an OS process of its own: two replicas of 16
// goroutines on one key, the forger, a key under 5/s and 20/min.
func TestShared(t *testing.T) {
	b := sharedBackend()
	b.Setup = func(t *testing.T) string {
		testClient(t) // skips, or fails under CI, without a server
		return redisAddr()
	}
	sharedtest.Run(t, b)
}

// TestSharedCluster runs the same scenarios on a Redis Cluster of three
// masters that the test starts.
func TestSharedCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	b := sharedBackend()
	b.Setup = func(t *testing.T) string { return strings.Join(startCluster(t), ",") }
	sharedtest.Run(t, b)
}

// TestSharedLocalTier: 100,000 refusals on one key make a handful of script
// calls, counted by a server of the test's own (INFO commandstats).
func TestSharedLocalTier(t *testing.T) {
	srv := startServer(t)
	sharedtest.LocalTier(t, sharedBackend(), srv.addr())
}

// TestSharedFallback kills the test's own server under load and restarts
// it: decisions go on at the fallback's pace, with no error, and go back to
// the store.
func TestSharedFallback(t *testing.T) {
	srv := startServer(t)
	sharedtest.Fallback(t, sharedBackend(), srv.addr(), srv.kill, srv.start)
}
