package pace_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/driver"
	"github.com/ratepace/pace/internal/benchkit"
	"github.com/ratepace/pace/internal/fakeclock"
	"github.com/ratepace/pace/memory"
)

var bg = context.Background()

// newSharedT returns a Shared of rate per second on a spy store, both on one
// fake clock (the store's and the local tier's).
func newSharedT(t testing.TB, rate float64, opts ...pace.Option) (*pace.Shared, *spy, *fakeclock.Clock) {
	t.Helper()
	c := newClock()
	s := newSpy(c.Now)
	p, err := pace.NewShared(s, rate, append([]pace.Option{pace.WithClock(c.Now)}, opts...)...)
	if err != nil {
		t.Fatalf("NewShared(%v) = %v", rate, err)
	}
	return p, s, c
}

// sharedCounts is a SharedObserver that counts.
type sharedCounts struct {
	mu         sync.Mutex
	decided    map[string]int // "path ok" or "path refused"
	roundTrips []int
	returned   map[pace.Source]int
}

func newSharedCounts() *sharedCounts {
	return &sharedCounts{decided: map[string]int{}, returned: map[pace.Source]int{}}
}

func (o *sharedCounts) Decided(path pace.Source, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	k := path.String() + " refused"
	if ok {
		k = path.String() + " ok"
	}
	o.decided[k]++
}

func (o *sharedCounts) Failed(string, error, bool) {}

func (o *sharedCounts) RoundTrip(n int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.roundTrips = append(o.roundTrips, n)
}

func (o *sharedCounts) Returned(path pace.Source) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.returned[path]++
}

func (o *sharedCounts) get(k string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.decided[k]
}

func TestNewSharedRejects(t *testing.T) {
	s := newSpy(nil)
	fb, _ := pace.New(1)
	cases := []struct {
		name string
		s    driver.Taker
		rate float64
		opts []pace.Option
	}{
		{"nil store", nil, 1, nil},
		{"zero rate", s, 0, nil},
		{"NaN rate", s, math.NaN(), nil},
		{"infinite rate", s, math.Inf(1), nil},
		{"rate above MaxRate", s, 2 * pace.MaxRate, nil},
		{"zero limit", s, 1, []pace.Option{pace.WithQuota(0, time.Hour)}},
		{"NaN limit", s, 1, []pace.Option{pace.WithQuota(math.NaN(), time.Hour)}},
		{"zero period", s, 1, []pace.Option{pace.WithQuota(10, 0)}},
		{"negative period", s, 1, []pace.Option{pace.WithQuota(10, -time.Hour)}},
		{"limit too slow", s, 1, []pace.Option{pace.WithQuota(1, 100*365*24*time.Hour)}},
		{"too many limits", s, 1, []pace.Option{pace.WithQuota(10, time.Minute), pace.WithQuota(100, time.Hour), pace.WithQuota(1000, 24*time.Hour), pace.WithQuota(5000, 7*24*time.Hour)}},
		{"nil fallback", s, 1, []pace.Option{pace.WithFallback(nil, time.Second)}},
		{"zero fallback timeout", s, 1, []pace.Option{pace.WithFallback(fb, 0)}},
		{"zero round trips", s, 1, []pace.Option{pace.WithRoundTrips(0)}},
	}
	for _, c := range cases {
		p, err := pace.NewShared(c.s, c.rate, c.opts...)
		if !errors.Is(err, pace.ErrInvalidArgument) || p != nil {
			t.Errorf("%s: NewShared = %v, %v; want nil, ErrInvalidArgument", c.name, p, err)
		}
	}
	p, err := pace.NewShared(s, 20, pace.WithQuota(1000, time.Hour), pace.WithQuota(10000, 24*time.Hour),
		pace.WithFallback(fb, time.Second), pace.WithRoundTrips(4), nil)
	if err != nil {
		t.Fatalf("NewShared with MaxShapes limits = %v", err)
	}
	if got := p.Shapes(); len(got) != 3 || got[0].Interval() != 50*time.Millisecond || got[1].Interval() != 3600*time.Millisecond {
		t.Fatalf("Shapes() = %v; want 20/s, 1000/h, 10000/day", got)
	}
}

