// Package storetest implements support for testing implementations of
// pace.Store and of driver.Taker.
//
// An implementation's test calls Run with a constructor, and RunTaker too
// when the store also implements driver.Taker (the take methods pace.Shared
// needs):
//
//	func TestStore(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) pace.Store { return mystore.New(...) })
//	}
//
//	func TestTaker(t *testing.T) {
//		storetest.RunTaker(t, func(t *testing.T) storetest.TakeStore { return mystore.New(...) })
//	}
//
// Run checks only the methods of pace.Store, so that a store written to
// that interface alone passes it; RunTaker checks the take methods, and how
// they share keys, Delete and Close with the others.
//
// Run the suite under the race detector (go test -race): its concurrency
// subtests race many goroutines on one key and count the outcomes exactly,
// and a data race they provoke is a failure too.
//
// Every subtest uses a fresh store from the constructor and keys under a
// random prefix of its own, so the suite can run against a server shared with
// other tests. The time-dependent subtests are written for a store whose
// clock the suite cannot move (a Redis or PostgreSQL server): refills and
// expiries that must not have happened yet use rates and TTLs of an hour,
// and those that must have happened are polled for with a deadline of
// several seconds. They take a few seconds of real time, so without
// WithAdvance the subtests run in parallel. A store that can be driven by a
// fake clock passes WithAdvance, and the suite then never sleeps.
//
// The subtests of Take, TakeMany and Refund read the store's clock from the
// receipts it returns (driver.Receipt.At and Reserved), so they check the
// arithmetic to the nanosecond against the store's own time, on a real
// server too. The longest (5/s and 20/min on one key) takes four seconds.
package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/driver"
)

// Option configures Run.
type Option func(*config)

type config struct {
	advance func(time.Duration)
}

// WithAdvance tells Run that every store newStore returns reads one fake
// clock (set by the store's own WithClock), and that advance(d) moves that
// clock forward by d. The suite then advances the clock wherever it would
// otherwise wait in real time, and runs its
// subtests one after another (they share the clock). advance must be safe
// for concurrent use with the stores reading the clock. Without WithAdvance
// the suite waits in real time and runs its subtests in parallel.
func WithAdvance(advance func(d time.Duration)) Option {
	return func(c *config) { c.advance = advance }
}

// Run checks the stores made by newStore against the contract of
// pace.Store, in one subtest per behaviour (t.Run("AcquireSlotLimit", ...)
// and so on), each on a fresh store from newStore, so that one behaviour can
// be run alone with -run. Run closes each store when its subtest ends (Close
// must be idempotent). It calls only the methods of pace.Store.
func Run(t *testing.T, newStore func(t *testing.T) pace.Store, opts ...Option) {
	t.Helper()
	run(testingT{t}, seed, func(t tb) (pace.Store, driver.Taker) { return newStore(t.(testingT).T), nil }, opts...)
}

// TakeStore is a pace.Store that also implements driver.Taker: what
// RunTaker checks.
type TakeStore interface {
	pace.Store
	driver.Taker
}

// RunTaker checks the stores made by newStore against the contract of
// driver.Taker (Take, TakeMany and Refund), and the way the take methods
// share keys, Delete and Close with the methods of pace.Store, as Run does
// for those.
func RunTaker(t *testing.T, newStore func(t *testing.T) TakeStore, opts ...Option) {
	t.Helper()
	run(testingT{t}, takes, func(t tb) (pace.Store, driver.Taker) {
		s := newStore(t.(testingT).T)
		if s == nil {
			return nil, nil
		}
		return s, s
	}, opts...)
}

// tb is the part of *testing.T the suite uses. Run adapts a *testing.T to
// it; the suite's own tests adapt a recorder, to show that the suite fails
// on broken stores without failing themselves.
type tb interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Cleanup(func())
	Parallel()
	Run(name string, f func(t tb)) bool
}

// testingT adapts *testing.T to tb.
type testingT struct{ *testing.T }

func (t testingT) Run(name string, f func(t tb)) bool {
	return t.T.Run(name, func(t *testing.T) { f(testingT{t}) })
}

// subtest is one behaviour of the contract.
type subtest struct {
	name string
	f    func(c *check)
	kind kind
}

