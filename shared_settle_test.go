package pace_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratepace/pace"
)

// newTokens returns a Shared of 100 tokens a second with a bucket of 1000
// and 5 requests a minute, on a spy store, both on one fake clock.
func newTokens(t *testing.T, opts ...pace.Option) (*pace.Shared, *spy) {
	t.Helper()
	p, s, _ := newSharedT(t, 100, append([]pace.Option{pace.WithBurst(1000), pace.WithQuota(5, time.Minute)}, opts...)...)
	return p, s
}

func reserveN(t *testing.T, p *pace.Shared, key string, n int) *pace.SharedReservation {
	t.Helper()
	r, err := p.ReserveN(bg, key, n)
	if err != nil {
		t.Fatalf("ReserveN(%d): %v", n, err)
	}
	return &r
}

// TestSharedReserveNSettle: a reservation of n tokens and one request,
// settled below, at and above what it reserved, with the exact state each
// leaves.
func TestSharedReserveNSettle(t *testing.T) {
	p, _ := newTokens(t)
	a := reserveN(t, p, "k", 600)
	if !a.OK() || a.Remaining() != 4 { // 400 tokens, 4 requests: the requests are the fewest
		t.Fatalf("ReserveN(600) = %v, remaining %d; want admitted, 4", a.OK(), a.Remaining())
	}
	if b := reserveN(t, p, "k", 500); b.OK() || b.RetryAfter() != time.Second {
		t.Fatalf("ReserveN(500) with 400 left = %v, retry %v; want refused, 1s (100 tokens at 100/s)", b.OK(), b.RetryAfter())
	}
	if err := a.Settle(bg, 200); err != nil {
		t.Fatal(err)
	}
	// The tightest limit is still the requests: 4 left, full again in 12 s.
	if a.OK() || a.Remaining() != 4 || a.FullIn() != 12*time.Second {
		t.Fatalf("after Settle(200): ok %v, remaining %d, full in %v; want disarmed, 4, 12s", a.OK(), a.Remaining(), a.FullIn())
	}
	if err := a.Settle(bg, 0); err != nil { // disarmed: nothing
		t.Fatal(err)
	}
	c := reserveN(t, p, "k", 800) // 800 left after the settlement
	if !c.OK() {
		t.Fatal("ReserveN(800) after settling 600 at 200 refused; want admitted (800 left)")
	}
	if d := reserveN(t, p, "k", 1); d.OK() {
		t.Fatal("ReserveN(1) with nothing left admitted")
	}
	// An overdraft: 800 reserved, 1800 used. The key owes 1000 tokens
	// beyond an empty bucket: refused for 10 s, then one token at 10.01 s.
	if err := c.Settle(bg, 1800); err != nil {
		t.Fatal(err)
	}
	if d := reserveN(t, p, "k", 1); d.OK() || d.RetryAfter() != 10*time.Second+10*time.Millisecond {
		t.Fatalf("after an overdraft of 1000, ReserveN(1) = %v, retry %v; want refused, 10.01s", d.OK(), d.RetryAfter())
	}
}

// TestSharedRequestQuota: a quota counts reservations whatever their
// size; settling at zero gives the request back, at any other count
// it stays spent.
func TestSharedRequestQuota(t *testing.T) {
	p, _ := newTokens(t)
	for i := range 4 {
		r := reserveN(t, p, "k", 1)
		if !r.OK() {
			t.Fatalf("request %d refused", i)
		}
		if err := r.Settle(bg, 1+i%2); err != nil { // settled at 1 or 2: kept
			t.Fatal(err)
		}
	}
	last := reserveN(t, p, "k", 10)
	if !last.OK() {
		t.Fatal("the fifth request refused")
	}
	if r := reserveN(t, p, "k", 1); r.OK() {
		t.Fatal("a sixth request within the minute admitted; want refused by the request quota")
	} else if r.RetryAfter() != 12*time.Second {
		t.Fatalf("sixth request's retry %v; want 12s (one request of 5 a minute)", r.RetryAfter())
	}
	if err := last.Settle(bg, 0); err != nil {
		t.Fatal(err)
	}
	if r := reserveN(t, p, "k", 1); !r.OK() {
		t.Fatal("after a request settled at zero, the next refused; want its request back")
	}
}

