package redisstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/driver"
	"github.com/ratepace/pace/internal/takemodel"
	"github.com/redis/go-redis/v9"
)

// bothTakeOneScripts runs f with takeOneScript as the server runs it
// ("7.0": a fresh key created with SET NX GET) and as a server older than
// 7.0 runs it (GET, then SET).
func bothTakeOneScripts(t *testing.T, f func(t *testing.T)) {
	t.Run("7.0", f)
	t.Run("before7.0", func(t *testing.T) {
		saved := takeOneScript
		takeOneScript = redis.NewScript(luaClock + luaCarry + strings.Replace(takeOneBody, "redis.REDIS_VERSION_NUM", "nil", 1))
		t.Cleanup(func() { takeOneScript = saved })
		f(t)
	})
}

// TestTakeManyRepeatsAFreshKey: one call of the one-shape script holding a
// fresh key many times, between other keys. At one instant a bucket of 5
// (5 per second) admits exactly its first 5 occurrences, leaving 4, 3, 2,
// 1 and 0, and refuses the others with a wait of exactly 200 ms (one
// event's refill): counted here from the capacity, not from the scripts'
// arithmetic. A refund of the last receipt makes room for exactly one more.
// The same when the key is present at the server but full (its state
// outlived its arrival time by the millisecond rounding of PXAT, or the
// server's clock is behind the decision's): the call must treat it as fresh
// once, then as live.
func TestTakeManyRepeatsAFreshKey(t *testing.T) {
	bothTakeOneScripts(t, func(t *testing.T) {
		for _, stale := range []bool{false, true} {
			t.Run(fmt.Sprint("stale=", stale), func(t *testing.T) {
				clock := newFakeClock()
				s, c := newTestStore(t, withClock(clock.Now))
				ctx := context.Background()
				shape := []driver.Shape{takemodel.MustBucket(t, 5, 5, 1)}
				var old driver.Grant
				if stale {
					var err error
					if old, err = s.Take(ctx, "k", shape); err != nil || !old.OK {
						t.Fatalf("first Take = %+v, %v", old, err)
					}
					clock.Advance(time.Second) // full in the scripts' view; Redis keeps it an hour
					if storedTake(t, c, s.keys.key("k", nsTake)) == nil {
						t.Fatal("the full key is gone from the server; the test needs it present")
					}
				}
				var keys []string
				for i := range 9 {
					keys = append(keys, "k", fmt.Sprint("other", i))
				}
				out := make([]driver.Grant, len(keys))
				if err := s.TakeMany(ctx, keys, shape, out); err != nil {
					t.Fatal(err)
				}
				var last driver.Grant
				occurrence := 0
				for i, g := range out {
					if keys[i] != "k" {
						if !g.OK || g.Remaining != 4 {
							t.Errorf("out[%d] (%s) = %+v; want admitted, 4 left", i, keys[i], g)
						}
						continue
					}
					occurrence++
					if occurrence <= 5 {
						if !g.OK || g.Remaining != 5-occurrence {
							t.Errorf("occurrence %d of k = %+v; want admitted with %d left", occurrence, g, 5-occurrence)
						}
						last = g
					} else if g.OK || g.RetryAfter != 200*time.Millisecond {
						t.Errorf("occurrence %d of k = %+v; want refused, retry after 200ms", occurrence, g)
					}
				}
				if stale {
					// The receipt of the key's earlier life gives nothing.
					if err := s.Refund(ctx, "k", shape, old.Receipt); err != nil {
						t.Fatal(err)
					}
					if g, _ := s.Take(ctx, "k", shape); g.OK {
						t.Fatalf("after refunding a receipt of the key's earlier life, Take = %+v; want refused", g)
					}
				}
				if err := s.Refund(ctx, "k", shape, last.Receipt); err != nil {
					t.Fatal(err)
				}
				got := make([]driver.Grant, 2)
				if err := s.TakeMany(ctx, []string{"k", "k"}, shape, got); err != nil {
					t.Fatal(err)
				}
				if !got[0].OK || got[0].Remaining != 0 || got[1].OK {
					t.Fatalf("after one refund, TakeMany(k, k) = %+v; want one admitted with 0 left, one refused", got)
				}
			})
		}
	})
}