// TestSharedKeys: bad keys are errors that never echo the key, and decide
// nothing at the store.
func TestSharedKeys(t *testing.T) {
	p, s, _ := newSharedT(t, 1)
	for _, key := range []string{"", "secret-client-id" + strings.Repeat("x", driver.MaxKeyLen)} {
		r, err := p.Reserve(bg, key)
		if !errors.Is(err, pace.ErrInvalidArgument) || r.OK() {
			t.Fatalf("Reserve(%d-byte key) = %v, %v; want refused, ErrInvalidArgument", len(key), r.OK(), err)
		}
		if key != "" && strings.Contains(err.Error(), "secret") {
			t.Fatalf("error %q echoes the key", err)
		}
		if ok, err := p.Allow(bg, key); ok || !errors.Is(err, pace.ErrInvalidArgument) {
			t.Fatalf("Allow(%d-byte key) = %v, %v; want false, ErrInvalidArgument", len(key), ok, err)
		}
	}
	if n := s.RoundTrips.Load(); n != 0 {
		t.Fatalf("%d round trips for invalid keys; want 0", n)
	}
	// Any other bytes are a key, binary ones included.
	if ok, err := p.Allow(bg, "\x00\xff"); !ok || err != nil {
		t.Fatalf("Allow(binary key) = %v, %v; want true, nil", ok, err)
	}
}

// TestSharedStepScript walks one key through a story, as TestStepScript does
// for Pace: the same answers, now from the store and the local tier.
func TestSharedStepScript(t *testing.T) {
	o := newSharedCounts()
	p, s, c := newSharedT(t, 4, pace.WithObserver(o)) // capacity 4, one event every 250 ms
	steps := []struct {
		at        time.Duration
		ok        bool
		remaining int
		retry     time.Duration
		path      pace.Source
	}{
		{0, true, 3, 0, pace.SourceStore},
		{0, true, 2, 0, pace.SourceStore},
		{0, true, 1, 0, pace.SourceStore},
		{0, true, 0, 0, pace.SourceStore},
		// The last admission left nothing: the local tier knows until when.
		{0, false, 0, 250 * time.Millisecond, pace.SourceHeld},
		{100 * time.Millisecond, false, 0, 150 * time.Millisecond, pace.SourceHeld},
		{250 * time.Millisecond, true, 0, 0, pace.SourceStore},
		{1250 * time.Millisecond, true, 3, 0, pace.SourceStore},
	}
	for i, st := range steps {
		c.Set(start.Add(st.at))
		r, err := p.Reserve(bg, "k")
		if err != nil || r.OK() != st.ok || r.Remaining() != st.remaining || r.RetryAfter() != st.retry || r.Source() != st.path {
			t.Fatalf("step %d at %v: Reserve = ok %v, %d left, retry %v, %v, err %v; want ok %v, %d left, retry %v, %v",
				i, st.at, r.OK(), r.Remaining(), r.RetryAfter(), r.Source(), err, st.ok, st.remaining, st.retry, st.path)
		}
	}
	if n := s.RoundTrips.Load(); n != 6 {
		t.Fatalf("%d round trips; want 6 (the local tier answered twice)", n)
	}
	if got := o.get("held refused"); got != 2 {
		t.Fatalf("observer counted %d local refusals; want 2", got)
	}
	if got := o.get("store ok"); got != 6 {
		t.Fatalf("observer counted %d store admissions; want 6", got)
	}
}

