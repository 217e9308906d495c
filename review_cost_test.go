package pace_test

import (
	"context"
	"math"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/driver"
	"github.com/ratepace/pace/internal/fakeclock"
	"github.com/ratepace/pace/memory"
)

// Adversarial tests of costs settled after the fact (ReserveN and Settle),
// on Pace and Shared. Each states the promise it attacks.

// rcReplicas returns two Shareds (replicas) of rate per second and a
// bucket of burst on one memory store, all on one fake clock.
func rcReplicas(t *testing.T, rate, burst float64, opts ...pace.Option) (a, b *pace.Shared, s *spy, c *fakeclock.Clock) {
	t.Helper()
	c = newClock()
	s = newSpy(c.Now)
	mk := func() *pace.Shared {
		p, err := pace.NewShared(s, rate, append([]pace.Option{pace.WithClock(c.Now), pace.WithBurst(burst)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	return mk(), mk(), s, c
}

// rcReserve is ReserveN failing the test on an error.
func rcReserve(t *testing.T, p *pace.Shared, key string, n int) *pace.SharedReservation {
	t.Helper()
	r, err := p.ReserveN(bg, key, n)
	if err != nil {
		t.Fatalf("ReserveN(%d): %v", n, err)
	}
	return &r
}

// TestReviewCostSharedHugeOverdraftDebits: Settle far above the estimate
// debits, whether or not it fits, up to about 73 years of debt: the key
// is refused afterwards, on this replica and on another.
func TestReviewCostSharedHugeOverdraftDebits(t *testing.T) {
	for _, used := range []int{math.MaxInt, 1 << 40, int(driver.MaxTolerance/time.Second) - 1} {
		t.Run(strconv.Itoa(used), func(t *testing.T) {
			a, b, _, clk := rcReplicas(t, 1, 10)
			r := rcReserve(t, a, "k", 5)
			if !r.OK() {
				t.Fatal("refused")
			}
			if err := r.Settle(bg, used); err != nil {
				t.Fatal(err)
			}
			if r.Remaining() != 0 {
				t.Errorf("Remaining after Settle(%d) = %d; want 0", used, r.Remaining())
			}
			clk.Advance(time.Hour)
			if x := rcReserve(t, b, "k", 1); x.OK() {
				t.Fatalf("another replica an hour after Settle(%d) of 5 reserved: admitted; want refused (the debt)", used)
			}
		})
	}
}

// TestReviewCostSharedSecondOverdraftDebits: two reservations admitted
// together, each settled far above its estimate: the second debt is
// added up to the bound of about 73 years, not dropped.
func TestReviewCostSharedSecondOverdraftDebits(t *testing.T) {
	a, b, _, clk := rcReplicas(t, 1, 10)
	r1, r2 := rcReserve(t, a, "k", 1), rcReserve(t, a, "k", 1)
	big := int(driver.MaxTolerance/time.Second) * 6 / 10 // 0.6 × 73 years of the pace
	if err := r1.Settle(bg, big); err != nil {
		t.Fatal(err)
	}
	if err := r2.Settle(bg, big); err != nil {
		t.Fatal(err)
	}
	if r2.Remaining() != 0 {
		t.Errorf("Remaining after the second overdraft = %d, FullIn %v; want 0", r2.Remaining(), r2.FullIn())
	}
	clk.Advance(time.Duration(big) * time.Second / 10 * 11) // past the first debt alone
	x := rcReserve(t, b, "k", 1)
	t.Logf("past the first debt: ok=%v RetryAfter %v", x.OK(), x.RetryAfter())
	if x.OK() {
		t.Fatal("past the first debt: admitted; the second overdraft was dropped")
	}
}

// TestReviewCostPaceSecondOverdraftDebits: the same on a Pace, whose
// Charge saturates at the bound.
func TestReviewCostPaceSecondOverdraftDebits(t *testing.T) {
	clk := newClock()
	p, err := pace.New(1, pace.WithBurst(10), pace.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	r1, r2 := p.ReserveN("k", 1), p.ReserveN("k", 1)
	big := int(driver.MaxTolerance/time.Second) * 6 / 10
	r1.Settle(big)
	r2.Settle(big)
	clk.Advance(time.Duration(big) * time.Second / 10 * 11)
	if x := p.ReserveN("k", 1); x.OK() {
		t.Fatal("Pace: past the first debt: admitted; the second overdraft was dropped")
	}
}

// TestReviewCostForgerLeavesKeyAsFound: reservations settled at zero
// spend nothing of the pace or of a WithQuota request quota: the key
// decides exactly as a fresh one (Pace and Shared).
func TestReviewCostForgerLeavesKeyAsFound(t *testing.T) {
	a, _, _, _ := rcReplicas(t, 10, 10, pace.WithQuota(2, time.Minute))
	for i := 0; i < 5; i++ {
		r := rcReserve(t, a, "victim", 10)
		if !r.OK() {
			t.Fatalf("forger %d refused", i)
		}
		if err := r.Settle(bg, 0); err != nil {
			t.Fatal(err)
		}
	}
	var seen [2]string
	for i, key := range []string{"victim", "fresh"} {
		for j := 0; j < 3; j++ {
			r := rcReserve(t, a, key, 4)
			seen[i] += strconv.FormatBool(r.OK()) + "/" + strconv.Itoa(r.Remaining()) + "/" + r.FullIn().String() + " "
		}
	}
	if seen[0] != seen[1] {
		t.Errorf("Shared: the forgers' victim decides %q; a fresh key %q", seen[0], seen[1])
	}

	clk := newClock()
	p, err := pace.New(10, pace.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		r := p.ReserveN("victim", 10)
		r.Settle(0)
	}
	for _, key := range []string{"victim", "fresh"} {
		r := p.ReserveN(key, 10)
		if !r.OK() || r.Remaining() != 0 {
			t.Errorf("Pace %s: ok=%v remaining %d; want true, 0", key, r.OK(), r.Remaining())
		}
	}
}

// TestReviewCostUnderestimatorBounded: a client reserving one unit and
// always settling at three keeps at most rate × T + burst + the last
// overdraft over T from idle (Pace and Shared).
func TestReviewCostUnderestimatorBounded(t *testing.T) {
	const rate, burst, T = 10, 10, 100 * time.Second
	bound := int(rate*T.Seconds()) + burst + 2
	t.Run("Pace", func(t *testing.T) {
		clk := newClock()
		p, err := pace.New(rate, pace.WithBurst(burst), pace.WithClock(clk.Now))
		if err != nil {
			t.Fatal(err)
		}
		kept := 0
		for el := time.Duration(0); el <= T; el += 7 * time.Millisecond {
			if r := p.ReserveN("k", 1); r.OK() {
				r.Settle(3)
				kept += 3
			}
			clk.Advance(7 * time.Millisecond)
		}
		if kept > bound || kept < bound-40 {
			t.Fatalf("kept %d over %v; want at most %d (and near it)", kept, T, bound)
		}
	})
	t.Run("Shared", func(t *testing.T) {
		a, b, _, clk := rcReplicas(t, rate, burst)
		kept := 0
		for i, el := 0, time.Duration(0); el <= T; i, el = i+1, el+7*time.Millisecond {
			p := a
			if i%2 == 1 {
				p = b
			}
			if r := rcReserve(t, p, "k", 1); r.OK() {
				if err := r.Settle(bg, 3); err != nil {
					t.Fatal(err)
				}
				kept += 3
			}
			clk.Advance(7 * time.Millisecond)
		}
		if kept > bound || kept < bound-40 {
			t.Fatalf("kept %d over %v; want at most %d (and near it)", kept, T, bound)
		}
	})
}

// TestReviewCostLateSettleNeverAboveFull: a settlement below the estimate
// after the key has refilled gives nothing that lifts it above full.
func TestReviewCostLateSettleNeverAboveFull(t *testing.T) {
	for _, used := range []int{0, 3} {
		t.Run(strconv.Itoa(used), func(t *testing.T) {
			clk := newClock()
			p, err := pace.New(10, pace.WithClock(clk.Now))
			if err != nil {
				t.Fatal(err)
			}
			r := p.ReserveN("k", 10)
			clk.Advance(2 * time.Second)
			r.Settle(used)
			if x := p.ReserveN("k", 10); !x.OK() {
				t.Fatal("Pace: a full bucket refused")
			}
			if x := p.ReserveN("k", 1); x.OK() {
				t.Fatal("Pace: above full after a late settle")
			}

			a, b, _, sclk := rcReplicas(t, 10, 10)
			sr := rcReserve(t, a, "k", 10)
			sclk.Advance(2 * time.Second)
			if err := sr.Settle(bg, used); err != nil {
				t.Fatal(err)
			}
			if x := rcReserve(t, b, "k", 10); !x.OK() {
				t.Fatal("Shared: a full bucket refused")
			}
			if x := rcReserve(t, b, "k", 1); x.OK() {
				t.Fatal("Shared: above full after a late settle")
			}
		})
	}
}

// TestReviewCostSettleAfterDelete: the key is deleted from the store
// between the reservation and the settlement: giving back lifts nothing
// above full, and an overdraft still debits.
func TestReviewCostSettleAfterDelete(t *testing.T) {
	a, b, s, _ := rcReplicas(t, 10, 10)
	r := rcReserve(t, a, "k", 10)
	if err := s.Store.Delete(bg, "k"); err != nil {
		t.Fatal(err)
	}
	if err := r.Settle(bg, 0); err != nil {
		t.Fatal(err)
	}
	if x := rcReserve(t, b, "k", 10); !x.OK() {
		t.Fatal("a fresh key refused")
	}
	if x := rcReserve(t, b, "k", 1); x.OK() {
		t.Fatal("above full after a give-back to a deleted key")
	}
	r2 := rcReserve(t, a, "j", 5)
	if err := s.Store.Delete(bg, "j"); err != nil {
		t.Fatal(err)
	}
	if err := r2.Settle(bg, 30); err != nil {
		t.Fatal(err)
	}
	if x := rcReserve(t, b, "j", 1); x.OK() {
		t.Fatal("an overdraft of 25 units after Delete: admitted at once")
	}
}

// TestReviewCostOutOfOrderAcrossReplicas: reservations of one key on two
// replicas settled in the other order, one below and one at zero: the
// key keeps exactly what was settled.
func TestReviewCostOutOfOrderAcrossReplicas(t *testing.T) {
	a, b, _, _ := rcReplicas(t, 10, 10)
	r1 := rcReserve(t, a, "k", 6)
	r2 := rcReserve(t, b, "k", 4)
	if !r1.OK() || !r2.OK() {
		t.Fatal("refused")
	}
	if err := r2.Settle(bg, 0); err != nil {
		t.Fatal(err)
	}
	if err := r1.Settle(bg, 2); err != nil {
		t.Fatal(err)
	}
	if x := rcReserve(t, b, "k", 8); !x.OK() {
		t.Fatal("8 after 2 kept: refused")
	}
	if x := rcReserve(t, a, "k", 1); x.OK() {
		t.Fatal("a 9th unit after 2 kept and 8 taken: admitted")
	}
}

// TestReviewCostBadNNoStoreCall: ReserveN out of [1, burst] is refused
// with RetryAfter math.MaxInt64 and no store call.
func TestReviewCostBadNNoStoreCall(t *testing.T) {
	a, _, s, _ := rcReplicas(t, 10, 10)
	for _, n := range []int{0, -1, 11, math.MaxInt, math.MinInt} {
		r := rcReserve(t, a, "k", n)
		if r.OK() || r.RetryAfter() != math.MaxInt64 {
			t.Errorf("ReserveN(%d): ok=%v RetryAfter %v", n, r.OK(), r.RetryAfter())
		}
		if err := r.Settle(bg, 5); err != nil {
			t.Errorf("Settle of a refused: %v", err)
		}
	}
	if s.RoundTrips.Load() != 0 || s.Refunds.Load() != 0 {
		t.Fatalf("store calls: %d takes, %d refunds; want none", s.RoundTrips.Load(), s.Refunds.Load())
	}
	p, err := pace.New(10)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, -1, 11, math.MaxInt, math.MinInt} {
		if r := p.ReserveN("k", n); r.OK() || r.RetryAfter() != math.MaxInt64 {
			t.Errorf("Pace.ReserveN(%d): ok=%v RetryAfter %v", n, r.OK(), r.RetryAfter())
		}
	}
}

// TestReviewCostSharedHeldRetryAfterExact: a refusal of n units reports
// when n fit; the local tier's refusal of the same n after a store
// refusal or after an admission that emptied the bucket must not report
// a shorter wait than the store would give (waiting it must admit).
func TestReviewCostSharedHeldRetryAfterExact(t *testing.T) {
	a, _, _, clk := rcReplicas(t, 1, 10)
	if r := rcReserve(t, a, "k", 10); !r.OK() {
		t.Fatal("first refused")
	}
	r := rcReserve(t, a, "k", 10)
	if r.OK() {
		t.Fatal("second admitted")
	}
	clk.Advance(r.RetryAfter())
	if x := rcReserve(t, a, "k", 10); !x.OK() {
		t.Fatalf("waited RetryAfter %v (source %v): refused again with %v", r.RetryAfter(), r.Source(), x.RetryAfter())
	}
}

var _ = memory.New

// TestReviewCostFallbackSettle: reservations the fallback made settle on
// the fallback, whether the store is back or not: at zero they give it
// all back, above the estimate they put its key in debt.
func TestReviewCostFallbackSettle(t *testing.T) {
	c := newClock()
	s := newSpy(c.Now)
	fb, err := pace.New(10, pace.WithClock(c.Now))
	if err != nil {
		t.Fatal(err)
	}
	p, err := pace.NewShared(s, 10, pace.WithClock(c.Now), pace.WithFallback(fb, 10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	down := func(context.Context, int) error { return errDown }
	s.Hook.Store(&down)
	r := rcReserve(t, p, "k", 10)
	if !r.OK() || r.Source() != pace.SourceFallback {
		t.Fatalf("store down: %v from %v; want admitted by the fallback", r.OK(), r.Source())
	}
	s.Hook.Store(nil)
	if err := r.Settle(bg, 0); err != nil {
		t.Fatal(err)
	}
	if x := fb.ReserveN("k", 10); !x.OK() {
		t.Fatal("the fallback did not get its 10 back")
	} else {
		x.Settle(0)
	}
	s.Hook.Store(&down)
	r2 := rcReserve(t, p, "j", 2)
	if r2.Source() != pace.SourceFallback {
		t.Fatalf("second: from %v", r2.Source())
	}
	if err := r2.Settle(bg, 30); err != nil {
		t.Fatal(err)
	}
	if r2.Remaining() != 0 || r2.FullIn() < 2*time.Second {
		t.Errorf("after Settle(30) on the fallback: Remaining %d FullIn %v; want 0, >= 2s", r2.Remaining(), r2.FullIn())
	}
	c.Advance(time.Second)
	if x := fb.ReserveN("j", 1); x.OK() {
		t.Fatal("the fallback's key is not in debt after Settle(30) of 2")
	}
}

// TestReviewCostMixedSizesOneKey: reservations of mixed sizes of one key
// queued together are each decided correctly: never more than the bucket
// or the request quota in all, and the refused one's RetryAfter admits it.
func TestReviewCostMixedSizesOneKey(t *testing.T) {
	p, s, clk := newSharedT(t, 10, pace.WithBurst(10), pace.WithQuota(3, time.Minute), pace.WithRoundTrips(1))
	entered, release := holdFirstRoundTrip(s)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); rcReserve(t, p, "leader", 1) }()
	<-entered
	sizes := []int{6, 1, 3, 6}
	res := make([]*pace.SharedReservation, len(sizes))
	for i, n := range sizes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := p.ReserveN(bg, "k", n)
			if err != nil {
				t.Error(err)
				return
			}
			res[i] = &r
		}()
	}
	waitFor(t, "4 decisions queued", func() bool { return pace.QueuedDecisions(p) == len(sizes) })
	close(release)
	wg.Wait()
	units, reservations := 0, 0
	var refused *pace.SharedReservation
	for i, r := range res {
		if r.OK() {
			units += sizes[i]
			reservations++
		} else {
			refused = r
		}
	}
	if units > 10 || reservations > 3 || refused == nil {
		t.Fatalf("admitted %d units in %d reservations (refused %v); want at most 10 in 3, one refused", units, reservations, refused != nil)
	}
	// The quota waits 20 s for one reservation.
	if refused.RetryAfter() < 20*time.Second {
		t.Errorf("the refused one's RetryAfter %v; want >= 20s (the quota)", refused.RetryAfter())
	}
	clk.Advance(refused.RetryAfter())
	if r := rcReserve(t, p, "k", 6); !r.OK() {
		t.Fatalf("waited RetryAfter %v: refused again, %v", refused.RetryAfter(), r.RetryAfter())
	}
}

// TestReviewCostDebtRefusedOnOtherReplica: replica A settles far above
// the estimate; replica B, which never saw the key, admits nothing until
// the debt has come down to a bucket.
func TestReviewCostDebtRefusedOnOtherReplica(t *testing.T) {
	a, b, _, clk := rcReplicas(t, 10, 10)
	r := rcReserve(t, a, "k", 10)
	if err := r.Settle(bg, 50); err != nil { // TAT 5 s ahead: one unit fits at 4.1 s
		t.Fatal(err)
	}
	first := time.Duration(-1)
	for el := time.Duration(0); el < 5*time.Second; el += 10 * time.Millisecond {
		if x := rcReserve(t, b, "k", 1); x.OK() && first < 0 {
			first = el
		}
		clk.Advance(10 * time.Millisecond)
	}
	if first < 4100*time.Millisecond {
		t.Fatalf("replica B admitted at %v during a debt that admits nothing before 4.1s", first)
	}
}

// TestReviewCostPaceDebtSurvivesSweeps: a Pace key in debt far beyond its
// bucket's refill time is not forgotten by the sweeps other keys' decisions
// run: it stays refused until the debt is repaid.
func TestReviewCostPaceDebtSurvivesSweeps(t *testing.T) {
	clk := newClock()
	p, err := pace.New(1000, pace.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	r := p.ReserveN("k", 1)
	r.Settle(20_001) // 20 s of debt; the bucket refills in 1 s
	for step := 0; step < 150; step++ {
		clk.Advance(100 * time.Millisecond)
		for j := 0; j < 200; j++ {
			p.Reserve("other" + strconv.Itoa(step*200+j))
		}
	}
	if x := p.ReserveN("k", 1); x.OK() {
		t.Fatalf("15 s into a 20 s debt, after sweeps: admitted (Len %d)", p.Len())
	}
}

// TestReviewCostPartialSettleKeepsRequest: Settle(u) with 0 < u < n gives
// back n − u units and keeps the request of every quota.
func TestReviewCostPartialSettleKeepsRequest(t *testing.T) {
	a, b, _, _ := rcReplicas(t, 10, 10, pace.WithQuota(2, time.Minute))
	for i := 0; i < 2; i++ {
		r := rcReserve(t, a, "k", 5)
		if !r.OK() {
			t.Fatalf("reservation %d refused", i)
		}
		if err := r.Settle(bg, 1); err != nil {
			t.Fatal(err)
		}
	}
	// 8 units left, but no request.
	if x := rcReserve(t, b, "k", 1); x.OK() {
		t.Fatal("a third request within the quota of 2: admitted")
	}
	c := rcReserve(t, b, "j", 10)
	if err := c.Settle(bg, 3); err != nil {
		t.Fatal(err)
	}
	if x := rcReserve(t, a, "j", 7); !x.OK() {
		t.Fatal("7 after 3 kept of 10: refused")
	}
	if x := rcReserve(t, a, "j", 1); x.OK() {
		t.Fatal("an 11th unit: admitted")
	}
}

// TestReviewCostLateForgerCostsVictim: with costs the settlement comes
// after the handler, so late. A forger reserves 5 of the victim's key, the
// victim reserves 5 right after, and the forger is settled at 0 300 ms
// later. A late settlement gives back only what the bucket has not
// refilled of the reservation since (the rule that keeps every window
// within the pace, whatever the order of settlements), so the forger costs
// the key at most the refill of its time in flight (3 events at 10/s),
// never more; settled at once it costs nothing (ForgerLeavesKeyAsFound).
func TestReviewCostLateForgerCostsVictim(t *testing.T) {
	t.Run("Pace", func(t *testing.T) {
		clk := newClock()
		p, err := pace.New(10, pace.WithClock(clk.Now))
		if err != nil {
			t.Fatal(err)
		}
		forger := p.ReserveN("victim", 5)
		v := p.ReserveN("victim", 5)
		c := p.ReserveN("control", 5)
		clk.Advance(300 * time.Millisecond)
		forger.Settle(0)
		v.Settle(5)
		c.Settle(5)
		x, y := p.ReserveN("victim", 1), p.ReserveN("control", 1)
		if x.Remaining() < y.Remaining()-3 || x.Remaining() > y.Remaining() {
			t.Fatalf("the victim has %d left after the forger was settled at 0 300 ms late; without the forger %d; want at most 3 (300 ms at 10/s) fewer", x.Remaining(), y.Remaining())
		}
	})
	t.Run("Shared", func(t *testing.T) {
		a, b, _, clk := rcReplicas(t, 10, 10)
		forger := rcReserve(t, a, "victim", 5)
		v := rcReserve(t, b, "victim", 5)
		c := rcReserve(t, b, "control", 5)
		clk.Advance(300 * time.Millisecond)
		for _, s := range []struct {
			r *pace.SharedReservation
			u int
		}{{forger, 0}, {v, 5}, {c, 5}} {
			if err := s.r.Settle(bg, s.u); err != nil {
				t.Fatal(err)
			}
		}
		x, y := rcReserve(t, b, "victim", 1), rcReserve(t, b, "control", 1)
		if x.Remaining() < y.Remaining()-3 || x.Remaining() > y.Remaining() {
			t.Fatalf("the victim has %d left after the forger was settled at 0 300 ms late; without the forger %d; want at most 3 (300 ms at 10/s) fewer", x.Remaining(), y.Remaining())
		}
	})
}
