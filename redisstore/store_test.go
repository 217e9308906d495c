package redisstore

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/driver"
	"github.com/ratepace/pace/internal/takemodel"
	"github.com/ratepace/pace/storetest"
	"github.com/redis/go-redis/v9"
)

// TestContract runs the pace.Store contract suite against the Redis server,
// in real time (the server's clock cannot be moved).
func TestContract(t *testing.T) {
	c := testClient(t)
	storetest.Run(t, func(t *testing.T) pace.Store {
		return mustNew(t, c, WithPrefix(testPrefix(t, c)))
	})
	storetest.RunTaker(t, func(t *testing.T) storetest.TakeStore {
		return mustNew(t, c, WithPrefix(testPrefix(t, c)))
	})
}

// TestContractCluster runs the contract suite on a Redis Cluster of three
// masters that the test starts: every script's keys must share a hash slot,
// or the server answers CROSSSLOT.
func TestContractCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	addrs := startCluster(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	t.Run("Plain", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) pace.Store { return mustNew(t, c) })
		storetest.RunTaker(t, func(t *testing.T) storetest.TakeStore { return mustNew(t, c) })
	})
	t.Run("HashedKeys", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) pace.Store { return mustNew(t, c, WithHashedKeys([]byte(testSecret))) })
		storetest.RunTaker(t, func(t *testing.T) storetest.TakeStore { return mustNew(t, c, WithHashedKeys([]byte(testSecret))) })
	})
	// A prefix with a hash tag of its own puts every key in one slot: one
	// script call takes them all.
	t.Run("TakeManyOneSlot", func(t *testing.T) {
		s := mustNew(t, c, WithPrefix("app{"+testPrefix(t, c)+"}:"))
		keys := make([]string, 300)
		for i := range keys {
			keys[i] = strconv.Itoa(i % 150)
		}
		if bs := s.batches(keys); len(bs) != 2 {
			t.Fatalf("300 keys in one slot went to %d script calls; want 2 (of at most %d)", len(bs), maxBatch)
		}
		out := make([]driver.Grant, len(keys))
		b, _ := driver.NewShape(1, 1.0/3600, 1)
		if err := s.TakeMany(context.Background(), keys, []driver.Shape{b}, out); err != nil {
			t.Fatal(err)
		}
		for i, g := range out {
			if g.OK != (i < 150) {
				t.Fatalf("out[%d] = %+v; want OK %v (one take of 1 an hour per key)", i, g, i < 150)
			}
		}
	})
	// TakeMany's pipeline across the nodes, and the scripts' arithmetic,
	// against the Go reference.
	t.Run("TakeMatchesReference", func(t *testing.T) {
		clock := newFakeClock()
		s := mustNew(t, c, WithPrefix(testPrefix(t, c)), WithHashedKeys([]byte(testSecret)), withClock(clock.Now))
		seen := takemodel.Scenario(t, s, testSeed(t), 500, true,
			func() time.Duration { return time.Duration(clock.Now().UnixNano()) },
			clock.Advance,
			func(k string) *takemodel.State { return storedTake(t, c, s.keys.key(k, nsTake)) })
		takemodel.RequireSeen(t, seen, "taken", "refused", "TakeMany", "refund: exact", "refund: reordered")
	})
}

// TestContractRing runs the contract suite on a Ring of two servers that the
// test starts.
func TestContractRing(t *testing.T) {
	a, b := startServer(t), startServer(t)
	c := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.addr(), "b": b.addr()}, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	storetest.Run(t, func(t *testing.T) pace.Store { return mustNew(t, c) })
	storetest.RunTaker(t, func(t *testing.T) storetest.TakeStore { return mustNew(t, c) })
	// TakeMany's pipeline across the two servers, and the scripts'
	// arithmetic, against the Go reference.
	t.Run("TakeMatchesReference", func(t *testing.T) {
		clock := newFakeClock()
		s := mustNew(t, c, WithPrefix(testPrefix(t, c)), withClock(clock.Now))
		seen := takemodel.Scenario(t, s, testSeed(t), 500, true,
			func() time.Duration { return time.Duration(clock.Now().UnixNano()) },
			clock.Advance,
			func(k string) *takemodel.State { return storedTake(t, c, s.keys.key(k, nsTake)) })
		takemodel.RequireSeen(t, seen, "taken", "refused", "TakeMany", "refund: exact", "refund: reordered")
	})
}