// TestSharedRefusalIsRemembered: a refusal by the store (here, because
// another replica emptied the key) is answered locally until its wait has
// passed, with the wait left, and the key's row goes once it has.
func TestSharedRefusalIsRemembered(t *testing.T) {
	c := newClock()
	s := newSpy(c.Now)
	a, _ := pace.NewShared(s, 2, pace.WithClock(c.Now))
	b, _ := pace.NewShared(s, 2, pace.WithClock(c.Now))
	for range 2 {
		if ok, _ := a.Allow(bg, "k"); !ok {
			t.Fatal("a fresh key of 2/s refused")
		}
	}
	c.Advance(100 * time.Millisecond)
	r, _ := b.Reserve(bg, "k")
	if r.OK() || r.Source() != pace.SourceStore || r.RetryAfter() != 400*time.Millisecond {
		t.Fatalf("b's first Reserve = %v %v %v; want refused by the store, retry after 400ms", r.OK(), r.Source(), r.RetryAfter())
	}
	trips := s.RoundTrips.Load()
	c.Advance(300 * time.Millisecond)
	for range 1000 {
		r, _ := b.Reserve(bg, "k")
		if r.OK() || r.Source() != pace.SourceHeld || r.RetryAfter() != 100*time.Millisecond {
			t.Fatalf("b's Reserve at 400ms = %v %v %v; want refused locally, retry after 100ms", r.OK(), r.Source(), r.RetryAfter())
		}
	}
	if s.RoundTrips.Load() != trips {
		t.Fatal("local refusals made round trips")
	}
	if b.Len() != 1 {
		t.Fatalf("b.Len() = %d; want 1 row for the refused key", b.Len())
	}
	c.Advance(100 * time.Millisecond)
	if r, _ := b.Reserve(bg, "k"); !r.OK() || r.Source() != pace.SourceStore {
		t.Fatalf("b's Reserve at 500ms = %v %v; want admitted by the store", r.OK(), r.Source())
	}
	c.Advance(2 * time.Second)
	b.Allow(bg, "k") // a decision past the horizon sweeps its shard
	if b.Len() != 0 {
		t.Fatalf("b.Len() = %d after two horizons; want 0", b.Len())
	}
}

// TestSharedReturn: Return gives the event back at the store, once; a
// refused or returned reservation gives nothing; a Return in this process
// forgets the key's local refusal.
func TestSharedReturn(t *testing.T) {
	o := newSharedCounts()
	p, s, c := newSharedT(t, 2, pace.WithObserver(o))
	r1, _ := p.Reserve(bg, "k")
	r2, _ := p.Reserve(bg, "k")
	if !r1.OK() || !r2.OK() || r2.Remaining() != 0 {
		t.Fatal("two events of a 2/s key refused")
	}
	r3, _ := p.Reserve(bg, "k")
	if r3.OK() || r3.Source() != pace.SourceHeld {
		t.Fatalf("third event: %v %v; want refused locally", r3.OK(), r3.Source())
	}
	if err := r3.Return(bg); err != nil || s.Refunds.Load() != 0 {
		t.Fatalf("Return of a refused reservation = %v, %d refunds; want nil, 0", err, s.Refunds.Load())
	}
	c.Advance(100 * time.Millisecond)
	if err := r2.Return(bg); err != nil {
		t.Fatal(err)
	}
	if err := r2.Return(bg); err != nil || s.Refunds.Load() != 1 {
		t.Fatalf("second Return = %v, %d refunds; want nil, 1", err, s.Refunds.Load())
	}
	if r2.OK() {
		t.Fatal("a returned reservation still reports OK")
	}
	// The local refusal is forgotten: the store decides, and has room for one.
	r4, _ := p.Reserve(bg, "k")
	if !r4.OK() || r4.Source() != pace.SourceStore || r4.Remaining() != 0 {
		t.Fatalf("after the return: %v %v %d left; want admitted by the store, 0 left", r4.OK(), r4.Source(), r4.Remaining())
	}
	r5, _ := p.Reserve(bg, "k")
	if r5.OK() || r5.RetryAfter() != 400*time.Millisecond {
		t.Fatalf("after the return and a take: %v, retry %v; want refused for 400ms", r5.OK(), r5.RetryAfter())
	}
	// Returning everything leaves no row at the store.
	r1.Return(bg)
	r4.Return(bg)
	if n := s.Len(); n != 0 {
		t.Fatalf("store rows after returning every event at once = %d; want 0", n)
	}
	if o.returned[pace.SourceStore] != 3 {
		t.Fatalf("observer counted %d returns; want 3", o.returned[pace.SourceStore])
	}
}

