package pace_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/internal/fakeclock"
	"github.com/ratepace/pace/memory"
)

var start = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// newClock returns a fake clock at start.
func newClock() *fakeclock.Clock { return fakeclock.New(start) }

func newPaceT(t testing.TB, rate float64) (*pace.Pace, *fakeclock.Clock) {
	t.Helper()
	c := newClock()
	p, err := pace.New(rate, pace.WithClock(c.Now))
	if err != nil {
		t.Fatalf("New(%v) = %v", rate, err)
	}
	return p, c
}

func TestNewRejectsBadRates(t *testing.T) {
	for _, rate := range []float64{0, -1, math.NaN(), math.Inf(1), math.Inf(-1), pace.MaxRate * 2, -math.SmallestNonzeroFloat64, 1e-10} {
		p, err := pace.New(rate)
		if !errors.Is(err, pace.ErrInvalidArgument) || p != nil {
			t.Errorf("New(%v) = %v, %v; want nil, ErrInvalidArgument", rate, p, err)
		}
	}
	for _, rate := range []float64{1e-9, 0.5, 1, 20, pace.MaxRate} {
		if _, err := pace.New(rate); err != nil {
			t.Errorf("New(%v) = %v; want no error", rate, err)
		}
	}
}

// TestStepScript walks one key through a story at explicit times.
func TestStepScript(t *testing.T) {
	p, c := newPaceT(t, 4) // capacity 4, one event every 250 ms
	steps := []struct {
		at        time.Duration
		ok        bool
		remaining int
		retry     time.Duration
	}{
		{0, true, 3, 0},
		{0, true, 2, 0},
		{0, true, 1, 0},
		{0, true, 0, 0},
		{0, false, 0, 250 * time.Millisecond},
		{100 * time.Millisecond, false, 0, 150 * time.Millisecond},
		{250 * time.Millisecond, true, 0, 0},
		{750 * time.Millisecond, true, 1, 0}, // two refilled, one taken
		{time.Hour, true, 3, 0},              // an hour of silence refills one second only
	}
	for i, s := range steps {
		c.Set(start.Add(s.at))
		r := p.Reserve("k")
		if r.OK() != s.ok || r.Remaining() != s.remaining || r.RetryAfter() != s.retry {
			t.Fatalf("step %d at %v: Reserve = ok %v, remaining %d, retry %v; want %v, %d, %v",
				i, s.at, r.OK(), r.Remaining(), r.RetryAfter(), s.ok, s.remaining, s.retry)
		}
	}
}

func TestNoAccumulationAfterSilence(t *testing.T) {
	for _, rate := range []float64{1, 20, 1000, 2.5} {
		p, c := newPaceT(t, rate)
		p.Allow("k")
		c.Advance(time.Hour)
		admitted := 0
		for p.Allow("k") {
			admitted++
		}
		if want := int(math.Max(1, rate)); admitted != want {
			t.Errorf("rate %v: %d admitted at once after an hour of silence; want %d", rate, admitted, want)
		}
	}
}

func TestSlowRatesAdmitOne(t *testing.T) {
	for _, rate := range []float64{0.5, 0.1, 1.0 / 3600} {
		p, c := newPaceT(t, rate)
		interval := time.Duration(math.Ceil(1e9 / rate))
		if !p.Allow("k") {
			t.Fatalf("rate %v: first event refused", rate)
		}
		r := p.Reserve("k")
		if r.OK() || r.RetryAfter() != interval {
			t.Fatalf("rate %v: second event ok=%v retry %v; want refused, retry %v", rate, r.OK(), r.RetryAfter(), interval)
		}
		c.Advance(interval)
		if !p.Allow("k") || p.Allow("k") {
			t.Fatalf("rate %v: after %v want exactly one more event", rate, interval)
		}
	}
}

