package pace_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/driver"
	"github.com/ratepace/pace/internal/fakeclock"
	"github.com/ratepace/pace/memory"
)

// settled waits until p has no round trip in flight, no decision carried
// and none queued, and the goroutines are back to base: a round trip that
// never ends, or a count that drifts, fails here.
func settled(t *testing.T, p *pace.Shared, base int) {
	t.Helper()
	waitFor(t, "round trips settled and goroutines back to base", func() bool {
		in, carried := pace.RoundTripsUnderWay(p)
		return in == 0 && carried == 0 && pace.QueuedDecisions(p) == 0 && runtime.NumGoroutine() <= base
	})
}

// TestSharedChurnKeepsAccounting races decisions, half of them with
// contexts that end at random points (before the call, while queued, while
// leading), on a store that sometimes yields or notices the end of the
// context mid-call, and a fake clock that moves 1 ms per round trip. The
// events admitted and kept per key must fit rate x T + capacity counted
// from first principles, every decision must end, and afterwards the
// round-trip accounting must be back at zero with no goroutine left.
func TestSharedChurnKeepsAccounting(t *testing.T) {
	for _, trips := range []int{1, 2, 3} {
		t.Run("roundtrips"+string(rune('0'+trips)), func(t *testing.T) {
			base := runtime.NumGoroutine()
			const rate, capacity = 50, 50
			p, s, c := newSharedT(t, rate, pace.WithRoundTrips(trips))
			t0 := c.Now()
			var coin atomic.Uint64
			hook := func(ctx context.Context, keys int) error {
				c.Advance(time.Millisecond)
				if coin.Add(1)%3 == 0 {
					runtime.Gosched()
				}
				return ctx.Err()
			}
			s.Hook.Store(&hook)
			keys := []string{"k0", "k1", "k2"}
			var kept [3]atomic.Int64
			var canceled atomic.Int64
			var wg sync.WaitGroup
			for g := range 24 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := rand.New(rand.NewPCG(uint64(g), 7))
					for range 150 {
						k := r.IntN(len(keys))
						ctx, cancel := context.WithCancel(bg)
						switch r.IntN(4) {
						case 0:
							cancel()
						case 1:
							go func() { runtime.Gosched(); cancel() }()
						}
						res, err := p.Reserve(ctx, keys[k])
						cancel()
						if err != nil {
							if !errors.Is(err, context.Canceled) {
								t.Errorf("Reserve = %v; want nil or context.Canceled", err)
							}
							canceled.Add(1)
							continue
						}
						if res.OK() {
							if r.IntN(3) == 0 {
								if err := res.Return(bg); err != nil {
									t.Errorf("Return = %v", err)
								}
								continue
							}
							kept[k].Add(1)
						}
					}
				}()
			}
			wg.Wait()
			settled(t, p, base)
			if canceled.Load() == 0 || s.Decisions.Load() <= s.RoundTrips.Load() {
				t.Fatalf("%d decisions canceled, %d decided in %d round trips: the churn did not cancel or batch", canceled.Load(), s.Decisions.Load(), s.RoundTrips.Load())
			}
			elapsed := c.Now().Sub(t0).Seconds()
			for k := range keys {
				if limit := rate*elapsed + capacity; float64(kept[k].Load()) > limit+1e-9 {
					t.Errorf("key %s kept %d events over %.3fs; the pace allows %.1f", keys[k], kept[k].Load(), elapsed, limit)
				}
			}
			// And the machinery still works: a lone decision goes at once.
			before := s.RoundTrips.Load()
			if _, err := p.Reserve(bg, "after"); err != nil || s.RoundTrips.Load() != before+1 {
				t.Fatalf("a lone decision after the churn: %v, %d round trips; want nil, 1", err, s.RoundTrips.Load()-before)
			}
		})
	}
}