// TestSharedShapes: 5/s and 20/min on one key admit exactly what both allow,
// against a model made of two separate buckets; a refusal by either debits
// neither.
func TestSharedShapes(t *testing.T) {
	p, _, c := newSharedT(t, 5, pace.WithQuota(20, time.Minute))
	perSec, _ := driver.NewShape(5, 5, 1)
	perMin, _ := driver.NewShape(20, 20.0/60, 1)
	var tatS, tatM time.Duration
	admitted := 0
	for step := range 3001 { // every 40 ms for two minutes
		now := time.Duration(step) * 40 * time.Millisecond
		c.Set(start.Add(now))
		nextS, waitS, okS := perSec.Take(tatS, now)
		nextM, waitM, okM := perMin.Take(tatM, now)
		want := okS && okM
		if want {
			tatS, tatM = nextS, nextM
			admitted++
		}
		r, err := p.Reserve(bg, "k")
		if err != nil || r.OK() != want {
			t.Fatalf("at %v: Reserve = %v, %v; want %v", now, r.OK(), err, want)
		}
		if !want && r.RetryAfter() != max(waitS, waitM) {
			t.Fatalf("at %v: RetryAfter = %v; want %v", now, r.RetryAfter(), max(waitS, waitM))
		}
	}
	if admitted != 20+40 {
		t.Fatalf("model admitted %d in two minutes; want 60", admitted)
	}

	// A refusal by the minute limit debits not the second's: refused
	// attempts from many fresh replicas (no local tier) just before the
	// minute limit's next take leave that take free.
	q, s, c := newSharedT(t, 5, pace.WithQuota(20, time.Minute))
	for i := range 21 { // 5 at once, then one every 200 ms: the minute's 20 and the one it refilled by 3 s
		c.Set(start.Add(time.Duration(max(i-4, 0)) * 200 * time.Millisecond))
		if ok, _ := q.Allow(bg, "k"); !ok {
			t.Fatalf("take %d at %v refused", i, c.Elapsed())
		}
	}
	c.Set(start.Add(3400 * time.Millisecond))
	if r, _ := q.Reserve(bg, "k"); r.OK() || r.RetryAfter() != 2600*time.Millisecond {
		t.Fatalf("take at 3.4 s = %v, retry %v; want refused by the minute limit until 6 s", r.OK(), r.RetryAfter())
	}
	c.Set(start.Add(5900 * time.Millisecond))
	for range 100 {
		fresh, _ := pace.NewShared(s, 5, pace.WithQuota(20, time.Minute), pace.WithClock(c.Now))
		if ok, _ := fresh.Allow(bg, "k"); ok {
			t.Fatal("a take the minute limit refuses was admitted")
		}
	}
	c.Set(start.Add(6 * time.Second))
	fresh, _ := pace.NewShared(s, 5, pace.WithQuota(20, time.Minute), pace.WithClock(c.Now))
	if ok, _ := fresh.Allow(bg, "k"); !ok {
		t.Fatal("the minute limit's next take refused: the refusals debited the per-second limit")
	}

	// A refusal by the second limit debits not the minute's.
	q, s, c = newSharedT(t, 5, pace.WithQuota(20, time.Minute))
	for range 5 {
		q.Allow(bg, "k")
	}
	for range 100 {
		fresh, _ := pace.NewShared(s, 5, pace.WithQuota(20, time.Minute), pace.WithClock(c.Now))
		if ok, _ := fresh.Allow(bg, "k"); ok {
			t.Fatal("a sixth take within the second admitted")
		}
	}
	for i := range 15 {
		c.Advance(200 * time.Millisecond)
		if ok, _ := q.Allow(bg, "k"); !ok {
			t.Fatalf("take %d of the minute's remaining 15 refused: the refusals debited the minute limit", i)
		}
	}
}

