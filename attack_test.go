package pace_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/driver"
)

// TestIdleRowsGoWithinTwoHorizons: a key that stopped taking is forgotten
// within two horizons of its last take, by Len alone (no traffic).
func TestIdleRowsGoWithinTwoHorizons(t *testing.T) {
	p, c := newPaceT(t, 1) // a horizon of 1 s
	for i := range 1000 {
		p.Allow(fmt.Sprint("early-", i)) // every shard passes at 0 s, next due at 1 s
	}
	c.Set(start.Add(500 * time.Millisecond))
	for i := range 1000 {
		p.Allow(fmt.Sprint("flood-", i)) // full again at 1.5 s
	}
	c.Set(start.Add(time.Second))
	p.Len() // the passes at 1 s drop the early keys; the flood is not full yet
	c.Set(start.Add(2500 * time.Millisecond))
	if n := p.Len(); n != 0 {
		t.Fatalf("Len() = %d at 2.5 s: no key took since 0.5 s (two horizons)", n)
	}
}

// TestRateIsTheEnforcedPace: Rate reports the pace enforced, one event
// every ceil(1e9/rate) ns, never faster than the one given.
func TestRateIsTheEnforcedPace(t *testing.T) {
	for _, rate := range []float64{3, 7, 3e8, 999_999_999} {
		p, err := pace.New(rate)
		if err != nil {
			t.Fatal(err)
		}
		want := 1e9 / math.Ceil(1e9/rate)
		if got := p.Rate(); got != want || got > rate {
			t.Errorf("New(%v).Rate() = %v; want %v (one event every ceil(1e9/rate) ns)", rate, got, want)
		}
	}
}

// TestConcurrentReturnsNeverOverPace attacks "never over pace, under
// any concurrency, whatever the order and timing of Returns": in each
// phase the clock stands still while goroutines reserve on one key and
// return any outstanding reservation of it, and others churn the table
// (inserts, returns out of order, sweeps and rebuilds of every shard);
// between phases the clock moves by steps from zero to seconds. The kept
// events are counted per window by the independent model.
func TestConcurrentReturnsNeverOverPace(t *testing.T) {
	rates := []float64{10, 1.5, 0.3, 1000}
	for seed := range uint64(8) {
		rate := rates[seed%4]
		p, c := newPaceT(t, rate)
		k := newKept(rate)
		var mu sync.Mutex // guards k and pool
		var pool []held
		steps := []time.Duration{0, time.Millisecond, 37 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond, 1100 * time.Millisecond}
		rng := rand.New(rand.NewPCG(seed, 99))
		for phase := range 30 {
			c.Advance(steps[rng.IntN(len(steps))])
			var wg sync.WaitGroup
			for g := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := rand.New(rand.NewPCG(seed, uint64(phase*16+g)))
					for range 20 {
						if r.IntN(2) == 0 {
							res := p.Reserve("k")
							if res.OK() {
								h := held{&res, c.Elapsed()}
								mu.Lock()
								pool = append(pool, h)
								k.add(h.at)
								mu.Unlock()
							}
							continue
						}
						mu.Lock()
						if len(pool) == 0 {
							mu.Unlock()
							continue
						}
						i := r.IntN(len(pool))
						h := pool[i]
						pool = slices.Delete(pool, i, i+1)
						k.remove(h.at)
						mu.Unlock()
						h.r.Return()
					}
				}()
			}
			for g := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := rand.New(rand.NewPCG(seed, uint64(1000+phase*16+g)))
					var mine []*pace.Reservation
					for range 100 {
						res := p.Reserve(fmt.Sprint("churn-", r.IntN(300)))
						mine = append(mine, &res)
						if len(mine) > 4 {
							i := r.IntN(len(mine))
							mine[i].Return()
							mine = slices.Delete(mine, i, i+1)
						}
					}
				}()
			}
			wg.Wait()
		}
		k.check(t, fmt.Sprintf("seed %d, rate %v", seed, rate))
	}
}