// kind says which entry point runs a subtest.
type kind uint8

const (
	seed  kind = iota // the methods of pace.Store alone: Run
	takes             // the take methods: RunTaker
	mixed             // both: Run without the take methods, RunTaker with them
)

func run(t tb, which kind, newStore func(t tb) (pace.Store, driver.Taker), opts ...Option) {
	t.Helper()
	var cfg config
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	for _, st := range subtests {
		if st.kind != mixed && st.kind != which {
			continue
		}
		t.Run(st.name, func(t tb) {
			if cfg.advance == nil {
				t.Parallel()
			}
			s, tk := newStore(t)
			if s == nil {
				t.Fatalf("newStore returned nil")
			}
			t.Cleanup(func() { _ = s.Close(context.Background()) })
			c := &check{
				t:      t,
				s:      s,
				tk:     tk,
				ctx:    context.Background(),
				cfg:    cfg,
				prefix: fmt.Sprintf("storetest:%016x:%s:", rand.Uint64(), st.name),
			}
			st.f(c)
		})
	}
}

// Timing of the real-time subtests. A TTL or a refill that must have run out
// is polled for until deadline, or waited for with wait: the store answered
// the call that started it before the wait began, so its own clock has moved
// at least as far when the next call reaches it, and the margins beyond that
// only absorb the rounding of server clocks. One that must not have run out
// is an hour long.
const (
	shortTTL = 100 * time.Millisecond
	longTTL  = time.Hour
	poll     = 10 * time.Millisecond
	deadline = 10 * time.Second
	perHour  = 1.0 / 3600 // tokens per second: a refill that never happens during a test
)

// check is the state of one subtest and the helpers that call the store and
// report in the form `AcquireSlot("k", 3, 1s) = false, 3, nil; want true, 3, nil`.
// Keys are given short ("k") and prefixed to be unique.
type check struct {
	t      tb
	s      pace.Store
	tk     driver.Taker // nil in Run: the take methods are not checked
	ctx    context.Context
	cfg    config
	prefix string
}

func (c *check) key(k string) string { return c.prefix + k }

// wait lets d pass: on the fake clock if there is one, in real time if not.
// It is used only where a duration must certainly have passed (an expiry,
// a drain), never to wait for another goroutine.
func (c *check) wait(d time.Duration) {
	if c.cfg.advance != nil {
		c.cfg.advance(d)
		return
	}
	time.Sleep(d)
}

// eventually polls cond until it holds, failing the subtest if it does not
// within deadline (of fake time when there is a fake clock).
func (c *check) eventually(what string, cond func() bool) {
	c.t.Helper()
	start := time.Now()
	for waited := time.Duration(0); ; waited += poll {
		if cond() {
			return
		}
		if c.cfg.advance != nil && waited >= deadline || c.cfg.advance == nil && time.Since(start) >= deadline {
			c.t.Fatalf("%s: still not so after %v", what, deadline)
		}
		c.wait(poll)
	}
}

func (c *check) tokenBucket(k string, capacity, rate, cost float64) (bool, time.Duration) {
	c.t.Helper()
	ok, retry, err := c.s.TokenBucket(c.ctx, c.key(k), capacity, rate, cost)
	if err != nil {
		c.t.Fatalf("TokenBucket(%q, %v, %v, %v) = %v, %v, %v; want no error", k, capacity, rate, cost, ok, retry, err)
	}
	return ok, retry
}

// takeN takes from the bucket n times and fails unless exactly want were allowed.
func (c *check) takeN(k string, capacity, rate, cost float64, n, want int) {
	c.t.Helper()
	got := 0
	for range n {
		if ok, _ := c.tokenBucket(k, capacity, rate, cost); ok {
			got++
		}
	}
	if got != want {
		c.t.Fatalf("%d × TokenBucket(%q, %v, %v, %v): %d allowed; want %d", n, k, capacity, rate, cost, got, want)
	}
}

