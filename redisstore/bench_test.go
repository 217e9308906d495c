package redisstore

import (
	"context"
	"github.com/ratepace/pace/driver"
	"github.com/ratepace/pace/internal/benchkit"
	"github.com/ratepace/pace/internal/takemodel"
	"github.com/redis/go-redis/v9"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// benchKeys is the number of distinct keys the benchmarks spread over.
const benchKeys = 10_000

// BenchmarkTokenBucket measures TokenBucket decisions against the test
// server over loopback, with 1 and 16 concurrent callers. The shape admits
// every call, so each one runs the script's full path (read, decide, write).
func BenchmarkTokenBucket(b *testing.B) {
	s, c := newTestStore(b)
	benchDecisions(b, c, func(ctx context.Context, key string) (bool, error) {
		ok, _, err := s.TokenBucket(ctx, key, 1e6, 1e6, 1)
		return ok, err
	})
}

// BenchmarkAcquireSlotBurst measures AcquireSlotBurst decisions with 1 and
// 16 concurrent callers. sustained is far above the number of calls, so each
// one is admitted and rewrites the slot's state.
func BenchmarkAcquireSlotBurst(b *testing.B) {
	s, c := newTestStore(b)
	benchDecisions(b, c, func(ctx context.Context, key string) (bool, error) {
		ok, _, err := s.AcquireSlotBurst(ctx, key, 1<<40, 1<<40, time.Minute, time.Minute)
		return ok, err
	})
}

// benchDecisions runs decide over benchKeys keys, serially and from 16
// goroutines, reports decisions per second and the server's own time per
// script call (srv-µs/op, from INFO commandstats: meaningful only on a
// server that runs nothing else, as go run ./bench/cmd/report runs it), and
// fails unless every call was admitted without error (so the benchmark
// measured the path it names).
func benchDecisions(b *testing.B, c *redis.Client, decide func(ctx context.Context, key string) (bool, error)) {
	keys := benchkit.Keys(b, benchKeys)
	ctx := context.Background()
	for _, callers := range []int{1, 16} {
		b.Run("callers="+strconv.Itoa(callers), func(b *testing.B) {
			b.ReportAllocs()
			var next, refused atomic.Int64
			var failure atomic.Pointer[error]
			run := func() {
				i := next.Add(1)
				ok, err := decide(ctx, keys[int(i)%len(keys)])
				if err != nil {
					failure.CompareAndSwap(nil, &err)
				} else if !ok {
					refused.Add(1)
				}
			}
			calls0, usec0 := evalshaStats(b, c)
			b.ResetTimer()
			if callers == 1 {
				for range b.N {
					run()
				}
			} else {
				b.SetParallelism((callers + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						run()
					}
				})
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
			if calls, usec := evalshaStats(b, c); calls > calls0 {
				b.ReportMetric(float64(usec-usec0)/float64(calls-calls0), "srv-µs/op")
			}
			if err := failure.Load(); err != nil {
				b.Fatal(*err)
			}
			if n := refused.Load(); n > 0 {
				b.Fatalf("%d of %d calls refused; the benchmark must measure admissions", n, b.N)
			}
		})
	}
}

// BenchmarkTake measures Take of one shape, with 1 and 16 concurrent
// callers, on the same server and keys as BenchmarkTokenBucket: compare the
// two in one run.
func BenchmarkTake(b *testing.B) {
	s, c := newTestStore(b)
	shapes := []driver.Shape{takemodel.MustBucket(b, 1e6, 1e6, 1)}
	benchDecisions(b, c, func(ctx context.Context, key string) (bool, error) {
		g, err := s.Take(ctx, key, shapes)
		return g.OK, err
	})
}

// BenchmarkTakeParts splits a Take of one fresh key into what the server
// does for it, on the shape of pace.Shared at 1000 a second (a key written
// for a millisecond): script=empty is an EVALSHA that does nothing,
// script=time reads TIME, script=set writes a key of the state's size (72
// bytes) expiring a millisecond later with SET ... NX GET, script=time_set
// both, and script=take is Take itself. srv-µs/op (on a server that runs
// nothing else) is each one's cost to the server.
func BenchmarkTakeParts(b *testing.B) {
	s, c := newTestStore(b)
	state := strings.Repeat("s", 72)
	parts := []struct {
		name, src string
	}{
		{"empty", "return 1"},
		{"time", "redis.call('TIME') return 1"},
		{"set", "redis.call('SET', KEYS[1], ARGV[1], 'PX', 1, 'NX', 'GET') return 1"},
		{"time_set", "redis.call('TIME') redis.call('SET', KEYS[1], ARGV[1], 'PX', 1, 'NX', 'GET') return 1"},
	}
	for _, part := range parts {
		script := redis.NewScript(part.src)
		b.Run("script="+part.name, func(b *testing.B) {
			benchDecisions(b, c, func(ctx context.Context, key string) (bool, error) {
				err := script.Run(ctx, c, []string{s.keys.key(key, nsTake)}, state).Err()
				return err == nil, err
			})
		})
	}
	shapes := []driver.Shape{takemodel.MustBucket(b, 1000, 1000, 1)}
	b.Run("script=take", func(b *testing.B) {
		benchDecisions(b, c, func(ctx context.Context, key string) (bool, error) {
			g, err := s.Take(ctx, key, shapes)
			return g.OK, err
		})
	})
}

// BenchmarkTakeHashedKeys is BenchmarkTake on a Store with WithHashedKeys:
// the difference is the per-call cost of hashing the key.
func BenchmarkTakeHashedKeys(b *testing.B) {
	s, c := newTestStore(b, WithHashedKeys([]byte(testSecret)))
	shapes := []driver.Shape{takemodel.MustBucket(b, 1e6, 1e6, 1)}
	benchDecisions(b, c, func(ctx context.Context, key string) (bool, error) {
		g, err := s.Take(ctx, key, shapes)
		return g.OK, err
	})
}

// BenchmarkKey measures building one Redis key in the client, in the clear
// and hashed, for a client id of 24 bytes: the CPU that WithHashedKeys adds
// to every call.
func BenchmarkKey(b *testing.B) {
	const id = "client-1234567@10.1.2.3"
	for _, kb := range []struct {
		name string
		k    keyer
	}{{"clear", keyer{prefix: DefaultPrefix}}, {"hashed", keyer{prefix: DefaultPrefix, hash: newHasher([]byte(testSecret))}}} {
		b.Run(kb.name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if kb.k.key(id, nsTake) == "" {
					b.Fatal("empty key")
				}
			}
		})
	}
}