// TestSharedBatches: with one round trip in flight at most, decisions
// arriving while it is go together in the next one; a lone decision goes at
// once, alone.
func TestSharedBatches(t *testing.T) {
	o := newSharedCounts()
	p, s, _ := newSharedT(t, 100, pace.WithObserver(o), pace.WithRoundTrips(1))
	if ok, _ := p.Allow(bg, "alone"); !ok {
		t.Fatal("a lone decision refused")
	}
	if len(o.roundTrips) != 1 || o.roundTrips[0] != 1 {
		t.Fatalf("round trips %v; want [1]", o.roundTrips)
	}

	entered, release := holdFirstRoundTrip(s)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		p.Allow(bg, "leader")
	}()
	<-entered
	const n = 10
	var admitted atomic.Int64
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if ok, _ := p.Allow(bg, string(rune('a'+i))); ok {
				admitted.Add(1)
			}
		}()
	}
	waitFor(t, "10 decisions queued", func() bool { return pace.QueuedDecisions(p) == n })
	close(release)
	wg.Wait()
	if admitted.Load() != n {
		t.Fatalf("%d of %d queued decisions admitted", admitted.Load(), n)
	}
	if want := []int{1, 1, n}; !equalInts(o.roundTrips, want) {
		t.Fatalf("round trips %v; want %v", o.roundTrips, want)
	}
	if s.Decisions.Load() != 2+n {
		t.Fatalf("store decided %d keys; want %d", s.Decisions.Load(), 2+n)
	}
}

// TestSharedRoundTripsInFlight: by default a decision that finds one round
// trip in flight goes at once, alone, in a second one, however many the
// first carries; with two in flight, decisions queue until one ends, and
// the queue goes whole in its place.
func TestSharedRoundTripsInFlight(t *testing.T) {
	o := newSharedCounts()
	p, s, _ := newSharedT(t, 100, pace.WithObserver(o))
	trips := holdRoundTrips(s)
	var wg sync.WaitGroup
	decide := func(key string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if ok, err := p.Allow(bg, key); !ok || err != nil {
				t.Errorf("Allow(%s) = %v, %v; want admitted", key, ok, err)
			}
		}()
	}
	decide("a")
	a := <-trips
	decide("b") // one in flight: a round trip free, at once
	b := <-trips
	if a.keys != 1 || b.keys != 1 {
		t.Fatalf("first round trips of %d and %d keys; want 1 and 1", a.keys, b.keys)
	}
	const n = 10
	for i := range n {
		decide(fmt.Sprint("q", i))
	}
	waitFor(t, "10 decisions queued behind two round trips", func() bool { return pace.QueuedDecisions(p) == n })
	close(a.release) // the queue goes in its place
	q := <-trips
	if q.keys != n {
		t.Fatalf("the queue went in a round trip of %d keys; want %d", q.keys, n)
	}
	close(b.release)
	waitFor(t, "a and b decided", func() bool { return s.Decisions.Load() == 2 })
	// One round trip of 10 in flight: a decision goes beside it at once,
	// alone; the next ones queue until one of the two ends.
	decide("r0")
	r := <-trips
	if r.keys != 1 {
		t.Fatalf("a decision beside a round trip of %d went with %d keys; want 1", n, r.keys)
	}
	for i := 1; i < n; i++ {
		decide(fmt.Sprint("r", i))
	}
	waitFor(t, "9 decisions queued behind two round trips", func() bool { return pace.QueuedDecisions(p) == n-1 })
	close(q.release)
	u := <-trips
	if u.keys != n-1 {
		t.Fatalf("the queue went in a round trip of %d keys; want %d", u.keys, n-1)
	}
	close(r.release)
	close(u.release)
	wg.Wait()
	if s.Decisions.Load() != 2+2*n {
		t.Fatalf("store decided %d keys; want %d", s.Decisions.Load(), 2+2*n)
	}
}

// heldTrip is a round trip that holdRoundTrips keeps in flight.
type heldTrip struct {
	keys    int
	release chan struct{}
}