// TestClockSwingNeverFailsOpen: WithClock's doc says readings are
// clamped to about ±146 years of the first one so that arrival times stay
// far from overflowing "whatever the clock says", and that a reading
// earlier than a previous one "can only make the decision stricter" on a
// key that has a row. A key spent at +200 years and asked at −200 years
// has a debt of more than 2⁶³ ns: Bucket.Take's subtraction wraps negative,
// so Peek reports that an event fits, and Reserve debits the key (the take
// fits in the table) but reports a refusal, its d = tat − now having
// wrapped too (RetryAfter about 292 years).
func TestClockSwingNeverFailsOpen(t *testing.T) {
	p, c := newPaceT(t, 1)
	p.Allow("warm") // the epoch is the first reading
	c.Set(start.Add(200 * 365 * 24 * time.Hour))
	for p.Allow("k") {
	}
	c.Set(start.Add(-200 * 365 * 24 * time.Hour))
	if ok, _ := p.Peek("k"); ok {
		t.Error("Peek at -200 y on a key spent at +200 y reports that an event fits (the debt overflowed)")
	}
	if r := p.Reserve("k"); r.OK() {
		t.Fatal("Reserve at -200 y admitted")
	}
	c.Set(start.Add(200 * 365 * 24 * time.Hour)) // back where the key was spent (both readings clamp to +146 y)
	if _, wait := p.Peek("k"); wait != time.Second {
		t.Errorf("the refused Reserve at -200 y debited the key: the wait at +200 y is %v, was 1s", wait)
	}
}

// TestConcurrentForgersSpendNothing attacks Pace's central
// promise, "a forger who names someone else's client id spends none of that
// client's pace", with checks that take microseconds (the case the docs
// give reserve-then-return). A forger keeps two presentations in flight,
// each returned 200 µs after its Reserve, oldest first: 10,000 forged
// requests a second, never more than two events held. Each return of the
// oldest while a newer one is outstanding counts as out of order, so every
// later Return of the shard is "not intact" and gives back one interval
// minus the time held: 200 µs of the victim's pace per forged request, 2 s
// of refill a second at 5/s. The honest client, at half its pace, is
// starved, though two held events of five would leave it all it asks.
func TestConcurrentForgersSpendNothing(t *testing.T) {
	p, c := newPaceT(t, 5)
	var inFlight []*pace.Reservation // oldest first
	honest := 0
	const step = 100 * time.Microsecond
	for n := range int(4 * time.Second / step) {
		if len(inFlight) == 2 { // the oldest check ends (200 µs after its Reserve) and fails
			inFlight[0].Return()
			inFlight = inFlight[1:]
		}
		r := p.Reserve("victim")
		if r.OK() {
			inFlight = append(inFlight, &r)
		}
		if n%4000 == 2000 && p.Allow("victim") { // every 400 ms: 2.5/s
			honest++
		}
		c.Advance(step)
	}
	if honest < 9 {
		t.Fatalf("with two 200 µs forged presentations in flight (10,000/s), the honest client at half its pace got %d/10", honest)
	}
}

// TestNewBucketNeverSilentlyDeniesAll: DESIGN's invariant "bad input
// gets a clear error, never ... a silent deny-all". A free take (cost 0)
// of a positive, finite capacity and rate that NewBucket accepts can round
// its tolerance to zero: the result is the zero Bucket, which refuses every
// take with a wait of 73 years.
func TestNewBucketNeverSilentlyDeniesAll(t *testing.T) {
	b, err := driver.NewShape(1e-300, 1e300, 0)
	if err != nil {
		return // a clear error is fine
	}
	if _, wait, ok := b.Take(0, 0); !ok {
		t.Fatalf("NewBucket(1e-300, 1e300, 0) returned no error and a Bucket that refuses a free take on a full bucket (wait %v)", wait)
	}
}