// TestRetryAfterIsExact waits exactly RetryAfter, and one nanosecond less.
func TestRetryAfterIsExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		rate := math.Exp(rng.Float64()*16 - 6) // about 0.0025 to 22000 per second
		p, c := newPaceT(t, rate)
		for p.Allow("k") {
		}
		c.Advance(time.Duration(rng.Int64N(int64(time.Second / 3))))
		r := p.Reserve("k")
		if r.OK() {
			continue // refilled during the random advance
		}
		wait := r.RetryAfter()
		if wait <= 0 {
			t.Fatalf("rate %v: refused with RetryAfter %v", rate, wait)
		}
		c.Advance(wait - 1)
		if p.Allow("k") {
			t.Fatalf("rate %v: admitted 1ns before RetryAfter %v", rate, wait)
		}
		c.Advance(1)
		if !p.Allow("k") {
			t.Fatalf("rate %v: refused after waiting exactly RetryAfter %v", rate, wait)
		}
	}
}

// TestNeverOverPace offers random arrival schedules and checks every sliding
// window of several lengths: admitted ≤ rate × T + capacity. A saturating run
// must also get at least 99% of the ideal.
func TestNeverOverPace(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, rate := range []float64{0.7, 1, 3, 7.5, 20, 333, 1e4} {
		p, c := newPaceT(t, rate)
		capacity := math.Max(1, rate)
		mean := time.Duration(float64(time.Second) / rate / 3) // offered load about 3× the pace
		var admitted []time.Duration
		horizon := time.Duration(float64(time.Second) * 2000 / rate) // ~2000 events' worth
		for c.Elapsed() < horizon {
			// Bursty arrivals: mostly exponential gaps, sometimes a burst.
			if rng.IntN(20) == 0 {
				for range rng.IntN(int(capacity) + 3) {
					if p.Allow("k") {
						admitted = append(admitted, c.Elapsed())
					}
				}
			}
			c.Advance(time.Duration(rng.ExpFloat64() * float64(mean)))
			if p.Allow("k") {
				admitted = append(admitted, c.Elapsed())
			}
		}
		for _, w := range []time.Duration{time.Millisecond, 100 * time.Millisecond, time.Second, 10 * time.Second, horizon} {
			// For each admitted event, count events in [t, t+w].
			j := 0
			for i := range admitted {
				for j < len(admitted) && admitted[j] <= admitted[i]+w {
					j++
				}
				if n := float64(j - i); n > rate*w.Seconds()+capacity {
					t.Fatalf("rate %v: %v events in a window of %v from %v; bound %.3f", rate, n, w, admitted[i], rate*w.Seconds()+capacity)
				}
			}
		}
	}
}

// TestNotNeedlesslyConservative offers a saturating load (arrivals far more
// frequent than the pace) and wants at least 99% of the ideal admitted.
func TestNotNeedlesslyConservative(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, rate := range []float64{0.7, 1, 3, 7.5, 20, 333} {
		p, c := newPaceT(t, rate)
		mean := time.Duration(float64(time.Second) / rate / 200)
		run := time.Duration(float64(time.Second) * 1000 / rate)
		admitted := 0
		for c.Elapsed() < run {
			if p.Allow("k") {
				admitted++
			}
			c.Advance(time.Duration(rng.ExpFloat64() * float64(mean)))
		}
		ideal := rate*run.Seconds() + math.Max(1, rate)
		if got := float64(admitted); got < 0.99*ideal || got > ideal {
			t.Errorf("rate %v: %v admitted over %v of saturating load; want 99%% to 100%% of %.1f", rate, got, run, ideal)
		}
	}
}

func TestConcurrentReserveOneKey(t *testing.T) {
	for _, rate := range []float64{1, 10, 64, 1000} {
		p, _ := newPaceT(t, rate) // the fake clock stays frozen
		var admitted atomic.Int64
		var wg sync.WaitGroup
		gate := make(chan struct{})
		for range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-gate
				for range 100 {
					if p.Allow("hot") {
						admitted.Add(1)
					}
				}
			}()
		}
		close(gate)
		wg.Wait()
		if want := int64(math.Max(1, rate)); admitted.Load() != want {
			t.Errorf("rate %v: 64 goroutines admitted %d; want exactly %d", rate, admitted.Load(), want)
		}
	}
}