// TestSharedForgersSpendNothing: reservations settled at zero at once,
// of any size, leave the key as they found it, on every limit.
func TestSharedForgersSpendNothing(t *testing.T) {
	p, _ := newTokens(t)
	for n := 1; n <= 1000; n += 111 {
		r := reserveN(t, p, "victim", n)
		if !r.OK() {
			t.Fatalf("forgery of %d refused", n)
		}
		if err := r.Settle(bg, 0); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		n := 200
		if r := reserveN(t, p, "victim", n); !r.OK() {
			t.Fatalf("the owner's reservation %d of %d refused after forgeries", i, n)
		}
	}
}

// TestSharedReserveNNeverFits: a count outside [1, the smallest bucket
// counted in units] is refused at once, as never fitting, without a round
// trip; a quota does not bound it.
func TestSharedReserveNNeverFits(t *testing.T) {
	p, s := newTokens(t)
	for _, n := range []int{0, -1, 1001, 1 << 40} {
		r := reserveN(t, p, "k", n)
		if r.OK() || r.RetryAfter() != never || r.Source() != pace.SourceHeld {
			t.Fatalf("ReserveN(%d) = %v, retry %v, %v; want refused, never, held", n, r.OK(), r.RetryAfter(), r.Source())
		}
	}
	if n := s.RoundTrips.Load(); n != 0 {
		t.Fatalf("%d round trips for counts that never fit; want 0", n)
	}
	if r := reserveN(t, p, "k", 1000); !r.OK() {
		t.Fatal("ReserveN(1000) with a bucket of 1000 refused")
	}
	if _, err := p.ReserveN(bg, "", 1); !errors.Is(err, pace.ErrInvalidArgument) {
		t.Fatalf("ReserveN with an empty key: %v; want ErrInvalidArgument", err)
	}
}

// TestSharedHeldForTheWaitOfOne: after a refusal of n units, the local
// tier holds the key only as long as one unit would wait, so a smaller
// reservation the store would admit is not refused in process.
func TestSharedHeldForTheWaitOfOne(t *testing.T) {
	p, s := newTokens(t)
	big := reserveN(t, p, "k", 900)
	if !big.OK() {
		t.Fatal("ReserveN(900) refused")
	}
	if r := reserveN(t, p, "k", 500); r.OK() || r.RetryAfter() != 4*time.Second {
		t.Fatalf("ReserveN(500) with 100 left = %v, %v; want refused, 4s", r.OK(), r.RetryAfter())
	}
	trips := s.RoundTrips.Load()
	if r := reserveN(t, p, "k", 100); !r.OK() || r.Source() != pace.SourceStore {
		t.Fatalf("ReserveN(100) with 100 left = %v from %v; want admitted by the store", r.OK(), r.Source())
	}
	if s.RoundTrips.Load() != trips+1 {
		t.Fatal("ReserveN(100) made no round trip")
	}
	if r := reserveN(t, p, "k", 1); r.OK() || r.Source() != pace.SourceHeld {
		t.Fatalf("ReserveN(1) with nothing left = %v from %v; want held (the admission emptied the key)", r.OK(), r.Source())
	}
}

// TestSharedSizesShareRoundTrips: decisions that queue together share one
// store call per size; each gets its own answer.
func TestSharedSizesShareRoundTrips(t *testing.T) {
	o := newSharedCounts()
	p, s := newTokens(t, pace.WithObserver(o), pace.WithRoundTrips(1))
	entered, release := holdFirstRoundTrip(s)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		reserveN(t, p, "leader", 1)
	}()
	<-entered
	sizes := []int{3, 1, 3, 7, 1, 3}
	var admitted atomic.Int64
	for i, n := range sizes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := p.ReserveN(bg, string(rune('a'+i)), n)
			if err != nil || !r.OK() || r.Remaining() != 4 {
				t.Errorf("ReserveN(%d) = %v, %d, %v; want admitted with 4 requests left", n, r.OK(), r.Remaining(), err)
				return
			}
			admitted.Add(1)
		}()
	}
	waitFor(t, "6 decisions queued", func() bool { return pace.QueuedDecisions(p) == len(sizes) })
	close(release)
	wg.Wait()
	if admitted.Load() != int64(len(sizes)) {
		t.Fatalf("%d of %d admitted", admitted.Load(), len(sizes))
	}
	if want := []int{1, 2, 3, 1}; !equalInts(o.roundTrips, want) { // the leader; then sizes 1, 3, 7
		t.Fatalf("round trips %v; want %v", o.roundTrips, want)
	}
}