// tookThenCut is a store whose first TakeMany takes at the store and then,
// like a network client with the reply on its way, returns once the reply
// arrives (reply is closed) or, if the context it was given ends first,
// with that context's error.
type tookThenCut struct {
	*memory.Store
	first          atomic.Bool
	entered, reply chan struct{}
}

func (s *tookThenCut) TakeMany(ctx context.Context, keys []string, shapes []driver.Shape, out []driver.Grant) error {
	if err := s.Store.TakeMany(ctx, keys, shapes, out); err != nil {
		return err
	}
	if s.first.CompareAndSwap(false, true) {
		close(s.entered)
		select {
		case <-s.reply:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// TestSharedLeaderGivesUpAfterTheStoreTook: the caller that first queued in
// a round trip gives up while its round trip's takes are already done at
// the store (Redis ran the script, the reply was on its way). It returns at
// once with its error; the round trip goes on for the other caller, whose
// context never ended, and which is debited once: on a key with room for
// one event it is admitted, with none left. (The round trip used to end
// with its leader's context and send the others' decisions again, debiting
// them twice.) One interval later exactly one event fits again: never over
// the pace.
func TestSharedLeaderGivesUpAfterTheStoreTook(t *testing.T) {
	clk := fakeclock.New(start)
	s := &tookThenCut{Store: memory.New(memory.WithClock(clk.Now)), entered: make(chan struct{}), reply: make(chan struct{})}
	// The first round trip (a single Take) is held in flight, so that the
	// leader and the follower queue and then go together.
	s2 := &holdFirstTake{tookThenCut: s, entered: make(chan struct{}), release: make(chan struct{})}
	p, err := pace.NewShared(s2, 1, pace.WithClock(clk.Now), pace.WithRoundTrips(1))
	if err != nil {
		t.Fatal(err)
	}
	go p.Reserve(bg, "blocker")
	<-s2.entered
	ctx, cancel := context.WithCancel(bg)
	leader := make(chan error, 1)
	go func() {
		_, err := p.Reserve(ctx, "leader")
		leader <- err
	}()
	waitFor(t, "the leader queued", func() bool { return pace.QueuedDecisions(p) == 1 })
	type result struct {
		ok        bool
		remaining int
		err       error
	}
	follower := make(chan result, 1)
	go func() {
		r, err := p.Reserve(bg, "follower")
		follower <- result{r.OK(), r.Remaining(), err}
	}()
	waitFor(t, "the follower queued", func() bool { return pace.QueuedDecisions(p) == 2 })
	close(s2.release)
	<-s.entered // leader and follower taken at the store, the reply "on its way"
	cancel()
	if err := <-leader; !errors.Is(err, context.Canceled) {
		t.Fatalf("the leader returned %v; want context.Canceled", err)
	}
	close(s.reply)
	f := <-follower
	if f.err != nil || !f.ok || f.remaining != 0 {
		t.Fatalf("the follower (own context live, fresh key with room for one) = ok %v, remaining %d, %v; want admitted, 0 left", f.ok, f.remaining, f.err)
	}
	clk.Advance(time.Second) // one interval of 1/s: the key has room for one again
	for i, want := range []bool{true, false} {
		r, err := p.Reserve(bg, "follower")
		if err != nil || r.OK() != want {
			t.Fatalf("one interval later, decision %d on the follower's key = %v, %v; want %v (never over the pace)", i+1, r.OK(), err, want)
		}
	}
}

// holdFirstTake holds the first single-key Take until release is closed.
type holdFirstTake struct {
	*tookThenCut
	once             atomic.Bool
	entered, release chan struct{}
}

func (s *holdFirstTake) Take(ctx context.Context, key string, shapes []driver.Shape) (driver.Grant, error) {
	if s.once.CompareAndSwap(false, true) {
		close(s.entered)
		<-s.release
	}
	return s.tookThenCut.Take(ctx, key, shapes)
}

// panicky is a store whose Take and TakeMany panic while armed.
type panicky struct {
	*spy
	armed atomic.Bool
}

func (s *panicky) Take(ctx context.Context, key string, shapes []driver.Shape) (driver.Grant, error) {
	if s.armed.Load() {
		panic("store bug")
	}
	return s.spy.Take(ctx, key, shapes)
}

func (s *panicky) TakeMany(ctx context.Context, keys []string, shapes []driver.Shape, out []driver.Grant) error {
	if s.armed.Load() {
		panic("store bug")
	}
	return s.spy.TakeMany(ctx, keys, shapes, out)
}

// TestSharedSurvivesAStorePanic: a Store that panics (a bug in a driver, a
// nil dereference) on the decision path of a server whose handler panics
// are recovered (net/http does so) must not wedge the Shared: the panic
// reaches its caller, the decisions that shared its round trip end, and the
// next decisions, once the store behaves, are decided.
func TestSharedSurvivesAStorePanic(t *testing.T) {
	c := newClock()
	s := &panicky{spy: newSpy(c.Now)}
	p, err := pace.NewShared(s, 100, pace.WithClock(c.Now))
	if err != nil {
		t.Fatal(err)
	}
	recovered := func(key string) (panicked bool, err error) {
		defer func() {
			if recover() != nil {
				panicked = true
			}
		}()
		ctx, cancel := context.WithTimeout(bg, 2*time.Second)
		defer cancel()
		_, err = p.Reserve(ctx, key)
		return false, err
	}
	s.armed.Store(true)
	for i := range 3 { // more than the round trips in flight
		if panicked, err := recovered("k"); !panicked {
			t.Fatalf("Reserve %d on a panicking store = %v; want its panic", i, err)
		}
	}
	s.armed.Store(false)
	ctx, cancel := context.WithTimeout(bg, 2*time.Second)
	defer cancel()
	if r, err := p.Reserve(ctx, "k"); err != nil || !r.OK() {
		t.Fatalf("Reserve once the store behaves = %v, %v; want admitted", r.OK(), err)
	}
	if in, carried := pace.RoundTripsUnderWay(p); in != 0 || carried != 0 {
		t.Fatalf("after the panics: %d round trips in flight carrying %d; want 0, 0", in, carried)
	}
}

// TestSharedStorePanicEndsTheBatch: the decisions that queued behind a round
// trip and went in one whose store call panicked end at once with an error
// (the panic goes on in the leader's goroutine), not at their deadline.
func TestSharedStorePanicEndsTheBatch(t *testing.T) {
	c := newClock()
	s := &panicky{spy: newSpy(c.Now)}
	p, _ := pace.NewShared(s, 100, pace.WithClock(c.Now), pace.WithRoundTrips(1))
	entered, release := holdFirstRoundTrip(s.spy)
	go p.Reserve(bg, "first")
	<-entered
	type result struct {
		panicked bool
		err      error
	}
	results := make(chan result, 2)
	for _, k := range []string{"a", "b"} {
		go func() {
			var r result
			defer func() {
				if recover() != nil {
					r.panicked = true
				}
				results <- r
			}()
			ctx, cancel := context.WithTimeout(bg, 5*time.Second)
			defer cancel()
			_, r.err = p.Reserve(ctx, k)
		}()
	}
	waitFor(t, "two decisions queued", func() bool { return pace.QueuedDecisions(p) == 2 })
	s.armed.Store(true)
	close(release)
	var panics, failed int
	for range 2 {
		r := <-results
		switch {
		case r.panicked:
			panics++
		case r.err != nil && !errors.Is(r.err, context.DeadlineExceeded):
			failed++
		}
	}
	if panics != 1 || failed != 1 {
		t.Fatalf("%d panicked, %d failed at once; want the leader's panic and the other's error", panics, failed)
	}
}

// TestSharedFallbackWithTwoRoundTripsInFlight: one round trip hangs until
// the fallback's timeout while a second, beside it, is answered; the first
// sends its decision to the fallback and marks the store failing; decisions
// then go to the fallback until the probe, one timeout later, finds the
// store answering, and to the store after. No decision sees an error.
func TestSharedFallbackWithTwoRoundTripsInFlight(t *testing.T) {
	c := newClock()
	s := newSpy(c.Now)
	fb, _ := pace.New(50, pace.WithClock(c.Now))
	const timeout = 30 * time.Millisecond
	p, err := pace.NewShared(s, 100, pace.WithClock(c.Now), pace.WithFallback(fb, timeout))
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	hungIn := make(chan struct{})
	hook := func(ctx context.Context, keys int) error {
		if n.Add(1) == 1 {
			close(hungIn)
			<-ctx.Done() // the fallback's timeout
			return ctx.Err()
		}
		return nil
	}
	s.Hook.Store(&hook)
	hung := make(chan pace.Source, 1)
	go func() {
		r, err := p.Reserve(bg, "a")
		if err != nil || !r.OK() {
			t.Errorf("the hanging decision = %v, %v; want admitted", r.OK(), err)
		}
		hung <- r.Source()
	}()
	<-hungIn
	if r, err := p.Reserve(bg, "b"); err != nil || !r.OK() || r.Source() != pace.SourceStore {
		t.Fatalf("a decision beside the hanging round trip = %v %v %v; want admitted by the store", r.OK(), r.Source(), err)
	}
	if path := <-hung; path != pace.SourceFallback {
		t.Fatalf("the hanging decision went to %v; want the fallback", path)
	}
	if r, err := p.Reserve(bg, "c"); err != nil || r.Source() != pace.SourceFallback {
		t.Fatalf("a decision right after the timeout = %v, %v; want the fallback", r.Source(), err)
	}
	c.Advance(timeout)
	if r, err := p.Reserve(bg, "probe"); err != nil || r.Source() != pace.SourceFallback {
		t.Fatalf("the decision that starts the probe = %v, %v; want the fallback", r.Source(), err)
	}
	pace.WaitProbes(p)
	for i := range 3 {
		if r, err := p.Reserve(bg, "d"); err != nil || !r.OK() || r.Source() != pace.SourceStore {
			t.Fatalf("decision %d once the store answers the probe = %v %v %v; want the store", i, r.OK(), r.Source(), err)
		}
	}
	if in, carried := pace.RoundTripsUnderWay(p); in != 0 || carried != 0 {
		t.Fatalf("%d round trips in flight carrying %d; want 0, 0", in, carried)
	}
}

// TestSharedFallbackChurn: a store that fails at random under concurrent
// decisions with the fallback: no decision ever returns an error, and once
// the store answers again (and one timeout has passed) decisions go to it.
func TestSharedFallbackChurn(t *testing.T) {
	base := runtime.NumGoroutine()
	c := newClock()
	s := newSpy(c.Now)
	fb, _ := pace.New(1e4, pace.WithClock(c.Now))
	const timeout = 10 * time.Millisecond
	p, _ := pace.NewShared(s, 1e4, pace.WithClock(c.Now), pace.WithFallback(fb, timeout))
	var calls, healthy atomic.Int64
	hook := func(ctx context.Context, keys int) error {
		n := calls.Add(1)
		c.Advance(time.Millisecond)
		if healthy.Load() == 0 && n%3 != 0 {
			return errDown
		}
		return nil
	}
	s.Hook.Store(&hook)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				if _, err := p.Reserve(bg, string(rune('a'+(g+i)%5))); err != nil {
					t.Errorf("Reserve with a fallback = %v; want no error", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	pace.WaitProbes(p)
	healthy.Store(1)
	c.Advance(timeout)
	p.Reserve(bg, "probe") // starts the probe, unless one closed the breaker already
	pace.WaitProbes(p)
	if r, err := p.Reserve(bg, "z"); err != nil || r.Source() != pace.SourceStore {
		t.Fatalf("after the store recovered: %v, %v; want the store", r.Source(), err)
	}
	settled(t, p, base)
}

// TestSharedLoneDecisionBesideAStuckRoundTrip: one round trip carrying ten
// decisions is stuck at the store (a Cluster node failing over, say) while
// the second lane is free. A lone decision that arrives then goes at once.
// (It used to wait until nine more had queued with it, its share of the
// eleven under way, or until the stuck round trip ended.)
func TestSharedLoneDecisionBesideAStuckRoundTrip(t *testing.T) {
	p, s, _ := newSharedT(t, 100, pace.WithRoundTrips(2))
	trips := holdRoundTrips(s)
	var wg sync.WaitGroup
	defer wg.Wait()
	decide := func(key string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.Reserve(bg, key)
		}()
	}
	decide("first")
	first := <-trips
	// Ten decisions queue behind two round trips, then go as one.
	decide("second")
	second := <-trips
	for i := range 10 {
		decide(fmt.Sprint("q", i))
	}
	waitFor(t, "ten queued", func() bool { return pace.QueuedDecisions(p) == 10 })
	close(second.release)
	stuck := <-trips // the ten, held until the test ends
	loneSent := false
	defer func() {
		close(stuck.release)
		if !loneSent {
			close((<-trips).release) // the lone decision, once the stuck round trip ends
		}
	}()
	close(first.release)
	waitFor(t, "one round trip in flight", func() bool { in, _ := pace.RoundTripsUnderWay(p); return in == 1 })
	decide("lone")
	select {
	case tr := <-trips:
		loneSent = true
		close(tr.release)
	case <-time.After(2 * time.Second):
		t.Fatalf("a lone decision beside a stuck round trip of %d did not reach the store in 2s (%d queued); want at once, the second lane being free", stuck.keys, pace.QueuedDecisions(p))
	}
}

// TestSharedShortDeadlinesBesideAHangingStore pins what WithFallback's
// godoc says of deadlines shorter than its timeout: the store hangs (a
// black-holed connection) and every caller's deadline (20 ms) is shorter
// than the timeout (200 ms), so each round trip ends with its leader's
// context, as that caller's error: each decision fails with its own
// deadline, none is decided by the fallback, and the store is not marked
// failing on the callers' account.
func TestSharedShortDeadlinesBesideAHangingStore(t *testing.T) {
	s := newSpy(nil)
	fb, _ := pace.New(100)
	p, _ := pace.NewShared(s, 100, pace.WithFallback(fb, 200*time.Millisecond))
	hook := func(ctx context.Context, keys int) error {
		<-ctx.Done()
		return ctx.Err()
	}
	s.Hook.Store(&hook)
	for i := range 10 {
		ctx, cancel := context.WithTimeout(bg, 20*time.Millisecond)
		r, err := p.Reserve(ctx, fmt.Sprint("k", i))
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || r.Source() == pace.SourceFallback {
			t.Fatalf("decision %d on a hanging store with a deadline below the timeout: path %v, error %v; want the caller's deadline", i, r.Source(), err)
		}
	}
}

// tookThenLate is a store on a network: each Take and TakeMany takes at the
// store at once, and its reply arrives latency later, unless the context of
// the call ends first (the script ran, the reply was on its way). It counts
// the events the store granted, per key: what each key was charged.
type tookThenLate struct {
	*memory.Store
	latency time.Duration
	mu      sync.Mutex
	charged map[string]int // guarded by mu
}

func (s *tookThenLate) charge(keys []string, out []driver.Grant) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, k := range keys {
		if out[i].OK {
			s.charged[k]++
		}
	}
}

func (s *tookThenLate) reply(ctx context.Context) error {
	t := time.NewTimer(s.latency)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *tookThenLate) Take(ctx context.Context, key string, shapes []driver.Shape) (driver.Grant, error) {
	g, err := s.Store.Take(ctx, key, shapes)
	if err != nil {
		return g, err
	}
	s.charge([]string{key}, []driver.Grant{g})
	return g, s.reply(ctx)
}

func (s *tookThenLate) TakeMany(ctx context.Context, keys []string, shapes []driver.Shape, out []driver.Grant) error {
	if err := s.Store.TakeMany(ctx, keys, shapes, out); err != nil {
		return err
	}
	s.charge(keys, out)
	return s.reply(ctx)
}

// TestSharedDisconnectsChargeNoOneElse: honest clients (contexts that never
// end) and clients that disconnect after a random 0-3 ms share a Shared on
// a store whose replies take 1 ms. Every event the store charged to an
// honest key is one of its admissions, counted by the clients: a
// disconnect, even of the caller whose goroutine queued first, never makes
// the store charge an honest client for a decision it did not get. (Round
// trips used to end with their leader's context, and their other decisions
// were taken again.)
func TestSharedDisconnectsChargeNoOneElse(t *testing.T) {
	s := &tookThenLate{Store: memory.New(), latency: time.Millisecond, charged: map[string]int{}}
	p, err := pace.NewShared(s, 1e6) // every decision fits: charged events are admissions
	if err != nil {
		t.Fatal(err)
	}
	const honest, quitters, rounds = 8, 8, 60
	var admitted [honest]atomic.Int64
	var gaveUp atomic.Int64
	var wg sync.WaitGroup
	for g := range honest + quitters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 19))
			key := fmt.Sprint("honest", g)
			if g >= honest {
				key = fmt.Sprint("quitter", g)
			}
			for range rounds {
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				if g >= honest {
					ctx, cancel = context.WithTimeout(bg, time.Duration(r.IntN(3000))*time.Microsecond)
				}
				res, err := p.Reserve(ctx, key)
				cancel()
				switch {
				case g >= honest:
					if err != nil {
						gaveUp.Add(1)
					}
				case err != nil:
					t.Errorf("honest Reserve(%s) = %v; want a decision", key, err)
				case res.OK():
					admitted[g].Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if gaveUp.Load() == 0 {
		t.Fatal("no quitter gave up: the test disconnected no one")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for g := range honest {
		key := fmt.Sprint("honest", g)
		if got, want := s.charged[key], int(admitted[g].Load()); got != want {
			t.Errorf("%s: the store charged %d events for %d admissions; want them equal", key, got, want)
		}
	}
	t.Logf("%d quitters' decisions gave up", gaveUp.Load())
}

// TestSharedGivenUpLeavesTheQueueAtOnce: a queued decision whose context
// ends leaves the queue when its Reserve returns, not when the round trip
// in flight ends (it used to stay, with its context, until then).
func TestSharedGivenUpLeavesTheQueueAtOnce(t *testing.T) {
	p, s, _ := newSharedT(t, 100, pace.WithRoundTrips(1))
	entered, release := holdFirstRoundTrip(s)
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Reserve(bg, "first")
	}()
	<-entered
	stayed := make(chan error, 1)
	go func() {
		_, err := p.Reserve(bg, "stayer")
		stayed <- err
	}()
	waitFor(t, "1 decision queued", func() bool { return pace.QueuedDecisions(p) == 1 })
	ctx, cancel := context.WithCancel(bg)
	quit := make(chan error, 1)
	go func() {
		_, err := p.Reserve(ctx, "quitter")
		quit <- err
	}()
	waitFor(t, "2 decisions queued", func() bool { return pace.QueuedDecisions(p) == 2 })
	cancel()
	if err := <-quit; !errors.Is(err, context.Canceled) {
		t.Fatalf("the queued decision whose context ended = %v; want context.Canceled", err)
	}
	if n := pace.QueuedDecisions(p); n != 1 {
		t.Fatalf("%d decisions queued once the one that gave up returned; want 1", n)
	}
	close(release)
	<-done
	if err := <-stayed; err != nil {
		t.Fatalf("the decision that stayed = %v; want a decision", err)
	}
}