func TestReturn(t *testing.T) {
	t.Run("Immediate", func(t *testing.T) {
		p, _ := newPaceT(t, 3)
		p.Allow("k")
		r := p.Reserve("k")
		if !r.OK() || r.Remaining() != 1 {
			t.Fatalf("Reserve = %v, %d left; want ok, 1 left", r.OK(), r.Remaining())
		}
		r.Return()
		if n := drain(p, "k"); n != 2 {
			t.Fatalf("after Return, %d events fit; want 2 (as if the reservation had not been made)", n)
		}
	})
	t.Run("AfterTimePassed", func(t *testing.T) {
		p, c := newPaceT(t, 4) // 250 ms per event
		drain(p, "k")
		c.Advance(250 * time.Millisecond)
		r := p.Reserve("k") // the one refilled event
		if !r.OK() {
			t.Fatal("refilled event refused")
		}
		c.Advance(500 * time.Millisecond) // two more refill meanwhile
		r.Return()
		if n := drain(p, "k"); n != 3 {
			t.Fatalf("after a late Return, %d events fit; want 3", n)
		}
	})
	t.Run("NeverAboveFull", func(t *testing.T) {
		p, c := newPaceT(t, 4)
		r := p.Reserve("k")
		c.Advance(time.Hour)
		r.Return()
		if n := drain(p, "k"); n != 4 {
			t.Fatalf("a Return on a refilled bucket left %d events; want the capacity, 4", n)
		}
	})
	t.Run("RefusedIsNoOp", func(t *testing.T) {
		p, _ := newPaceT(t, 2)
		drain(p, "k")
		r := p.Reserve("k")
		if r.OK() {
			t.Fatal("want refused")
		}
		r.Return()
		if p.Allow("k") {
			t.Fatal("Return of a refused reservation gave an event back")
		}
	})
	t.Run("SecondIsNoOp", func(t *testing.T) {
		p2, _ := newPaceT(t, 5)
		p2.Allow("k")
		p2.Allow("k")
		r := p2.Reserve("k")
		r.Return()
		r.Return()
		if n := drain(p2, "k"); n != 3 {
			t.Fatalf("two Returns of one reservation left %d events; want 3", n)
		}
		var zero pace.Reservation
		zero.Return() // the zero Reservation is refused: no panic, no effect
		if zero.OK() || zero.RetryAfter() != 0 || zero.Remaining() != 0 {
			t.Fatal("zero Reservation is not a refused no-op")
		}
	})
	t.Run("NewKeyLeavesNoRow", func(t *testing.T) {
		p, _ := newPaceT(t, 20)
		r := p.Reserve("forged-id")
		r.Return()
		if p.Len() != 0 {
			t.Fatalf("Len() = %d after reserve and return on a new key; want 0", p.Len())
		}
	})
}

// drain takes events from key until refused and reports how many fitted.
func drain(p *pace.Pace, key string) int {
	n := 0
	for p.Allow(key) {
		n++
	}
	return n
}

// TestForgerSpendsNothing: a forger naming the honest client's id with wrong
// secrets (every reservation returned) changes nothing for the honest client.
func TestForgerSpendsNothing(t *testing.T) {
	honest := func(forge bool) int {
		p, c := newPaceT(t, 10)
		got := 0
		for range 200 { // ten seconds in steps of 50 ms
			if forge {
				for range 500 {
					r := p.Reserve("client-a")
					r.Return()
				}
			}
			if p.Allow("client-a") { // the honest client asks at twice its pace
				got++
			}
			c.Advance(50 * time.Millisecond)
		}
		return got
	}
	alone, forged := honest(false), honest(true)
	if alone < 105 || alone > 110 {
		t.Fatalf("honest client alone got %d over 10 s at pace 10 (burst 10); want 105..110", alone)
	}
	if forged != alone {
		t.Fatalf("honest client got %d with a forger, %d without; want the same", forged, alone)
	}
}