// TestTakeManyConcurrentBatchesOneKey: concurrent calls of TakeMany, each
// holding one key many times, on a bucket of 50 that refills one event an
// hour: exactly 50 occurrences are admitted in all, their Remaining values
// are 49 down to 0 each once across the calls, and strictly decreasing
// within each call.
func TestTakeManyConcurrentBatchesOneKey(t *testing.T) {
	bothTakeOneScripts(t, func(t *testing.T) {
		s, _ := newTestStore(t)
		shape := []driver.Shape{takemodel.MustBucket(t, 50, 1.0/3600, 1)}
		const callers, each = 6, 20
		outs := make([][]driver.Grant, callers)
		var wg sync.WaitGroup
		for i := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				keys := make([]string, each)
				for j := range keys {
					keys[j] = "hot"
				}
				outs[i] = make([]driver.Grant, each)
				if err := s.TakeMany(context.Background(), keys, shape, outs[i]); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		var left []int
		for i, out := range outs {
			prev := 50
			for j, g := range out {
				if !g.OK {
					continue
				}
				if g.Remaining >= prev {
					t.Errorf("call %d occurrence %d left %d after %d; want fewer", i, j, g.Remaining, prev)
				}
				prev = g.Remaining
				left = append(left, g.Remaining)
			}
		}
		slices.Sort(left)
		want := make([]int, 50)
		for i := range want {
			want[i] = i
		}
		if !slices.Equal(left, want) {
			t.Fatalf("remaining values of the %d admitted occurrences %v; want 0..49 each once", len(left), left)
		}
	})
}

// TestTakeOneOnAKeyOfOtherShapes: a key whose state holds three shapes (its
// limits changed) reached by the one-shape script. While another shape is
// live, the key is live: the first shape, full, takes from a full bucket,
// and the other shapes' arrival times are kept, as is the key's expiry at
// the latest of them. Once every shape is full the key is fresh.
func TestTakeOneOnAKeyOfOtherShapes(t *testing.T) {
	bothTakeOneScripts(t, func(t *testing.T) {
		clock := newFakeClock()
		s, c := newTestStore(t, withClock(clock.Now))
		ctx := context.Background()
		fast := takemodel.MustBucket(t, 5, 5, 1)
		three := []driver.Shape{fast, takemodel.MustBucket(t, 20, 20.0/60, 1), takemodel.MustBucket(t, 100, 100.0/3600, 1)}
		if g, err := s.Take(ctx, "k", three); err != nil || !g.OK {
			t.Fatalf("Take(three shapes) = %+v, %v", g, err)
		}
		key := s.keys.key("k", nsTake)
		before := storedTake(t, c, key)
		clock.Advance(time.Second) // fast is full, the others live
		out := make([]driver.Grant, 3)
		if err := s.TakeMany(ctx, []string{"k", "k", "k"}, []driver.Shape{fast}, out); err != nil {
			t.Fatal(err)
		}
		for i, g := range out {
			if !g.OK || g.Remaining != 4-i {
				t.Errorf("occurrence %d = %+v; want admitted, %d left", i, g, 4-i)
			}
		}
		after := storedTake(t, c, key)
		if after == nil || len(after.TATs) != 3 || after.TATs[1] != before.TATs[1] || after.TATs[2] != before.TATs[2] || after.Gen != before.Gen {
			t.Fatalf("state after one-shape takes %+v; want the other shapes' arrival times and the gen of %+v", after, before)
		}
		if got, want := expiryMillis(t, c, key), ceilUnixMillis(time.Unix(0, int64(after.Last()))); got != want {
			t.Fatalf("key expires at %d ms; want %d (its latest arrival time)", got, want)
		}
		clock.Advance(2 * time.Hour) // every shape full
		if err := s.TakeMany(ctx, []string{"k", "k"}, []driver.Shape{fast}, out[:2]); err != nil {
			t.Fatal(err)
		}
		if !out[0].OK || out[0].Remaining != 4 || !out[1].OK || out[1].Remaining != 3 {
			t.Fatalf("on the key full in every shape, TakeMany(k, k) = %+v; want 4 and 3 left", out[:2])
		}
		if st := storedTake(t, c, key); st == nil || len(st.TATs) != 1 {
			t.Fatalf("state after a fresh take %+v; want one shape", st)
		}
	})
}

