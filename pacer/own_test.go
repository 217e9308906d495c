package pacer

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
	"time"
)

var ownT0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// exactOwn is the model own is checked against: every counted call, in
// order, forgotten once it is out of the window at a sync (as the Pacer
// did before the ring).
type exactOwn []time.Time

func (e *exactOwn) sync(now time.Time, window time.Duration) {
	cut := now.Add(-window)
	i := sort.Search(len(*e), func(i int) bool { return (*e)[i].After(cut) })
	*e = (*e)[i:]
}

// within counts the calls in (from, to].
func (e exactOwn) within(from, to time.Time) float64 {
	lo := sort.Search(len(e), func(i int) bool { return e[i].After(from) })
	hi := sort.Search(len(e), func(i int) bool { return e[i].After(to) })
	return float64(max(0, hi-lo))
}

// checkOwn compares o, synced at now, with the exact record e: within
// tol for the count in the window, and for the calls leaving it by each
// of a few times ahead.
func checkOwn(t *testing.T, o *own, e exactOwn, now time.Time, window time.Duration, tol float64, rng *rand.Rand) {
	t.Helper()
	start := now.Add(-window)
	if got, want := o.counted(), e.within(start, now); math.Abs(got-want) > tol {
		t.Fatalf("at +%v: counted() = %v; want %v (±%v)", now.Sub(ownT0), got, want, tol)
	}
	for i := 0; i < 4; i++ {
		x := start.Add(time.Duration(rng.Int64N(int64(window) + 1)))
		if got, want := o.countedBy(x), e.within(start, x); math.Abs(got-want) > tol {
			t.Fatalf("at +%v: countedBy(now-W+%v) = %v; want %v (±%v)", now.Sub(ownT0), x.Sub(start), got, want, tol)
		}
	}
}

// Two calls per bucket are kept exactly: with calls at least half a bucket
// apart, every count equals the exact record's, across idle spells longer
// than the window.
func TestOwnExactAtTwoCallsPerBucket(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, window := range []time.Duration{time.Nanosecond, time.Millisecond, time.Minute, 24 * time.Hour} {
		var o own
		var e exactOwn
		width := max(window/ownBuckets, 1)
		now := ownT0
		for i := 0; i < 5000; i++ {
			gap := width/2 + time.Duration(rng.Int64N(int64(3*width)))
			if rng.IntN(200) == 0 {
				gap = window + time.Duration(rng.Int64N(int64(window)+1)) // idle
			}
			now = now.Add(max(gap, 1))
			o.sync(now, window)
			e.sync(now, window)
			o.count(1)
			e = append(e, now)
			if i%7 == 0 {
				checkOwn(t, &o, e, now, window, 0, rng)
			}
		}
	}
}

// Many calls per bucket are taken as spread evenly between the first and
// the last: with Poisson arrivals, 40 per bucket, every count stays within
// half a bucket's calls of the exact one (the worst seen is 13).
func TestOwnDenseCallsWithinOneBucket(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const window = time.Minute
	const perBucket = 40 // calls per bucket on average
	var o own
	var e exactOwn
	mean := window / ownBuckets / perBucket
	now := ownT0
	for i := 0; i < 40000; i++ {
		now = now.Add(time.Duration(rng.ExpFloat64() * float64(mean)))
		o.sync(now, window)
		e.sync(now, window)
		o.count(1)
		e = append(e, now)
		if i%97 == 0 {
			checkOwn(t, &o, e, now, window, perBucket/2, rng)
		}
	}
}

// A new window lays the ring out again and keeps what is within it.
func TestOwnWindowChangeKeepsCalls(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var o own
	var e exactOwn
	now := ownT0
	window := time.Minute
	for _, next := range []time.Duration{time.Hour, 90 * time.Second, 20 * time.Second, time.Minute} {
		begin := now
		for i := 0; i < 3000; i++ {
			now = now.Add(time.Duration(rng.Int64N(int64(window / 1000))))
			o.sync(now, window)
			e.sync(now, window)
			o.count(1)
			e = append(e, now)
		}
		old := max(window/ownBuckets, 1)
		window = next
		now = now.Add(time.Millisecond)
		o.sync(now, window)
		e.sync(now, window)
		// A call can move by up to an old bucket across the layout.
		perOld := 3000 * float64(old) / float64(now.Sub(begin))
		checkOwn(t, &o, e, now, window, 1+2*perOld, rng)
	}
}

// Calls in flight land oldest first, and those in flight for more than a
// quarter window (give or take a bucket) are taken for lost.
func TestOwnCallsInFlight(t *testing.T) {
	const window = time.Minute
	var o own
	now := ownT0
	o.sync(now, window)
	for i := 0; i < 10; i++ {
		o.fly(now, 1)
		now = now.Add(time.Second)
		o.sync(now, window)
	}
	if _, _, ok := o.land(); !ok || o.flying != 9 {
		t.Fatalf("after 10 calls sent and one observed: %d in flight; want 9", o.flying)
	}
	// The oldest left is the one sent at +1s: lost once now passes
	// +16s (a quarter window later), within a bucket.
	o.sync(ownT0.Add(16*time.Second-time.Millisecond), window)
	if o.flying != 9 {
		t.Fatalf("before a quarter window: %d in flight; want 9", o.flying)
	}
	o.sync(ownT0.Add(16*time.Second+2*window/ownBuckets), window)
	if o.flying != 8 {
		t.Fatalf("a quarter window after the second call: %d in flight; want 8", o.flying)
	}
	o.sync(ownT0.Add(time.Hour), window)
	if _, _, ok := o.land(); o.flying != 0 || ok {
		t.Fatalf("an hour later: %d in flight, land() true; want none", o.flying)
	}
	o.fly(ownT0, 1) // sent long ago: lost already
	if o.flying != 0 {
		t.Fatalf("a call sent an hour ago is in flight; want it taken for lost")
	}
}

// TestOwnForgetAndNth: after a fixed window's turnover the calls before it
// stop counting; answeredNth finds the n-th newest counted call to a
// bucket, never later than it was; flyingFrom counts the calls in flight
// sent since a time.
func TestOwnForgetAndNth(t *testing.T) {
	var o own
	w := 10 * time.Second
	now := ownT0
	o.sync(now, w)
	for i := 0; i < 8; i++ { // calls answered at 0.5, 1.5, ... 7.5 s
		now = ownT0.Add(time.Duration(i)*time.Second + 500*time.Millisecond)
		o.sync(now, w)
		o.count(1)
	}
	if got := o.counted(); got != 8 {
		t.Fatalf("counted() = %v; want 8", got)
	}
	at, ok := o.answeredNth(3)
	if want := ownT0.Add(5500 * time.Millisecond); !ok || at.After(want) || want.Sub(at) > w/ownBuckets {
		t.Fatalf("answeredNth(3) = %v, %v; want %v to a bucket, not later", at, ok, want)
	}
	if _, ok := o.answeredNth(9); ok {
		t.Fatalf("answeredNth(9) found a call among 8")
	}
	o.forgetBefore(ownT0.Add(4 * time.Second))
	if got := o.counted(); got != 4 {
		t.Fatalf("counted() after forgetting those before 4s = %v; want 4", got)
	}
	if _, ok := o.answeredNth(5); ok {
		t.Fatalf("answeredNth(5) found a forgotten call")
	}
	o.fly(now, 1)
	o.fly(now.Add(-3*time.Second), 1)
	if got := o.flyingFrom(now.Add(-time.Second)); got != 1 {
		t.Fatalf("flyingFrom(now-1s) = %d; want 1", got)
	}
}