// TestLateReturnIsNotOverPace: a reservation returned after the bucket has
// refilled past it, and been spent again by someone else, gives back nothing
// that was not its own.
func TestLateReturnIsNotOverPace(t *testing.T) {
	p, c := newPaceT(t, 1) // capacity 1
	r := p.Reserve("k")
	c.Advance(1500 * time.Millisecond)
	if !p.Allow("k") {
		t.Fatal("refilled bucket refused")
	}
	r.Return()
	if p.Allow("k") {
		t.Fatal("a late Return gave back an event taken after the bucket refilled: two events at one instant at capacity 1")
	}
	// Partly refilled: the refund is the part of the event not yet refilled.
	p, c = newPaceT(t, 2) // capacity 2, 500 ms per event
	drain(p, "k")
	c.Advance(250 * time.Millisecond)
	r = p.Reserve("k") // refused: half an event has refilled
	if r.OK() {
		t.Fatal("want refused")
	}
	c.Advance(250 * time.Millisecond)
	r = p.Reserve("k") // the refilled event
	c.Advance(100 * time.Millisecond)
	if p.Allow("k") {
		t.Fatal("want refused")
	}
	r.Return() // at 600 ms, as if the event at 500 ms had not been taken
	if !p.Allow("k") || p.Allow("k") {
		t.Fatal("after the return, want exactly the one event refilled by 500 ms")
	}
}

// TestIdleShardsGiveMemoryBack: after a flood, traffic on a single key is
// enough for every shard to give its rows back within a bounded number of
// horizons.
func TestIdleShardsGiveMemoryBack(t *testing.T) {
	p, c := newPaceT(t, 20)
	for i := range 200_000 {
		p.Allow(key(i))
	}
	for range 16 { // 64 shards, 8 looked at per horizon pass, with room
		c.Advance(time.Second)
		p.Allow("the one honest client")
	}
	if p.Len() > 1 {
		t.Fatalf("Len() = %d after 16 horizons of traffic on one key; want the flood gone", p.Len())
	}
}

// TestOptionOutOfPlace: an option given to a constructor it does not serve
// is an error wrapping ErrInvalidArgument, never ignored.
func TestOptionOutOfPlace(t *testing.T) {
	fb, err := pace.New(1)
	if err != nil {
		t.Fatal(err)
	}
	s := memory.New()
	for name, opt := range map[string]pace.Option{
		"WithQuota":      pace.WithQuota(10, time.Minute),
		"WithFallback":   pace.WithFallback(fb, time.Second),
		"WithRoundTrips": pace.WithRoundTrips(2),
		"ProbeInterval":  pace.ProbeInterval(time.Second),
	} {
		if p, err := pace.New(1, opt); p != nil || !errors.Is(err, pace.ErrInvalidArgument) || !strings.Contains(err.Error(), name) {
			t.Errorf("New(1, %s) = %v, %v; want nil and an error naming %s, wrapping ErrInvalidArgument", name, p, err, name)
		}
	}
	if _, err := pace.NewShared(s, 1, pace.ProbeInterval(time.Second)); !errors.Is(err, pace.ErrInvalidArgument) {
		t.Errorf("NewShared(ProbeInterval) = %v; want ErrInvalidArgument", err)
	}
	for _, opt := range []pace.Option{pace.WithQuota(10, time.Minute), pace.WithFallback(fb, time.Second), pace.WithRoundTrips(2)} {
		if _, err := pace.WithFailurePolicy(s, pace.FailOpen, 0, opt); !errors.Is(err, pace.ErrInvalidArgument) {
			t.Errorf("WithFailurePolicy(a Shared option) = %v; want ErrInvalidArgument", err)
		}
	}
	// The options that serve all three are accepted by each.
	for _, opt := range []pace.Option{pace.WithClock(time.Now), pace.WithObserver(nil), nil} {
		if _, err := pace.New(1, opt); err != nil {
			t.Errorf("New(a shared option) = %v", err)
		}
		if _, err := pace.NewShared(s, 1, opt); err != nil {
			t.Errorf("NewShared(a shared option) = %v", err)
		}
		if _, err := pace.WithFailurePolicy(s, pace.FailOpen, 0, opt); err != nil {
			t.Errorf("WithFailurePolicy(a shared option) = %v", err)
		}
	}
}