func TestKeysShareHashSlot(t *testing.T) {
	users := []string{"k", "user:42", "}", "}x", `\`, `\}`, `\\`, "{", "{}", "a}b", "{a}", "a{b}c", "\x00\xff", strings.Repeat("z", driver.MaxKeyLen)}
	for _, prefix := range []string{DefaultPrefix, "", "app{1}:", "app{", "x}y"} {
		kb := keyer{prefix: prefix}
		if err := checkPrefix(prefix); err != nil {
			t.Fatalf("checkPrefix(%q) = %v; want nil", prefix, err)
		}
		seen := map[string]string{}
		for _, u := range users {
			all := kb.all(u)
			tag := hashTagOf(all[0])
			for i, ns := range []string{nsBucket, nsSlot, nsBurst, nsValue, nsTake} {
				if all[i] != kb.key(u, ns) {
					t.Errorf("prefix %q: all(%q)[%d] = %q; want key(%q, %q) = %q", prefix, u, i, all[i], u, ns, kb.key(u, ns))
				}
				if got := hashTagOf(all[i]); got != tag || got == all[i] {
					t.Errorf("prefix %q: key %q hashes %q; want the shared tag %q, not the whole key", prefix, all[i], got, tag)
				}
				if other, dup := seen[all[i]]; dup {
					t.Errorf("prefix %q: user keys %q and %q map to the same key %q", prefix, other, u, all[i])
				}
				seen[all[i]] = u
			}
		}
	}
	if got := (keyer{prefix: DefaultPrefix}).key("user:42", nsBucket); got != "pace:{user:42}:b" {
		t.Errorf(`key("user:42", bucket) = %q; want "pace:{user:42}:b"`, got)
	}
}

// TestInvalidConfiguration checks that New refuses a nil client or a prefix
// that would scatter a key's namespaces with an error wrapping
// ErrInvalidArgument, without a panic, and skips a nil option.
func TestInvalidConfiguration(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	t.Cleanup(func() { c.Close() })
	for name, opts := range map[string]struct {
		c    redis.UniversalClient
		opts []Option
	}{
		"nil client":  {nil, nil},
		"prefix a{}:": {c, []Option{WithPrefix("a{}:")}},
	} {
		s, err := New(opts.c, opts.opts...)
		if s != nil || !errors.Is(err, pace.ErrInvalidArgument) || !strings.HasPrefix(err.Error(), "redisstore: ") {
			t.Errorf("%s: New = %v, %v; want nil and a redisstore error wrapping ErrInvalidArgument", name, s, err)
		}
	}
	if s, err := New(c, nil); s == nil || err != nil {
		t.Errorf("New(c, nil) = %v, %v; want a Store: a nil option is skipped", s, err)
	}
}

// TestEveryKeyExpires checks the expiry of each namespace's key right after
// a write: a bucket at its TAT, a slot at its TTL, a burst slot at its
// ReclaimAt, a value at its TTL, and a value with ttl 0 never. Instants are
// compared exactly (PEXPIRETIME against the stored state); TTLs with a
// margin for a slow machine.
func TestEveryKeyExpires(t *testing.T) {
	s, c := newTestStore(t)
	ctx := context.Background()
	pttl := func(what, key string, lo, hi time.Duration) {
		t.Helper()
		d, err := c.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if d < lo || d > hi {
			t.Errorf("%s: PTTL %v; want within [%v, %v]", what, d, lo, hi)
		}
	}
	expiresAt := func(what, key string, want time.Time) {
		t.Helper()
		if got, want := expiryMillis(t, c, key), ceilUnixMillis(want); got != want {
			t.Errorf("%s: expires at %d ms; want %d ms (%v)", what, got, want, want)
		}
	}

	for range 3 {
		if ok, _, err := s.TokenBucket(ctx, "k", 10, 1, 1); !ok || err != nil {
			t.Fatalf("TokenBucket = %v, %v; want true, nil", ok, err)
		}
	}
	bucketKey := s.keys.key("k", nsBucket)
	v, err := c.Get(ctx, bucketKey).Result()
	if err != nil {
		t.Fatal(err)
	}
	f := unpack(t, v, 2)
	expiresAt("bucket", bucketKey, time.Unix(f[0], f[1]))
	pttl("bucket after 3 takes at 1/s", bucketKey, time.Millisecond, 3*time.Second+time.Millisecond)

	if ok, _, err := s.AcquireSlot(ctx, "k", 5, 90*time.Second); !ok || err != nil {
		t.Fatalf("AcquireSlot = %v, %v", ok, err)
	}
	pttl("slot with ttl 90s", s.keys.key("k", nsSlot), 80*time.Second, 90*time.Second)
	if err := s.RefreshSlot(ctx, "k", 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	pttl("slot refreshed to 3m", s.keys.key("k", nsSlot), 170*time.Second, 180*time.Second)

	burstKey := s.keys.key("k", nsBurst)
	for i := range 3 {
		if ok, _, err := s.AcquireSlotBurst(ctx, "k", 2, 4, time.Minute, 45*time.Second); !ok || err != nil {
			t.Fatalf("AcquireSlotBurst = %v, %v", ok, err)
		}
		st, ok := burstState(t, c, burstKey)
		if !ok {
			t.Fatalf("burst slot absent after %d admissions", i+1)
		}
		want := st.Expires // at or below sustained, with a full budget
		if i == 2 {
			want = st.Expires.Add(2 * pace.BurstRefillWindow) // above sustained
		}
		if !st.ReclaimAt().Equal(want) {
			t.Fatalf("after %d admissions ReclaimAt = %v; want %v", i+1, st.ReclaimAt(), want)
		}
		expiresAt("burst slot after "+strconv.Itoa(i+1)+" admissions", burstKey, want)
	}

	if err := s.Set(ctx, "k2", []byte("v"), time.Minute); err != nil {
		t.Fatal(err)
	}
	pttl("value with ttl 1m", s.keys.key("k2", nsValue), 50*time.Second, time.Minute)
	if err := s.Set(ctx, "k3", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	pttl("value with ttl 0", s.keys.key("k3", nsValue), -1, -1) // -1: no expiry
}

// TestScriptReloaded checks that the Store keeps working when the server has
// lost its script cache (a restart, a failover, SCRIPT FLUSH): EVALSHA
// answers NOSCRIPT and the script is sent again. It uses a server of its own
// so as not to flush the scripts of other tests.
func TestScriptReloaded(t *testing.T) {
	srv := startServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.addr()})
	t.Cleanup(func() { c.Close() })
	s := mustNew(t, c)
	ctx := context.Background()
	for i := range 3 {
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		ok, n, err := s.AcquireSlot(ctx, "k", 5, time.Minute)
		if !ok || n != int64(i+1) || err != nil {
			t.Fatalf("AcquireSlot after SCRIPT FLUSH = %v, %d, %v; want true, %d, nil", ok, n, err, i+1)
		}
		exists, err := bucketScript.Exists(ctx, c).Result()
		if err != nil || exists[0] {
			t.Fatalf("bucket script cached = %v, %v before its first use; want false", exists, err)
		}
		if ok, _, err := s.TokenBucket(ctx, "k", 1, 1, 1); ok != (i == 0) || err != nil {
			t.Fatalf("TokenBucket after SCRIPT FLUSH = %v, %v; want %v, nil", ok, err, i == 0)
		}
	}
}

// TestServerClock checks that a decision is taken at the server's time: the
// TAT an empty bucket stores is the server's TIME during the call plus one
// interval, whatever the client's clock says.
func TestServerClock(t *testing.T) {
	s, c := newTestStore(t)
	ctx := context.Background()
	before, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if ok, _, err := s.TokenBucket(ctx, "k", 5, 0.5, 1); !ok || err != nil { // interval 2 s
		t.Fatalf("TokenBucket = %v, %v; want true, nil", ok, err)
	}
	after, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	v, err := c.Get(ctx, s.keys.key("k", nsBucket)).Result()
	if err != nil {
		t.Fatal(err)
	}
	f := unpack(t, v, 2)
	tat := time.Unix(f[0], f[1])
	if now := tat.Add(-2 * time.Second); now.Before(before) || now.After(after) {
		t.Errorf("stored TAT %v = now %v + 2s; want now within the server's TIME [%v, %v]", tat, now, before, after)
	}
}

// TestReplicasShareLimits races two Stores on two clients (two connection
// pools, standing in for two replicas of a service) for the same slots and
// the same bucket: exactly the limit is granted in total.
func TestReplicasShareLimits(t *testing.T) {
	s1, _ := newTestStore(t)
	c2 := redis.NewClient(&redis.Options{Addr: redisAddr()})
	t.Cleanup(func() { c2.Close() })
	s2 := mustNew(t, c2, WithPrefix(s1.keys.prefix))
	stores := []*Store{s1, s2}

	const goroutines, limit = 32, 7
	var acquired, admitted, failed atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := stores[g%2]
			ctx := context.Background()
			ok, _, err := s.AcquireSlot(ctx, "slots", limit, time.Minute)
			if err != nil {
				failed.Add(1)
			} else if ok {
				acquired.Add(1)
			}
			ok, _, err = s.TokenBucket(ctx, "bucket", limit, 1.0/3600, 1)
			if err != nil {
				failed.Add(1)
			} else if ok {
				admitted.Add(1)
			}
		}()
	}
	wg.Wait()
	if failed.Load() != 0 || acquired.Load() != limit || admitted.Load() != limit {
		t.Errorf("%d goroutines over two stores: %d slots acquired, %d takes admitted, %d errors; want %d, %d, 0",
			goroutines, acquired.Load(), admitted.Load(), failed.Load(), limit, limit)
	}
}

// FuzzKeys checks the key layout for any prefix and pair of user keys: the
// five keys of a user key share one non-empty hash tag (so one Cluster
// slot), and two different user keys never share a key.
func FuzzKeys(f *testing.F) {
	f.Add(DefaultPrefix, "user:42", "user:43")
	f.Add("", "}", `\}`)        // the escape, and what it must not collide with
	f.Add("app{1}:", "{", "{}") // a prefix with its own tag
	f.Add("a{", "}x", "x")      // a prefix ending in "{"
	f.Fuzz(func(t *testing.T, prefix, a, b string) {
		if checkPrefix(prefix) != nil || driver.ValidateKey(a) != nil || driver.ValidateKey(b) != nil {
			return // rejected before any key is built
		}
		kb := keyer{prefix: prefix}
		for _, u := range []string{a, b} {
			all := kb.all(u)
			for _, k := range all {
				if tag := hashTagOf(k); tag != hashTagOf(all[0]) || tag == k {
					t.Fatalf("prefix %q, key %q: %q hashes %q; want the tag %q shared by %q", prefix, u, k, tag, hashTagOf(all[0]), all)
				}
			}
		}
		if a == b {
			return
		}
		for _, ka := range kb.all(a) {
			for _, kbk := range kb.all(b) {
				if ka == kbk {
					t.Fatalf("prefix %q: user keys %q and %q share the key %q", prefix, a, b, ka)
				}
			}
		}
	})
}

// TestHugeDurations checks that the largest TTLs and budgets the validation
// accepts (292 years) reach Redis as valid expiries, not as errors.
func TestHugeDurations(t *testing.T) {
	s, c := newTestStore(t)
	ctx := context.Background()
	const huge = time.Duration(math.MaxInt64)
	if ok, n, err := s.AcquireSlot(ctx, "k", 1, huge); !ok || n != 1 || err != nil {
		t.Errorf("AcquireSlot(k, 1, max) = %v, %d, %v; want true, 1, nil", ok, n, err)
	}
	if err := s.RefreshSlot(ctx, "k", huge); err != nil {
		t.Errorf("RefreshSlot(k, max) = %v", err)
	}
	if ok, n, err := s.AcquireSlotBurst(ctx, "k", 1, 2, huge, huge); !ok || n != 1 || err != nil {
		t.Errorf("AcquireSlotBurst(k, 1, 2, max, max) = %v, %d, %v; want true, 1, nil", ok, n, err)
	}
	if err := s.RefreshSlotBurst(ctx, "k", huge); err != nil {
		t.Errorf("RefreshSlotBurst(k, max) = %v", err)
	}
	if err := s.Set(ctx, "k", []byte("v"), huge); err != nil {
		t.Errorf("Set(k, v, max) = %v", err)
	}
	atLeast := time.Now().Add(200 * 365 * 24 * time.Hour).UnixMilli()
	for _, ns := range []string{nsSlot, nsBurst, nsValue} {
		// PEXPIRETIME, not PTTL: go-redis turns a PTTL this long into a
		// Duration that overflows.
		if ms := expiryMillis(t, c, s.keys.key("k", ns)); ms < atLeast {
			t.Errorf("%s expires at %d ms; want after %d ms, about 292 years from now", s.keys.key("k", ns), ms, atLeast)
		}
	}
	if got := ceilMillis(huge); got > huge || huge-got >= time.Millisecond {
		t.Errorf("ceilMillis(max) = %d; want within a millisecond below", got)
	}
}