// TestSharedExactRemainingOnOneKey: many goroutines of one Shared, on a
// Redis store whose clock stands still, decide one key with a bucket of 10:
// exactly 10 are admitted, their Remaining values are 9 down to 0 each once
// (the round trips in flight at once and the occurrences of the key in one
// batch each take in turn), and every refusal waits exactly 100 ms or
// less (the local tier counts from before its round trip). The same on a
// Redis Cluster of three nodes.
func TestSharedExactRemainingOnOneKey(t *testing.T) {
	run := func(t *testing.T, c redis.UniversalClient) {
		clock := newFakeClock()
		s := mustNew(t, c, WithPrefix(testPrefix(t, c)), withClock(clock.Now))
		p, err := pace.NewShared(s, 10, pace.WithClock(clock.Now))
		if err != nil {
			t.Fatal(err)
		}
		var (
			mu   sync.Mutex
			left []int
			wg   sync.WaitGroup
		)
		for range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 8 {
					r, err := p.Reserve(context.Background(), "hot")
					if err != nil {
						t.Error(err)
						return
					}
					if !r.OK() {
						if w := r.RetryAfter(); w <= 0 || w > 100*time.Millisecond {
							t.Errorf("refused with RetryAfter %v; want in (0, 100ms]", w)
						}
						continue
					}
					mu.Lock()
					left = append(left, r.Remaining())
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		slices.Sort(left)
		if want := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}; !slices.Equal(left, want) {
			t.Fatalf("remaining values of the admitted decisions %v; want %v", left, want)
		}
	}
	t.Run("single", func(t *testing.T) { run(t, testClient(t)) })
	t.Run("cluster", func(t *testing.T) {
		if testing.Short() {
			t.Skip("starts a three-node cluster")
		}
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: startCluster(t), ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		run(t, c)
	})
}

// TestSharedReturnsOfOneInstantAreExact: at one instant, concurrent
// decisions of one Shared (so occurrences of one key in one script call,
// whose receipts share their instant and gen) empty a bucket of 10; all of
// them are returned, in an order of their own, two of them twice. The
// bucket is then exactly full: 10 are admitted again, leaving 9 down to 0,
// and the 11th is refused.
func TestSharedReturnsOfOneInstantAreExact(t *testing.T) {
	bothTakeOneScripts(t, func(t *testing.T) {
		clock := newFakeClock()
		c := testClient(t)
		s := mustNew(t, c, WithPrefix(testPrefix(t, c)), withClock(clock.Now))
		p, err := pace.NewShared(s, 10, pace.WithClock(clock.Now))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		reserveAll := func() (rs []*pace.SharedReservation, left []int) {
			var (
				mu sync.Mutex
				wg sync.WaitGroup
			)
			for range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := new(pace.SharedReservation)
					var err error
					*r, err = p.Reserve(ctx, "hot")
					if err != nil {
						t.Error(err)
						return
					}
					if r.OK() {
						mu.Lock()
						rs, left = append(rs, r), append(left, r.Remaining())
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			slices.Sort(left)
			return rs, left
		}
		want := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
		rs, left := reserveAll()
		if !slices.Equal(left, want) {
			t.Fatalf("first round: remaining %v; want %v", left, want)
		}
		for i := len(rs) - 1; i >= 0; i -= 2 { // every other one, from the last
			if err := rs[i].Return(ctx); err != nil {
				t.Fatal(err)
			}
		}
		for i := 0; i < len(rs); i++ { // the rest; the first two twice
			if err := rs[i].Return(ctx); err != nil {
				t.Fatal(err)
			}
			if i < 2 {
				if err := rs[i].Return(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		if _, left := reserveAll(); !slices.Equal(left, want) {
			t.Fatalf("after returning all: remaining %v; want %v", left, want)
		}
	})
}
