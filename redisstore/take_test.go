package redisstore

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/driver"
	"github.com/ratepace/pace/internal/takemodel"
	"github.com/redis/go-redis/v9"
)

// TestTakeInvalidArguments checks that out-of-range arguments return an
// error wrapping ErrInvalidArgument and write nothing, and that a closed
// Store returns ErrClosed.
func TestTakeInvalidArguments(t *testing.T) {
	s, c := newTestStore(t)
	ctx := context.Background()
	ok := takemodel.MustBucket(t, 5, 5, 1)
	for name, err := range takemodel.InvalidCalls(s) {
		if !errors.Is(err, pace.ErrInvalidArgument) {
			t.Errorf("%s: %v; want an error wrapping ErrInvalidArgument", name, err)
		}
	}
	if n, err := c.Exists(ctx, s.keys.key("k", nsTake), s.keys.key("j", nsTake)).Result(); n != 0 || err != nil {
		t.Errorf("invalid calls wrote %d keys (err %v); want none", n, err)
	}
	if err := s.TakeMany(ctx, nil, []driver.Shape{ok}, nil); err != nil {
		t.Errorf("TakeMany of no keys = %v; want nil", err)
	}
	s.Close(ctx)
	_, err := s.Take(ctx, "k", []driver.Shape{ok})
	for name, err := range map[string]error{
		"Take":     err,
		"TakeMany": s.TakeMany(ctx, []string{"k"}, []driver.Shape{ok}, make([]driver.Grant, 1)),
		"Refund":   s.Refund(ctx, "k", []driver.Shape{ok}, driver.Receipt{At: 1}),
	} {
		if !errors.Is(err, pace.ErrClosed) {
			t.Errorf("%s after Close = %v; want an error wrapping ErrClosed", name, err)
		}
	}
}

// TestTakeServerClock checks a take on a new key at the server's clock: its
// receipt is dated within the server's TIME around the call, reserves one
// interval past it, and reports what is left and when the key is full.
func TestTakeServerClock(t *testing.T) {
	s, c := newTestStore(t)
	ctx := context.Background()
	perSecond, perMinute := takemodel.MustBucket(t, 5, 5, 1), takemodel.MustBucket(t, 20, 20.0/60, 1)
	before, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	g, err := s.Take(ctx, "k", []driver.Shape{perSecond, perMinute})
	if err != nil {
		t.Fatal(err)
	}
	after, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(0, int64(g.Receipt.At))
	if !g.OK || at.Before(before) || at.After(after) {
		t.Fatalf("Take = %+v; want OK, dated within the server's TIME [%v, %v]", g, before, after)
	}
	want := driver.Grant{OK: true, Remaining: 4, Reset: 3 * time.Second, Receipt: driver.Receipt{
		At: g.Receipt.At, Gen: g.Receipt.Gen,
		Reserved: [driver.MaxShapes]time.Duration{g.Receipt.At + 200*time.Millisecond, g.Receipt.At + 3*time.Second},
	}}
	if g != want {
		t.Errorf("Take of 5/s and 20/min on a new key = %+v; want %+v", g, want)
	}
}

// TestTakeAllOrNothing: a key under 3 an hour and 10 an hour admits 3; the
// fourth is refused by the first shape and debits the second neither.
func TestTakeAllOrNothing(t *testing.T) {
	s, _ := newTestStore(t)
	ctx := context.Background()
	three, ten := takemodel.MustBucket(t, 3, 3.0/3600, 1), takemodel.MustBucket(t, 10, 10.0/3600, 1)
	for i := range 5 {
		g, err := s.Take(ctx, "k", []driver.Shape{three, ten})
		if err != nil || g.OK != (i < 3) {
			t.Fatalf("take %d = %+v, %v; want OK %v", i+1, g, err, i < 3)
		}
		if i >= 3 && (g.Remaining != 0 || g.RetryAfter <= 0 || g.Receipt != (driver.Receipt{})) {
			t.Fatalf("refused take %d = %+v; want no remaining, a wait and no receipt", i+1, g)
		}
	}
	// Under a roomy first shape, the second shows what it kept: 3 of 10
	// taken, then this one.
	roomy := takemodel.MustBucket(t, 1e6, 1, 1)
	g, err := s.Take(ctx, "k", []driver.Shape{roomy, ten})
	if err != nil || !g.OK || g.Remaining != 6 {
		t.Fatalf("Take under a roomy first shape = %+v, %v; want OK with 6 left of 10 (refusals debited nothing)", g, err)
	}
}

// TestTakeConcurrentRefunds races 32 goroutines over two clients for a key
// of 7 an hour: exactly 7 are admitted. All 7 are then refunded at once, in
// whatever order the goroutines reach the server, and 32 goroutines race
// again: 6 or 7 are admitted, never more. (A refund out of order gives back
// only what is left of its interval after its take, so the milliseconds
// between the takes and the refunds stay spent: the seventh may have to
// wait for them.)
func TestTakeConcurrentRefunds(t *testing.T) {
	s1, _ := newTestStore(t)
	c2 := redis.NewClient(&redis.Options{Addr: redisAddr()})
	t.Cleanup(func() { c2.Close() })
	s2 := mustNew(t, c2, WithPrefix(s1.keys.prefix))
	stores := []*Store{s1, s2}
	shapes := []driver.Shape{takemodel.MustBucket(t, 7, 7.0/3600, 1)}
	ctx := context.Background()

	race := func() (got []driver.Receipt, wait time.Duration) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		var failed atomic.Int64
		for g := range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				gr, err := stores[g%2].Take(ctx, "k", shapes)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					failed.Add(1)
				case gr.OK:
					got = append(got, gr.Receipt)
				case wait == 0 || gr.RetryAfter < wait:
					wait = gr.RetryAfter
				}
			}()
		}
		wg.Wait()
		if failed.Load() != 0 {
			t.Fatalf("%d of 32 takes failed", failed.Load())
		}
		return got, wait
	}
	receipts, _ := race()
	if len(receipts) != 7 {
		t.Fatalf("32 goroutines on a key of 7 an hour: %d admitted; want 7", len(receipts))
	}
	var wg sync.WaitGroup
	for i, r := range receipts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := stores[i%2].Refund(ctx, "k", shapes, r); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	again, wait := race()
	if n := len(again); n < 6 || n > 7 || (n == 6 && wait > time.Second) {
		t.Fatalf("after 7 refunds at once, %d admitted (the first refused waits %v); want 7, or 6 and a wait of the milliseconds the refunds took", n, wait)
	}
}