func (c *check) wantTake(k string, capacity, rate, cost float64, want bool) time.Duration {
	c.t.Helper()
	ok, retry := c.tokenBucket(k, capacity, rate, cost)
	if ok != want {
		c.t.Fatalf("TokenBucket(%q, %v, %v, %v) = %v, %v, nil; want %v", k, capacity, rate, cost, ok, retry, want)
	}
	if ok && retry != 0 {
		c.t.Errorf("TokenBucket(%q, %v, %v, %v) = true, %v, nil; want retryAfter 0 when allowed", k, capacity, rate, cost, retry)
	}
	return retry
}

func (c *check) acquire(k string, limit int64, ttl time.Duration) (bool, int64) {
	c.t.Helper()
	ok, cur, err := c.s.AcquireSlot(c.ctx, c.key(k), limit, ttl)
	if err != nil {
		c.t.Fatalf("AcquireSlot(%q, %d, %v) = %v, %d, %v; want no error", k, limit, ttl, ok, cur, err)
	}
	return ok, cur
}

func (c *check) wantAcquire(k string, limit int64, ttl time.Duration, want bool, wantCur int64) {
	c.t.Helper()
	if ok, cur := c.acquire(k, limit, ttl); ok != want || cur != wantCur {
		c.t.Fatalf("AcquireSlot(%q, %d, %v) = %v, %d, nil; want %v, %d, nil", k, limit, ttl, ok, cur, want, wantCur)
	}
}

func (c *check) acquireBurst(k string, sustained, ceiling int64, budget, ttl time.Duration) (bool, int64) {
	c.t.Helper()
	ok, cur, err := c.s.AcquireSlotBurst(c.ctx, c.key(k), sustained, ceiling, budget, ttl)
	if err != nil {
		c.t.Fatalf("AcquireSlotBurst(%q, %d, %d, %v, %v) = %v, %d, %v; want no error", k, sustained, ceiling, budget, ttl, ok, cur, err)
	}
	return ok, cur
}

func (c *check) wantAcquireBurst(k string, sustained, ceiling int64, budget, ttl time.Duration, want bool, wantCur int64) {
	c.t.Helper()
	if ok, cur := c.acquireBurst(k, sustained, ceiling, budget, ttl); ok != want || cur != wantCur {
		c.t.Fatalf("AcquireSlotBurst(%q, %d, %d, %v, %v) = %v, %d, nil; want %v, %d, nil", k, sustained, ceiling, budget, ttl, ok, cur, want, wantCur)
	}
}

func (c *check) release(k string) {
	c.t.Helper()
	if err := c.s.ReleaseSlot(c.ctx, c.key(k)); err != nil {
		c.t.Fatalf("ReleaseSlot(%q) = %v; want nil", k, err)
	}
}

func (c *check) refresh(k string, ttl time.Duration) {
	c.t.Helper()
	if err := c.s.RefreshSlot(c.ctx, c.key(k), ttl); err != nil {
		c.t.Fatalf("RefreshSlot(%q, %v) = %v; want nil", k, ttl, err)
	}
}

func (c *check) releaseBurst(k string) {
	c.t.Helper()
	if err := c.s.ReleaseSlotBurst(c.ctx, c.key(k)); err != nil {
		c.t.Fatalf("ReleaseSlotBurst(%q) = %v; want nil", k, err)
	}
}

func (c *check) refreshBurst(k string, ttl time.Duration) {
	c.t.Helper()
	if err := c.s.RefreshSlotBurst(c.ctx, c.key(k), ttl); err != nil {
		c.t.Fatalf("RefreshSlotBurst(%q, %v) = %v; want nil", k, ttl, err)
	}
}

func (c *check) set(k string, v []byte, ttl time.Duration) {
	c.t.Helper()
	if err := c.s.Set(c.ctx, c.key(k), v, ttl); err != nil {
		c.t.Fatalf("Set(%q, %q, %v) = %v; want nil", k, v, ttl, err)
	}
}

func (c *check) wantGet(k string, want string) {
	c.t.Helper()
	got, err := c.s.Get(c.ctx, c.key(k))
	if err != nil || string(got) != want {
		c.t.Fatalf("Get(%q) = %q, %v; want %q, nil", k, got, err, want)
	}
}

func (c *check) del(k string) {
	c.t.Helper()
	if err := c.s.Delete(c.ctx, c.key(k)); err != nil {
		c.t.Fatalf("Delete(%q) = %v; want nil", k, err)
	}
}