// TestSharedSettleOnTheFallback: a reservation the fallback made is
// settled on the fallback: below gives back, above puts its key in debt.
func TestSharedSettleOnTheFallback(t *testing.T) {
	c := newClock()
	s := newSpy(c.Now)
	fb, _ := pace.New(50, pace.WithClock(c.Now), pace.WithBurst(500))
	p, err := pace.NewShared(s, 100, pace.WithBurst(1000), pace.WithClock(c.Now), pace.WithFallback(fb, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	hook := func(context.Context, int) error { return errDown }
	s.Hook.Store(&hook)
	r := reserveN(t, p, "k", 400)
	if !r.OK() || r.Source() != pace.SourceFallback {
		t.Fatalf("ReserveN(400) on a failing store = %v from %v; want admitted by the fallback", r.OK(), r.Source())
	}
	if err := r.Settle(bg, 100); err != nil {
		t.Fatal(err)
	}
	if r.Remaining() != 400 || r.FullIn() != 2*time.Second {
		t.Fatalf("after settling 400 at 100 on the fallback: remaining %d, full in %v; want 400, 2s", r.Remaining(), r.FullIn())
	}
	if q := fb.ReserveN("k", 300); !q.OK() { // 400 left: 100 more than before the settlement
		t.Fatal("the fallback did not get 300 back")
	}
	if q := reserveN(t, p, "k", 100); !q.OK() {
		t.Fatal("ReserveN(100) on the fallback with 100 left refused")
	} else if err := q.Settle(bg, 600); err != nil {
		t.Fatal(err)
	}
	if ok, wait := fb.Peek("k"); ok || wait != 10*time.Second+20*time.Millisecond {
		t.Fatalf("after an overdraft of 500 on the fallback: Peek %v, %v; want refused for 10.02s", ok, wait)
	}
	if r.Source() != pace.SourceFallback {
		t.Fatal("source lost")
	}
}

// TestSharedUnderEstimatorCannotSustainMoreThanRate: a client that always
// reserves half of what it uses, and asks again as soon as it may, keeps
// at most rate × T + burst + its last overdraft over any run, counted from
// its own settlements, on two replicas.
func TestSharedUnderEstimatorCannotSustainMoreThanRate(t *testing.T) {
	c := newClock()
	s := newSpy(c.Now)
	const rate, burst = 100.0, 200
	var replicas [2]*pace.Shared
	for i := range replicas {
		p, err := pace.NewShared(s, rate, pace.WithBurst(burst), pace.WithClock(c.Now))
		if err != nil {
			t.Fatal(err)
		}
		replicas[i] = p
	}
	const reserve, use = 50, 100
	kept, last := 0, 0
	start := c.Now()
	for i := range 2000 {
		r := reserveN(t, replicas[i%2], "greedy", reserve)
		if !r.OK() {
			c.Advance(r.RetryAfter())
			continue
		}
		if err := r.Settle(bg, use); err != nil {
			t.Fatal(err)
		}
		kept, last = kept+use, use-reserve
		elapsed := c.Now().Sub(start).Seconds()
		if bound := rate*elapsed + burst + float64(last); float64(kept) > bound {
			t.Fatalf("after %v: %d units kept; at most %.0f (rate × T + burst + the last overdraft)", c.Now().Sub(start), kept, bound)
		}
	}
	if elapsed := c.Now().Sub(start).Seconds(); float64(kept)/elapsed > rate*1.05 {
		t.Fatalf("sustained %.1f units a second over %.0f s; the rate is %v", float64(kept)/elapsed, elapsed, rate)
	}
}

// TestSharedSettleOnAFailingStore: Settle disarms before the store is
// called, so a store that fails leaves the reservation as it was taken
// (the estimate stays spent: stricter than the actual), reports the
// error, and a second Settle does nothing.
func TestSharedSettleOnAFailingStore(t *testing.T) {
	p, s := newTokens(t)
	r := reserveN(t, p, "k", 1000)
	if !r.OK() {
		t.Fatal("ReserveN(1000) refused")
	}
	hook := func(context.Context, int) error { return errDown }
	s.Hook.Store(&hook)
	if err := r.Settle(bg, 10); !errors.Is(err, errDown) {
		t.Fatalf("Settle on a failing store = %v; want its error", err)
	}
	s.Hook.Store(nil)
	if err := r.Settle(bg, 10); err != nil || s.Refunds.Load() != 0 {
		t.Fatalf("second Settle = %v after %d refunds; want nothing done", err, s.Refunds.Load())
	}
	if q := reserveN(t, p, "k", 1); q.OK() {
		t.Fatal("after a failed settlement the key had units back; want the estimate still spent")
	}
}