// TestTakeRefundsInReverseAreExact takes 7 of 7 an hour and refunds them
// latest first: every refund is exact, so the key is full again (deleted)
// and 7 more are admitted.
func TestTakeRefundsInReverseAreExact(t *testing.T) {
	s, c := newTestStore(t)
	shapes := []driver.Shape{takemodel.MustBucket(t, 7, 7.0/3600, 1), takemodel.MustBucket(t, 100, 1, 1)}
	ctx := context.Background()
	for round := range 2 {
		var receipts []driver.Receipt
		for i := range 8 {
			g, err := s.Take(ctx, "k", shapes)
			if err != nil || g.OK != (i < 7) {
				t.Fatalf("round %d, take %d = %+v, %v; want OK %v", round, i+1, g, err, i < 7)
			}
			if g.OK {
				receipts = append(receipts, g.Receipt)
			}
		}
		for i := len(receipts) - 1; i >= 0; i-- {
			if err := s.Refund(ctx, "k", shapes, receipts[i]); err != nil {
				t.Fatal(err)
			}
		}
		if n, err := c.Exists(ctx, s.keys.key("k", nsTake)).Result(); n != 0 || err != nil {
			t.Fatalf("round %d: after refunding every take, latest first, the key exists (%d, %v); want it deleted as full", round, n, err)
		}
	}
}

// TestTakeManyOneScriptCall checks that TakeMany decides 100 keys with one
// EVALSHA on a single server, and reports each key's grant.
func TestTakeManyOneScriptCall(t *testing.T) {
	srv := startServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.addr()})
	t.Cleanup(func() { c.Close() })
	s := mustNew(t, c)
	ctx := context.Background()
	shapes := []driver.Shape{takemodel.MustBucket(t, 2, 2.0/3600, 1)}
	keys := make([]string, 100)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i%50) // each key twice
	}
	out := make([]driver.Grant, len(keys))
	if err := s.TakeMany(ctx, keys[:1], shapes, out[:1]); err != nil { // loads the script
		t.Fatal(err)
	}
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.TakeMany(ctx, keys, shapes, out); err != nil {
		t.Fatal(err)
	}
	if calls, _ := evalshaStats(t, c); calls != 1 {
		t.Errorf("TakeMany of 100 keys made %d EVALSHA calls; want 1", calls)
	}
	for i, g := range out {
		// k0 took once before; each key then takes twice.
		if wantOK := i < 50 || keys[i] != "k0"; g.OK != wantOK {
			t.Errorf("out[%d] (%s) = %+v; want OK %v", i, keys[i], g, wantOK)
		}
	}
}

// evalshaStats returns the EVALSHA calls the server has counted since its
// statistics were reset, and the microseconds it spent in them.
func evalshaStats(tb testing.TB, c redis.UniversalClient) (calls, usec int64) {
	tb.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	m := regexp.MustCompile(`cmdstat_evalsha:calls=(\d+),usec=(\d+)`).FindStringSubmatch(info)
	if m == nil {
		return 0, 0
	}
	calls, _ = strconv.ParseInt(m[1], 10, 64)
	usec, _ = strconv.ParseInt(m[2], 10, 64)
	return calls, usec
}

// TestTakeManyAfterScriptFlush checks TakeMany's pipeline on a Ring of two
// servers that have both lost their scripts: each node's NOSCRIPT is
// answered by sending the script again, and every key is decided once.
func TestTakeManyAfterScriptFlush(t *testing.T) {
	a, b := startServer(t), startServer(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.addr(), "b": b.addr()}})
	t.Cleanup(func() { ring.Close() })
	s := mustNew(t, ring)
	ctx := context.Background()
	shapes := []driver.Shape{takemodel.MustBucket(t, 1, 1.0/3600, 1)}
	keys := make([]string, 40)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%d", i)
	}
	out := make([]driver.Grant, len(keys))
	for round := range 2 {
		for _, addr := range []string{a.addr(), b.addr()} {
			c := redis.NewClient(&redis.Options{Addr: addr})
			err := c.ScriptFlush(ctx).Err()
			c.Close()
			if err != nil {
				t.Fatal(err)
			}
		}
		if err := s.TakeMany(ctx, keys, shapes, out); err != nil {
			t.Fatalf("round %d: TakeMany after SCRIPT FLUSH: %v", round, err)
		}
		for i, g := range out {
			if g.OK != (round == 0) {
				t.Fatalf("round %d: out[%d] = %+v; want OK %v (one take of 1 an hour)", round, i, g, round == 0)
			}
		}
	}
}