// holdRoundTrips makes every round trip of s wait in flight: each is sent
// on the returned channel once it has started, and goes on once its
// release is closed.
func holdRoundTrips(s *spy) <-chan heldTrip {
	trips := make(chan heldTrip, 16)
	hook := func(ctx context.Context, keys int) error {
		h := heldTrip{keys: keys, release: make(chan struct{})}
		trips <- h
		<-h.release
		return nil
	}
	s.Hook.Store(&hook)
	return trips
}

// holdFirstRoundTrip makes s's next round trip wait in flight: entered is
// closed once it has started, and it goes on once release is closed.
func holdFirstRoundTrip(s *spy) (entered, release chan struct{}) {
	entered, release = make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	hook := func(ctx context.Context, keys int) error {
		if first.CompareAndSwap(false, true) {
			close(entered)
			<-release
		}
		return nil
	}
	s.Hook.Store(&hook)
	return entered, release
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// waitFor spins (yielding) until cond holds, for at most ten seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached in 10s", what)
		}
		runtime.Gosched()
	}
}

// TestSharedQueuedCallerGivesUp: a queued decision whose context ends
// returns its error at once; the round trip in flight and the others go on.
func TestSharedQueuedCallerGivesUp(t *testing.T) {
	p, s, _ := newSharedT(t, 100, pace.WithRoundTrips(1))
	entered, release := holdFirstRoundTrip(s)
	leaderDone := make(chan bool)
	go func() {
		ok, _ := p.Allow(bg, "leader")
		leaderDone <- ok
	}()
	<-entered
	ctx, cancel := context.WithCancel(bg)
	quitter := make(chan error)
	go func() {
		_, err := p.Allow(ctx, "quitter")
		quitter <- err
	}()
	stayer := make(chan bool)
	go func() {
		ok, _ := p.Allow(bg, "stayer")
		stayer <- ok
	}()
	waitFor(t, "2 decisions queued", func() bool { return pace.QueuedDecisions(p) == 2 })
	cancel()
	if err := <-quitter; !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled queued decision returned %v; want context.Canceled", err)
	}
	close(release)
	if !<-leaderDone || !<-stayer {
		t.Fatal("the leader or the remaining queued decision was refused")
	}
	if s.Decisions.Load() != 2 {
		t.Fatalf("store decided %d keys; want 2 (the abandoned one dropped before its round trip)", s.Decisions.Load())
	}
}

// TestSharedLeaderGivesUp: when the caller leading a round trip gives up,
// it gets its error and the decisions it carried go to the next round trip.
func TestSharedLeaderGivesUp(t *testing.T) {
	p, s, _ := newSharedT(t, 100, pace.WithRoundTrips(1))
	entered, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int64
	hook := func(ctx context.Context, keys int) error {
		switch calls.Add(1) {
		case 1: // the first round trip: wait for its caller to give up
			close(entered)
			<-ctx.Done()
			return ctx.Err()
		case 2: // the second carries the leader's ... and the follower's
			<-release
		}
		return nil
	}
	s.Hook.Store(&hook)
	ctx, cancel := context.WithCancel(bg)
	leader := make(chan error)
	go func() {
		_, err := p.Allow(ctx, "leader")
		leader <- err
	}()
	<-entered
	follower := make(chan bool)
	go func() {
		ok, err := p.Allow(bg, "follower")
		follower <- ok && err == nil
	}()
	waitFor(t, "1 decision queued", func() bool { return pace.QueuedDecisions(p) == 1 })
	cancel()
	if err := <-leader; !errors.Is(err, context.Canceled) {
		t.Fatalf("the leader returned %v; want context.Canceled", err)
	}
	close(release)
	if !<-follower {
		t.Fatal("the follower's decision failed with its leader")
	}
	if s.RoundTrips.Load() != 1 {
		t.Fatalf("%d completed round trips; want 1", s.RoundTrips.Load())
	}
}

var errDown = errors.New("standin: down")

