package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratepace/pace/httplimit"
	"github.com/ratepace/pace/redisstore"
)

// redisStore returns a store on $PACE_REDIS_ADDR (default 127.0.0.1:6379)
// under a prefix of the test's own; without a server it skips, or fails
// under CI, where a missing server is a broken setup.
func redisStore(t *testing.T) *redisstore.Store {
	t.Helper()
	addr := os.Getenv("PACE_REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("no Redis at %s: %v", addr, err)
		}
		t.Skipf("no Redis at %s (set PACE_REDIS_ADDR): %v", addr, err)
	}
	s, err := redisstore.New(rdb, redisstore.WithPrefix(fmt.Sprintf("gateway-test-%d-%d:", os.Getpid(), time.Now().UnixNano())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// TestForgerOnRedisBucket: a per-client Bucket in Redis with
// ReturnOn(401) gives every forged presentation's token back through the
// store's refund, exactly: 300 forged requests interleaved with an honest
// client's four cost the honest client nothing, and the RateLimit r the
// honest client reads counts only its own requests. The bucket refills one
// token per 1000 s, so the test's own duration cannot blur the count.
func TestForgerOnRedisBucket(t *testing.T) {
	st := redisStore(t)
	m, err := httplimit.New([]httplimit.Limit{
		httplimit.Bucket(st, 5, 0.001, httplimit.Header("X-Client"), httplimit.Name("per-client"), httplimit.ReturnOn(http.StatusUnauthorized)),
	})
	if err != nil {
		t.Fatal(err)
	}
	check := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Secret") != "right" {
			w.WriteHeader(http.StatusUnauthorized)
		}
	})
	h := m.Wrap(check)
	send := func(secret string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("X-Client", "app-1")
		r.Header.Set("X-Secret", secret)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	honest := 0
	for i := range 300 {
		if w := send(fmt.Sprint("guess-", i)); w.Code != http.StatusUnauthorized {
			t.Fatalf("forged request %d: %d; want 401 (a refusal means the forgers spent the bucket)", i, w.Code)
		}
		if i%75 == 74 {
			honest++
			w := send("right")
			want := fmt.Sprintf(`"per-client";r=%d;`, 5-honest)
			if w.Code != http.StatusOK || !strings.HasPrefix(w.Header().Get("RateLimit"), want) {
				t.Fatalf("honest request %d: %d, RateLimit %q; want 200 and %s...", honest, w.Code, w.Header().Get("RateLimit"), want)
			}
		}
	}
	if honest != 4 {
		t.Fatalf("%d honest requests; want 4", honest)
	}
	// Without ReturnOn, the forgers spend the bucket: the control.
	m, err = httplimit.New([]httplimit.Limit{
		httplimit.Bucket(st, 5, 0.001, httplimit.Header("X-Client"), httplimit.Name("no-return")),
	})
	if err != nil {
		t.Fatal(err)
	}
	h = m.Wrap(check)
	for i := range 6 {
		w := send(fmt.Sprint("guess-", i))
		if want := map[bool]int{true: http.StatusUnauthorized, false: http.StatusTooManyRequests}[i < 5]; w.Code != want {
			t.Fatalf("without ReturnOn, forged request %d: %d; want %d", i, w.Code, want)
		}
	}
}
