package pacer

import (
	"testing"
	"time"

	"github.com/ratepace/pace/internal/fakeclock"
)

// TestReviewCrowdSlotsBookedAhead: a client held by crowdedStart (a quiet
// first count of 5 of 100, then 60 a tenth of a second later, resets of
// 10 s) that books several calls ahead (concurrent callers, each calling
// Reserve) gets its first slot past the crowd's window, and every slot
// after it at the same instant: gap's crowded branch returns
// crowdEnd - lastSlot() + a phase, which is below zero once lastSlot() is
// past crowdEnd, and max(end, 0) makes it no gap at all. Eleven calls go
// at once into the window the crowd is told to share, at a rate of 9.5 a
// second (a gap of 105 ms).
func TestReviewCrowdSlotsBookedAhead(t *testing.T) {
	c := fakeclock.New(ownT0)
	p := MustNew(WithClock(c), WithSeed(1))
	p.Observe(Signal{Limit: 100, HasUsed: true, Used: 5, Reset: 10 * time.Second, HasReset: true})
	c.Advance(100 * time.Millisecond)
	p.Observe(Signal{Limit: 100, HasUsed: true, Used: 60, Reset: 9900 * time.Millisecond, HasReset: true})
	var ds []time.Duration
	for i := 0; i < 12; i++ {
		ds = append(ds, p.Reserve())
	}
	p.mu.Lock()
	held := p.crowdCap > 0
	p.mu.Unlock()
	if !held {
		t.Fatalf("crowdedStart did not hold the client: the test meant it to")
	}
	for i := 1; i < len(ds); i++ {
		if ds[i]-ds[i-1] < 10*time.Millisecond {
			t.Fatalf("slots booked ahead by a client held by crowdedStart = %v: calls %d and %d %v apart; want a gap between them", ds, i-1, i, ds[i]-ds[i-1])
		}
	}
}

// TestReviewEntryGapBounded: a key of 10 a second (resets of 1 s) whose
// first count was quiet (entryRate holds the first window), then one count
// far above the limit (a limit lowered from thousands to 10 reports just
// that, and Observe believes it), then a low one. entryRate's "random
// point of this client's fair gap" is W/(share·target·L) with no bound:
// the others' rate read off the huge count makes the share tiny, and the
// gap minutes to years long (a count of a million: a Reserve 28 h ahead,
// with no Retry-After, on a window of a second; the rate floor's longest
// gap is 256 windows). Past 2^63 ns the conversion overflows to a
// negative gap, and the calls go unpaced (with a policy window of 24 h and
// a count of 2^30: nine calls at once at a rate of one in 2.5 h).
func TestReviewEntryGapBounded(t *testing.T) {
	for _, big := range []int64{10000, 1000000, maxCount} {
		c := fakeclock.New(ownT0)
		p := MustNew(WithClock(c), WithSeed(1))
		p.Observe(Signal{Limit: 10, HasUsed: true, Used: 0, Reset: time.Second, HasReset: true})
		c.Advance(time.Millisecond)
		p.Observe(Signal{Limit: 10, HasUsed: true, Used: big, Reset: time.Second, HasReset: true})
		c.Advance(time.Millisecond)
		p.Observe(Signal{Limit: 10, HasUsed: true, Used: 1, Reset: time.Second, HasReset: true})
		prev := time.Duration(0)
		for i := 0; i < 3; i++ {
			p.mu.Lock()
			w := p.window
			p.mu.Unlock()
			d := p.Reserve()
			if d-prev > ownBuckets*w {
				t.Errorf("count %d of 10 once: Reserve() = %v, %v after the slot before, with no Retry-After on a window of %v; want %v at most (the rate floor's gap)", big, d, d-prev, w, ownBuckets*w)
			}
			prev = max(prev, d)
		}
	}
	for _, L := range []int64{10} {
		c := fakeclock.New(ownT0)
		p := MustNew(WithClock(c), WithSeed(1))
		s := Signal{Limit: L, Window: 24 * time.Hour, HasUsed: true, Reset: time.Second, HasReset: true}
		p.Observe(s)
		c.Advance(time.Millisecond)
		s.Used = maxCount
		p.Observe(s)
		c.Advance(time.Millisecond)
		s.Used = 1
		p.Observe(s)
		zero := 0
		for i := 0; i < 5; i++ {
			if p.Reserve() == 0 {
				zero++
			}
		}
		p.mu.Lock()
		r := p.rate
		p.mu.Unlock()
		if zero > 1 {
			t.Errorf("policy window of 24 h, limit %d, rate %.2g/s: %d of 5 calls booked at once; want one, the rest paced", L, r, zero)
		}
	}
}
