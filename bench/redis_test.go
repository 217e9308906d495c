package bench

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// redisCallers is the number of goroutines of the parallel Redis
// benchmarks: a decision waits for a round trip, so a service has many in
// flight per core.
const redisCallers = 16

// BenchmarkRedis compares the implementations on Redis (see Redis) on the
// workloads of BenchmarkLocal, but for the refuse path over a million keys
// (spending them first would take a minute per run), with 1 and 16
// concurrent callers. Besides ns/op it reports srv-µs/op: the server's own
// time per script call, from INFO commandstats, meaningful on a server that
// runs nothing else (cmd/report starts one).
func BenchmarkRedis(b *testing.B) {
	c := redisClient(b)
	runAll(b, Redis(c), workloads(false), setup{callers: redisCallers, measure: func(b *testing.B) func() {
		usec0, calls0 := scriptStats(b, c)
		return func() {
			if usec, calls := scriptStats(b, c); calls > calls0 {
				b.ReportMetric(float64(usec-usec0)/float64(calls-calls0), "srv-µs/op")
			}
		}
	}})
}

// redisClient returns a client of $PACE_REDIS_ADDR (default
// 127.0.0.1:6379). It skips the benchmark when that server is unreachable,
// unless $CI or $PACE_REDIS_ADDR is set: then it fails.
func redisClient(tb testing.TB) *redis.Client { return redisClientPool(tb, 2*redisCallers) }

// redisClientPool is redisClient with a pool of poolSize connections.
func redisClientPool(tb testing.TB, poolSize int) *redis.Client {
	tb.Helper()
	addr := os.Getenv("PACE_REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: poolSize})
	if err := c.Ping(context.Background()).Err(); err != nil {
		c.Close()
		msg := "redis at " + addr + " unreachable: " + err.Error()
		if os.Getenv("CI") != "" || os.Getenv("PACE_REDIS_ADDR") != "" {
			tb.Fatal(msg)
		}
		tb.Skip(msg + "; start one with: redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save '' --appendonly no")
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// scriptStats returns the total microseconds the server has spent in
// EVALSHA and the number of EVALSHA calls, from INFO commandstats.
func scriptStats(b *testing.B, c *redis.Client) (usec, calls int64) {
	b.Helper()
	return commandStats(b, c, "evalsha")
}

// commandStats returns the total microseconds the server has spent in cmd
// (lower case, as INFO commandstats names it) and the number of its calls.
func commandStats(b *testing.B, c *redis.Client, cmd string) (usec, calls int64) {
	b.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":")
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
