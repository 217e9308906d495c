package bench

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/ratepace/pace"
	"github.com/ratepace/pace/pgstore"
	"github.com/ratepace/pace/redisstore"
	"github.com/redis/go-redis/v9"
)

// sharedKeys is the number of keys of the Shared benchmarks: every decision
// admitted, each key a few times a second at most, so that each decision
// is a round trip's worth of work for the store.
const sharedKeys = 10_000

// sharedLimit is the limit of every key of the Shared benchmarks: 1000
// events a second with a bucket of one second, far above what any key is
// asked, so every decision admits, yet each admission moves the key's
// state and so writes it. (Under Admit, 10^9 a second, redis_rate's
// floating-point arrival time does not move and its script writes nothing,
// which no real limit allows; TestSharedLimitWrites checks the writes.)
var sharedLimit = Limit{Rate: 1000, Burst: 1000}

// warmUp is how many decisions callers makes before its timer starts, so
// that no implementation pays for the state the one before it left the
// server in: without it, the first implementation of a run (Shared) took
// 1 to 2 µs more of the server's time per decision, and 3 to 8 µs more in
// all, than the same code measured second (WithRoundTrips(1), at one
// caller the same decisions).
const warmUp = 2000

// callers runs b.N decisions on callers goroutines, caller i walking the
// keys in the benchmark order from its own offset, and reports decisions/s.
// A refusal or an error fails the benchmark: every decision must admit.
// Before them it makes warmUp decisions the same way, untimed, then calls
// begin (when not nil).
func callers(b *testing.B, n int, keys []string, decide func(ctx context.Context, key string) (bool, error), begin func()) {
	b.Helper()
	order := Order(len(keys))
	ctx := context.Background()
	var failed atomic.Value
	run := func(total int64) {
		var (
			next atomic.Int64
			wg   sync.WaitGroup
		)
		for c := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := c * len(order) / n; next.Add(1) <= total; i++ {
					ok, err := decide(ctx, keys[order[i%len(order)]])
					if err != nil || !ok {
						failed.CompareAndSwap(nil, fmt.Sprintf("decision: %v, %v; want admitted", ok, err))
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	run(warmUp)
	if begin != nil {
		begin()
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	run(int64(b.N))
	elapsed := time.Since(start)
	b.StopTimer()
	if f := failed.Load(); f != nil {
		b.Fatal(f)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
}

// BenchmarkSharedRedis compares pace.Shared.Reserve on Redis (redisstore)
// with redis_rate's Allow on the same server and client, 10,000 keys, every
// decision admitted, with 1, 16 and 64 concurrent callers. Shared sends the
// decisions that arrive while a round trip is in flight together in the
// next (one script call for many keys), with up to two round trips in
// flight; redis_rate makes one call each. impl=shared_rt1 is Shared with
// WithRoundTrips(1): one round trip in flight, the largest batches.
// Besides decisions/s it reports srv-µs/op, the server's script time per
// decision (INFO commandstats; meaningful on a server that runs nothing
// else), and decisions/call. impl=evalsha_empty is one EVALSHA of a script
// that does nothing per decision: the floor of a round trip each for a
// script; impl=evalsha_write is one EVALSHA of a script that reads the
// server's clock and writes the key (TIME, and a SET of 72 bytes that
// expires a millisecond later): the floor of any decision at the server's
// time that keeps state, which Shared's script does on a fresh key, plus
// its arithmetic; impl=ping is one PING per decision, the floor of any command
// (its srv-µs/op is PING's).
func BenchmarkSharedRedis(b *testing.B) {
	c := redisClientPool(b, 128) // no caller waits for a connection
	limit, err := redisRateLimit(sharedLimit)
	if err != nil {
		b.Fatal(err)
	}
	shared := func(opts ...pace.Option) func(b *testing.B, n int) {
		return func(b *testing.B, n int) {
			s, err := redisstore.New(c, redisstore.WithPrefix(newNamespace()))
			if err != nil {
				b.Fatal(err)
			}
			p, err := pace.NewShared(s, sharedLimit.Rate, opts...)
			if err != nil {
				b.Fatal(err)
			}
			keys := mustKeys(b, "", sharedKeys)
			measured(b, c, func(begin func()) { callers(b, n, keys, p.Allow, begin) })
		}
	}
	impls := []struct {
		name string
		run  func(b *testing.B, n int)
	}{
		{"shared", shared()},
		{"shared_rt1", shared(pace.WithRoundTrips(1))},
		{"evalsha_empty", func(b *testing.B, n int) {
			// The floor of one decision a round trip: one EVALSHA of a
			// script that does nothing, on the same client and server.
			empty := redis.NewScript("return 1")
			keys := mustKeys(b, newNamespace(), sharedKeys)
			measured(b, c, func(begin func()) {
				callers(b, n, keys, func(ctx context.Context, key string) (bool, error) {
					err := empty.Run(ctx, c, []string{key}).Err()
					return err == nil, err
				}, begin)
			})
		}},
		{"evalsha_write", func(b *testing.B, n int) {
			// The floor of a decision at the server's time that writes its
			// key: TIME, then a SET of a state of Shared's size (72
			// bytes) that expires when Shared's would, a millisecond
			// (one interval of sharedLimit) later, and the clock reading
			// as the reply, packed as Shared's script packs its own.
			write := redis.NewScript(`
local t = redis.call('TIME')
local at = string.format('%d', t[1] * 1000 + math.ceil(t[2] / 1000) + 1)
redis.call('SET', KEYS[1], ARGV[1], 'PXAT', at, 'NX', 'GET')
return struct.pack('<dd', t[1], t[2])
`)
			state := strings.Repeat("s", 72)
			keys := mustKeys(b, newNamespace(), sharedKeys)
			measured(b, c, func(begin func()) {
				callers(b, n, keys, func(ctx context.Context, key string) (bool, error) {
					err := write.Run(ctx, c, []string{key}, state).Err()
					return err == nil, err
				}, begin)
			})
		}},
		{"ping", func(b *testing.B, n int) {
			// The floor of any command a round trip, on the same client.
			keys := mustKeys(b, "", sharedKeys)
			measuredCmd(b, c, "ping", func(begin func()) {
				callers(b, n, keys, func(ctx context.Context, _ string) (bool, error) {
					err := c.Ping(ctx).Err()
					return err == nil, err
				}, begin)
			})
		}},
		{"redis_rate", func(b *testing.B, n int) {
			lim := redis_rate.NewLimiter(c)
			keys := mustKeys(b, newNamespace(), sharedKeys)
			measured(b, c, func(begin func()) {
				callers(b, n, keys, func(ctx context.Context, key string) (bool, error) {
					res, err := lim.Allow(ctx, key, limit)
					return err == nil && res.Allowed > 0, err
				}, begin)
			})
		}},
	}
	for _, n := range []int{1, 16, 64} {
		for _, impl := range impls {
			b.Run(fmt.Sprintf("callers=%d/impl=%s", n, impl.name), func(b *testing.B) { impl.run(b, n) })
		}
	}
}

// measured runs f and reports the server's script time per decision and
// the decisions per script call, counted from when f calls begin.
func measured(b *testing.B, c *redis.Client, f func(begin func())) {
	b.Helper()
	measuredCmd(b, c, "evalsha", f)
}

// measuredCmd is measured for the calls of cmd (as INFO commandstats names
// it) instead of EVALSHA.
func measuredCmd(b *testing.B, c *redis.Client, cmd string, f func(begin func())) {
	b.Helper()
	var usec0, calls0 int64
	f(func() { usec0, calls0 = commandStats(b, c, cmd) })
	usec, calls := commandStats(b, c, cmd)
	b.ReportMetric(float64(usec-usec0)/float64(b.N), "srv-µs/op")
	if calls > calls0 {
		b.ReportMetric(float64(b.N)/float64(calls-calls0), "decisions/call")
	}
}

func mustKeys(b *testing.B, ns string, n int) []string {
	b.Helper()
	keys, err := Keys(ns, n)
	if err != nil {
		b.Fatal(err)
	}
	return keys
}

// BenchmarkSharedHotKey measures the store calls a hot key under attack
// costs: 64 callers decide on one key of 10 events a second, almost every
// decision refused. It reports calls/refusal, the script calls the server
// counted (INFO commandstats) per refused decision, after the first burst
// (which the benchmark spends before its timer starts).
func BenchmarkSharedHotKey(b *testing.B) {
	c := redisClientPool(b, 128)
	s, err := redisstore.New(c, redisstore.WithPrefix(newNamespace()))
	if err != nil {
		b.Fatal(err)
	}
	p, err := pace.NewShared(s, 10)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for {
		ok, err := p.Allow(ctx, "hot")
		if err != nil {
			b.Fatal(err)
		}
		if !ok {
			break // spent: the local tier knows it from here on
		}
	}
	var refused, admitted atomic.Int64
	_, calls0 := scriptStats(b, c)
	b.ResetTimer()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				ok, err := p.Allow(ctx, "hot")
				switch {
				case err != nil:
					b.Error(err)
					return
				case ok:
					admitted.Add(1)
				default:
					refused.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	_, calls := scriptStats(b, c)
	if r := refused.Load(); r > 0 {
		b.ReportMetric(float64(calls-calls0)/float64(r), "calls/refusal")
	}
	b.ReportMetric(float64(admitted.Load()), "admitted")
}

// BenchmarkSharedPostgres compares pace.Shared.Reserve on PostgreSQL
// (pgstore) with SELECT 1 through the same pool of 16 connections, 10,000
// keys, every decision admitted, with 1 and 16 concurrent callers: SELECT 1
// is the floor of any call through that pool.
func BenchmarkSharedPostgres(b *testing.B) {
	pool := postgresPool(b, 16)
	ctx := context.Background()
	schema := "bench_" + newNamespace()[1:13]
	b.Cleanup(func() {
		pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	})
	s, err := pgstore.New(ctx, pool, pgstore.WithSchema(schema))
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1, 16} {
		b.Run(fmt.Sprintf("callers=%d/impl=shared", n), func(b *testing.B) {
			p, err := pace.NewShared(s, sharedLimit.Rate)
			if err != nil {
				b.Fatal(err)
			}
			callers(b, n, mustKeys(b, newNamespace(), sharedKeys), p.Allow, nil)
		})
		b.Run(fmt.Sprintf("callers=%d/impl=select1", n), func(b *testing.B) {
			callers(b, n, mustKeys(b, "", sharedKeys), func(ctx context.Context, _ string) (bool, error) {
				_, err := pool.Exec(ctx, "SELECT 1")
				return err == nil, err
			}, nil)
		})
	}
}

// postgresPool returns a pool of conns connections to $PACE_POSTGRES_URL
// (default postgres://postgres@127.0.0.1:5432/test). It skips the benchmark
// when the server is unreachable, unless $CI or $PACE_POSTGRES_URL is set:
// then it fails.
func postgresPool(tb testing.TB, conns int32) *pgxpool.Pool {
	tb.Helper()
	url := os.Getenv("PACE_POSTGRES_URL")
	if url == "" {
		url = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		tb.Fatal(err)
	}
	cfg.MaxConns, cfg.MinConns = conns, conns
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		msg := "postgres unreachable: " + err.Error()
		if os.Getenv("CI") != "" || os.Getenv("PACE_POSTGRES_URL") != "" {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// TestSharedLimitWrites checks that under sharedLimit the peer of
// BenchmarkSharedRedis does the work of a real limit: an admitted decision
// leaves redis_rate's key written, with its TTL. Under Admit it does not: its arrival time
// does not move, so it never writes.
func TestSharedLimitWrites(t *testing.T) {
	c := redisClientPool(t, 4)
	ctx := context.Background()
	limit, err := redisRateLimit(sharedLimit)
	if err != nil {
		t.Fatal(err)
	}
	lim := redis_rate.NewLimiter(c)
	key := newNamespace() + "writes"
	for i := range 2 {
		res, err := lim.Allow(ctx, key, limit)
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed != 1 || res.Remaining < 997 || res.Remaining > 999 {
			t.Fatalf("decision %d: allowed %d, remaining %d; want admitted, 997 to 999 left", i+1, res.Allowed, res.Remaining)
		}
	}
	ttl, err := c.PTTL(ctx, "rate:"+key).Result()
	if err != nil {
		t.Fatal(err)
	}
	if ttl <= 0 {
		t.Fatalf("redis_rate's key has PTTL %v after two admissions; want it written with a TTL", ttl)
	}
	admit, err := redisRateLimit(Admit)
	if err != nil {
		t.Fatal(err)
	}
	idle := newNamespace() + "admit"
	if _, err := lim.Allow(ctx, idle, admit); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Exists(ctx, "rate:"+idle).Result(); err != nil || n != 0 {
		t.Fatalf("under Admit redis_rate's key exists (%d, %v); the reason sharedLimit exists is gone", n, err)
	}
}
