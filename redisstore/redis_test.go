package redisstore

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratepace/pace/internal/sharedtest"
	"github.com/redis/go-redis/v9"
)

// flavour is a server the whole suite runs against: the shared server at
// addr (named by the environment variable env) for the tests that use one,
// and the binaries the tests that start servers of their own run.
type flavour struct {
	name, env, defaultAddr string
	server, cli            string
}

// flavours are the servers the suite runs on, one after the other (see
// TestMain): Redis, then Valkey. Each is required under CI.
var flavours = []flavour{
	{name: "Redis", env: "PACE_REDIS_ADDR", defaultAddr: "127.0.0.1:6379", server: "redis-server", cli: "redis-cli"},
	{name: "Valkey", env: "PACE_VALKEY_ADDR", defaultAddr: "127.0.0.1:6380", server: "valkey-server", cli: "valkey-cli"},
}

// target is the flavour the suite is running on.
var target = flavours[0]

// redisAddr is the shared server the tests use: $PACE_REDIS_ADDR (Redis) or
// $PACE_VALKEY_ADDR (Valkey), or the default of each.
func redisAddr() string {
	if a := os.Getenv(target.env); a != "" {
		return a
	}
	return target.defaultAddr
}

// runID makes this test binary's keys its own, so that packages and runs
// sharing one server never collide.
var (
	runID  = fmt.Sprintf("pacetest:%d:%d:", os.Getpid(), time.Now().UnixNano())
	testNo atomic.Int64
)

// unavailable skips the test with instructions, or fails it under CI, where
// a missing server is a broken setup rather than a developer's machine.
func unavailable(tb testing.TB, format string, args ...any) {
	tb.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") != "" {
		tb.Fatalf("%s (CI is set, so this is a failure, not a skip)", msg)
	}
	_, port, _ := strings.Cut(target.defaultAddr, ":")
	tb.Skipf("%s on %s; start one with: %s --daemonize yes --bind 127.0.0.1 --port %s --save '' --appendonly no (or set %s)", msg, target.name, target.server, port, target.env)
}

// probe remembers whether the test server answered, so that a missing
// server costs one attempt per test binary, not one per test.
var probe struct {
	once sync.Once
	err  error
}

// testClient returns a client of the test server, closed at the end of the
// test, or skips (fails under CI) when the server is unreachable.
func testClient(tb testing.TB) *redis.Client {
	tb.Helper()
	probe.once.Do(func() {
		c := redis.NewClient(&redis.Options{Addr: redisAddr(), MaxRetries: -1, DialerRetries: 1})
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		probe.err = c.Ping(ctx).Err()
	})
	if probe.err != nil {
		unavailable(tb, "server at %s unreachable: %v", redisAddr(), probe.err)
	}
	c := redis.NewClient(&redis.Options{Addr: redisAddr(), ContextTimeoutEnabled: true})
	tb.Cleanup(func() { c.Close() })
	return c
}

// testPrefix returns a key prefix no other test uses, and deletes every key
// under it when the test ends (values with ttl 0 would otherwise stay).
func testPrefix(tb testing.TB, c redis.UniversalClient) string {
	tb.Helper()
	prefix := fmt.Sprintf("%s%d:", runID, testNo.Add(1))
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
	})
	return prefix
}

// newTestStore returns a Store on the test server under a fresh prefix.
func newTestStore(tb testing.TB, opts ...Option) (*Store, *redis.Client) {
	tb.Helper()
	c := testClient(tb)
	s := mustNew(tb, c, append([]Option{WithPrefix(testPrefix(tb, c))}, opts...)...)
	tb.Cleanup(func() { s.Close(context.Background()) })
	return s, c
}

// mustNew returns New(c, opts...), failing tb on an error.
func mustNew(tb testing.TB, c redis.UniversalClient, opts ...Option) *Store {
	tb.Helper()
	s, err := New(c, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// quietLogger drops go-redis's dial-failure lines, which the fault test
// provokes by the thousand, and passes every other line on.
type quietLogger struct{}

func (quietLogger) Printf(_ context.Context, format string, v ...any) {
	if msg := fmt.Sprintf(format, v...); !strings.Contains(msg, "failed to dial") {
		log.Print("redis: ", msg)
	}
}

// TestMain runs the whole suite once per flavour: on Redis, then on Valkey
// (the shared server of each, and servers of the tests' own started from
// its binaries). Fuzzing and listing run once, on Redis, and so does a
// replica process of sharedtest (its spec names its server).
func TestMain(m *testing.M) {
	redis.SetLogger(quietLogger{}) // before any client exists: go-redis reads it unsynchronised
	flag.Parse()
	code := 0
	for i, f := range flavours {
		if i > 0 && (sharedtest.InReplica() || flagSet("test.fuzz") || flagSet("test.fuzzworker") || flagSet("test.list")) {
			break
		}
		target = f
		probe.once, probe.err = sync.Once{}, nil
		if testing.Verbose() {
			fmt.Printf("redisstore: the suite on %s\n", f.name)
		}
		if c := m.Run(); c != 0 {
			fmt.Printf("redisstore: the suite failed on %s\n", f.name)
			code = c
		}
	}
	os.Exit(code)
}

// flagSet reports whether the test flag name was given a value other than
// its zero.
func flagSet(name string) bool {
	f := flag.Lookup(name)
	return f != nil && f.Value.String() != "" && f.Value.String() != "false"
}