// TestSharedFallback: while the store fails, decisions go to the fallback
// without errors; the store is probed once per timeout; once it answers,
// decisions go back to it. Without a fallback the error is returned.
func TestSharedFallback(t *testing.T) {
	c := newClock()
	s := newSpy(c.Now)
	fb, _ := pace.New(1, pace.WithClock(c.Now)) // one replica of two at 2/s
	o := newSharedCounts()
	p, err := pace.NewShared(s, 2, pace.WithClock(c.Now), pace.WithFallback(fb, 100*time.Millisecond), pace.WithObserver(o))
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := pace.NewShared(s, 2, pace.WithClock(c.Now))

	var down atomic.Bool
	var tries atomic.Int64
	hook := func(ctx context.Context, keys int) error {
		if down.Load() {
			tries.Add(1)
			return errDown
		}
		return nil
	}
	s.Hook.Store(&hook)
	down.Store(true)
	if _, err := plain.Reserve(bg, "k"); !errors.Is(err, errDown) {
		t.Fatalf("without a fallback, Reserve on a failing store = %v; want its error", err)
	}
	tries.Store(0)
	r, err := p.Reserve(bg, "k")
	if err != nil || !r.OK() || r.Source() != pace.SourceFallback {
		t.Fatalf("Reserve on a failing store = %v %v %v; want admitted by the fallback", r.OK(), r.Source(), err)
	}
	for range 100 {
		r, err := p.Reserve(bg, "k")
		if err != nil || r.OK() || r.Source() != pace.SourceFallback || r.RetryAfter() != time.Second {
			t.Fatalf("Reserve while the store is down = %v %v %v %v; want refused by the fallback, retry after 1s", r.OK(), r.Source(), r.RetryAfter(), err)
		}
	}
	if n := tries.Load(); n != 1 {
		t.Fatalf("%d round trips within the timeout after a failure; want 1", n)
	}
	c.Advance(100 * time.Millisecond)
	for range 2 { // the first starts the probe, in the background
		if r, err := p.Reserve(bg, "k"); err != nil || r.Source() != pace.SourceFallback {
			t.Fatalf("Reserve one timeout after a failure = %v, %v; want the fallback, not waiting for the probe", r.Source(), err)
		}
	}
	pace.WaitProbes(p)
	if n := tries.Load(); n != 2 {
		t.Fatalf("%d calls to the store one timeout after a failure; want 2 (one probe)", n)
	}
	// A reservation of the fallback is returned to the fallback.
	c.Advance(time.Second)
	r2, _ := p.Reserve(bg, "k2")
	if !r2.OK() || r2.Source() != pace.SourceFallback || fb.Len() == 0 {
		t.Fatal("fallback did not admit a new key")
	}
	r2.Return(bg)
	if ok, _ := fb.Peek("k2"); !ok || o.returned[pace.SourceFallback] != 1 {
		t.Fatal("Return of a fallback reservation did not give it back to the fallback")
	}

	down.Store(false)
	c.Advance(100 * time.Millisecond)
	if r, err := p.Reserve(bg, "probe"); err != nil || r.Source() != pace.SourceFallback {
		t.Fatalf("the decision that starts the probe = %v, %v; want the fallback", r.Source(), err)
	}
	pace.WaitProbes(p)
	for i := range 2 {
		r, err := p.Reserve(bg, "k")
		if err != nil || !r.OK() || r.Source() != pace.SourceStore {
			t.Fatalf("take %d after the store is back = %v %v %v; want admitted by the store", i, r.OK(), r.Source(), err)
		}
	}
	if o.get("fallback ok") != 3 || o.get("fallback refused") != 102 {
		t.Fatalf("observer: %v", o.decided)
	}
}

