package bench

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/ratepace/pace/redisstore"
	"github.com/redis/go-redis/v9"
)

// The shape both limiters are given: one million tokens of burst, refilled
// at one million per second, one token per call. No call is ever refused at
// the rates a single server reaches, so both run their full path (read,
// decide, write) on every call.
const (
	rate     = 1_000_000
	keyCount = 10_000
)

// client returns a client of $PACE_REDIS_ADDR (default 127.0.0.1:6379),
// skipping the benchmark when it is unreachable (failing it under CI).
func client(b *testing.B) *redis.Client {
	b.Helper()
	addr := os.Getenv("PACE_REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	if err := c.Ping(context.Background()).Err(); err != nil {
		c.Close()
		msg := "redis at " + addr + " unreachable: " + err.Error()
		if os.Getenv("CI") != "" {
			b.Fatal(msg)
		}
		b.Skip(msg + "; start one with: redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save '' --appendonly no")
	}
	b.Cleanup(func() { c.Close() })
	return c
}

// BenchmarkTokenBucket runs the same token-bucket decision through
// redisstore and through redis_rate, on the same server and client options,
// with 1 and 16 concurrent callers over keyCount keys.
func BenchmarkTokenBucket(b *testing.B) {
	c := client(b)
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	store := redisstore.New(c, redisstore.WithPrefix("pacebench:"+run+":"))
	limiter := redis_rate.NewLimiter(c)
	limit := redis_rate.Limit{Rate: rate, Burst: rate, Period: time.Second}
	keys := make([]string, keyCount)
	for i := range keys {
		keys[i] = "ratebench:" + run + ":" + strconv.Itoa(i)
	}

	impls := []struct {
		name   string
		decide func(ctx context.Context, key string) (bool, error)
	}{
		{"impl=pace", func(ctx context.Context, key string) (bool, error) {
			ok, _, err := store.TokenBucket(ctx, key, rate, rate, 1)
			return ok, err
		}},
		{"impl=redis_rate", func(ctx context.Context, key string) (bool, error) {
			res, err := limiter.Allow(ctx, key, limit)
			if err != nil {
				return false, err
			}
			return res.Allowed > 0, nil
		}},
	}
	for _, callers := range []int{1, 16} {
		for _, impl := range impls {
			b.Run(impl.name+"/callers="+strconv.Itoa(callers), func(b *testing.B) {
				decisions(b, c, callers, keys, impl.decide)
			})
		}
	}
}

// BenchmarkAcquireSlotBurst measures redisstore's burst slots (redis_rate
// has no counterpart), admitting every call.
func BenchmarkAcquireSlotBurst(b *testing.B) {
	c := client(b)
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	store := redisstore.New(c, redisstore.WithPrefix("pacebench:"+run+":"))
	keys := make([]string, keyCount)
	for i := range keys {
		keys[i] = strconv.Itoa(i)
	}
	for _, callers := range []int{1, 16} {
		b.Run("impl=pace/callers="+strconv.Itoa(callers), func(b *testing.B) {
			decisions(b, c, callers, keys, func(ctx context.Context, key string) (bool, error) {
				ok, _, err := store.AcquireSlotBurst(ctx, key, 1<<40, 1<<40, time.Minute, time.Minute)
				return ok, err
			})
		})
	}
}

// decisions runs decide b.N times over keys from callers goroutines, reports
// decisions per second and the server's own time per script call
// (srv-µs/op, from INFO commandstats: meaningful when nothing else runs
// scripts on that server), and fails unless every call was admitted without
// error.
func decisions(b *testing.B, c *redis.Client, callers int, keys []string, decide func(context.Context, string) (bool, error)) {
	if len(keys) != keyCount {
		b.Fatalf("%d keys; want %d", len(keys), keyCount)
	}
	b.ReportAllocs()
	ctx := context.Background()
	usec0, calls0 := scriptStats(b, c)
	var next, refused atomic.Int64
	var failure atomic.Pointer[error]
	call := func() {
		ok, err := decide(ctx, keys[int(next.Add(1))%len(keys)])
		if err != nil {
			failure.CompareAndSwap(nil, &err)
		} else if !ok {
			refused.Add(1)
		}
	}
	b.ResetTimer()
	if callers == 1 {
		for range b.N {
			call()
		}
	} else {
		b.SetParallelism((callers + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				call()
			}
		})
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
	if usec, calls := scriptStats(b, c); calls > calls0 {
		b.ReportMetric(float64(usec-usec0)/float64(calls-calls0), "srv-µs/op")
	}
	if err := failure.Load(); err != nil {
		b.Fatal(*err)
	}
	if n := refused.Load(); n > 0 {
		b.Fatalf("%d of %d calls refused; the benchmark must measure admissions", n, b.N)
	}
}

// scriptStats returns the total microseconds the server has spent in
// EVALSHA and the number of EVALSHA calls, from INFO commandstats.
func scriptStats(b *testing.B, c *redis.Client) (usec, calls int64) {
	b.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:")
		if !ok {
			continue
		}
		for _, field := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(field, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "usec":
				usec = n
			case "calls":
				calls = n
			}
		}
	}
	return usec, calls
}