// TestSharedFallbackTimeout: a store that does not answer within the
// fallback's timeout counts as failing.
func TestSharedFallbackTimeout(t *testing.T) {
	s := newSpy(nil)
	fb, _ := pace.New(10)
	p, _ := pace.NewShared(s, 20, pace.WithFallback(fb, 20*time.Millisecond))
	var hang atomic.Bool
	hang.Store(true)
	hook := func(ctx context.Context, keys int) error {
		if hang.Load() {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}
	s.Hook.Store(&hook)
	r, err := p.Reserve(bg, "k")
	if err != nil || !r.OK() || r.Source() != pace.SourceFallback {
		t.Fatalf("Reserve on a hanging store = %v %v %v; want admitted by the fallback", r.OK(), r.Source(), err)
	}
	// The caller's own deadline is its own: no fallback for it.
	hang.Store(false)
	ctx, cancel := context.WithCancel(bg)
	cancel()
	waitFor(t, "the probe due", func() bool {
		_, err := p.Reserve(ctx, "k")
		return errors.Is(err, context.Canceled)
	})
}

// TestSharedProbeWindowFromTheFailure: after a round trip that failed only
// once its whole timeout had passed, the next probe is one timeout after the
// failure, not after the start of that round trip (which would make every
// decision a probe, each waiting a timeout).
func TestSharedProbeWindowFromTheFailure(t *testing.T) {
	c := newClock()
	s := newSpy(c.Now)
	fb, _ := pace.New(10, pace.WithClock(c.Now))
	p, _ := pace.NewShared(s, 20, pace.WithClock(c.Now), pace.WithFallback(fb, 100*time.Millisecond))
	var tries atomic.Int64
	hook := func(ctx context.Context, keys int) error {
		tries.Add(1)
		c.Advance(100 * time.Millisecond) // the store hangs until the timeout
		return context.DeadlineExceeded
	}
	s.Hook.Store(&hook)
	for range 10 {
		if r, err := p.Reserve(bg, "k"); err != nil || r.Source() != pace.SourceFallback {
			t.Fatalf("Reserve on a hanging store = %v, %v; want the fallback", r.Source(), err)
		}
	}
	if n := tries.Load(); n != 1 {
		t.Fatalf("%d round trips at one instant after a timeout; want 1", n)
	}
}

// BenchmarkSharedReserve measures what Shared adds to a store's Take on the
// memory store (no network, so the batching and the local tier are what is
// measured): 10,000 keys, every decision admitted, serial (every decision
// alone in its round trip) and parallel (decisions queue and share).
func BenchmarkSharedReserve(b *testing.B) {
	keys := benchkit.Keys(b, 10000)
	benchkit.Run(b, len(keys), func(b *testing.B) benchkit.Decide {
		p, err := pace.NewShared(memory.New(), 1e6)
		if err != nil {
			b.Fatal(err)
		}
		return func(i int) bool {
			ok, err := p.Allow(bg, keys[i])
			return ok && err == nil
		}
	}, true)
}

// TestSharedFullInIsTheTightests: FullIn is the time until the limit that
// Remaining describes is full again, whichever of the pace and its quotas
// that is (a RateLimit item's r and t describe one quota).
func TestSharedFullInIsTheTightests(t *testing.T) {
	for _, c := range []struct {
		name  string
		rate  float64
		quota pace.Option
		takes int
		left  int
		full  time.Duration
	}{
		// 4 of 5 left in the hour: one event of 720 s missing.
		{"quota tightest", 10, pace.WithQuota(5, time.Hour), 1, 4, 720 * time.Second},
		// The pace of 2/s spent, 98 of 100 left in the hour.
		{"pace tightest", 2, pace.WithQuota(100, time.Hour), 2, 0, time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, _, _ := newSharedT(t, c.rate, c.quota)
			var r pace.SharedReservation
			for range c.takes {
				var err error
				if r, err = p.Reserve(bg, "k"); err != nil || !r.OK() {
					t.Fatalf("Reserve = %v, %v", r.OK(), err)
				}
			}
			if r.Remaining() != c.left || r.FullIn() != c.full {
				t.Fatalf("Remaining, FullIn = %d, %v; want %d, %v", r.Remaining(), r.FullIn(), c.left, c.full)
			}
		})
	}
}
