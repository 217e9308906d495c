package pace_test

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/internal/fakeclock"
)

// newBurstT returns a Pace of rate per second with a bucket of burst events
// on a fake clock.
func newBurstT(t testing.TB, rate, burst float64) (*pace.Pace, *fakeclock.Clock) {
	t.Helper()
	c := newClock()
	p, err := pace.New(rate, pace.WithBurst(burst), pace.WithClock(c.Now))
	if err != nil {
		t.Fatalf("New(%v, WithBurst(%v)) = %v", rate, burst, err)
	}
	return p, c
}

// never is what RetryAfter reports for a ReserveN that can never fit.
const never = time.Duration(math.MaxInt64)

// TestReserveN walks a key of 10/s and a burst of 10 through reservations
// of several events: all or none, and those that can never fit refused at
// once without debiting anything.
func TestReserveN(t *testing.T) {
	p, c := newBurstT(t, 10, 10)
	steps := []struct {
		at        time.Duration
		n         int
		ok        bool
		remaining int
		retry     time.Duration
	}{
		{0, 4, true, 6, 0},
		{0, 7, false, 0, 100 * time.Millisecond}, // one event short: all or none
		{0, 11, false, 0, never},                 // more than the burst
		{0, 0, false, 0, never},                  // no reservation
		{0, -3, false, 0, never},
		{0, 6, true, 0, 0},
		{250 * time.Millisecond, 3, false, 0, 50 * time.Millisecond},
		{300 * time.Millisecond, 3, true, 0, 0},
		{1300 * time.Millisecond, 10, true, 0, 0},
	}
	for i, s := range steps {
		c.Set(start.Add(s.at))
		r := p.ReserveN("k", s.n)
		if r.OK() != s.ok || r.Remaining() != s.remaining || r.RetryAfter() != s.retry {
			t.Fatalf("step %d: at %v ReserveN(%d) = %v, %d left, retry %v; want %v, %d, %v",
				i, s.at, s.n, r.OK(), r.Remaining(), r.RetryAfter(), s.ok, s.remaining, s.retry)
		}
	}
}

// TestSettleFewerGivesBack: settled at once at fewer than reserved, the
// rest is back at once; settled late, only the part the bucket has not
// refilled is, and the kept events stay within rate × T + burst.
func TestSettleFewerGivesBack(t *testing.T) {
	p, _ := newBurstT(t, 10, 10) // 100 ms an event
	r := p.ReserveN("k", 8)
	r.Settle(3)
	if n := drain(p, "k"); n != 7 {
		t.Fatalf("reserve 8, settle 3 at once: %d events fit; want 7", n)
	}
	p, c := newBurstT(t, 10, 10)
	r = p.ReserveN("k", 10)
	c.Advance(300 * time.Millisecond)
	r.Settle(5) // the 5 given back are the last 5, still unrefilled
	k := &kept{rate: 10, capacity: 10}
	for range 5 {
		k.add(0)
	}
	if n := drainKept(p, "k", c, k); n != 8 {
		t.Fatalf("reserve 10, settle 5 at 300 ms: %d events fit; want 8 (5 given back, 3 refilled)", n)
	}
	k.check(t, "reserve 10, settle 5 late")
	r.Settle(0)
	r.Return()
	if p.Allow("k") {
		t.Fatal("a second Settle on the same variable gave events back")
	}
}

// TestSettleMoreGoesIntoDebt: settled above the reservation, the excess is
// debited whether or not it fits, and the key is refused until the pace has
// repaid it.
func TestSettleMoreGoesIntoDebt(t *testing.T) {
	p, c := newBurstT(t, 1, 1)
	r := p.ReserveN("k", 1)
	r.Settle(5)
	if ok, wait := p.Peek("k"); ok || wait != 5*time.Second {
		t.Fatalf("after settling 5 of 1: Peek = %v, %v; want refused for 5s", ok, wait)
	}
	c.Advance(5*time.Second - time.Nanosecond)
	if p.Allow("k") {
		t.Fatal("admitted before the debt was repaid")
	}
	c.Advance(time.Nanosecond)
	if !p.Allow("k") || p.Allow("k") {
		t.Fatal("want exactly one event once the debt was repaid")
	}
	r = p.ReserveN("huge", 1)
	r.Settle(math.MaxInt) // debt saturates at about 73 years: no overflow into credit
	if ok, wait := p.Peek("huge"); ok || wait < 70*365*24*time.Hour {
		t.Fatalf("after settling MaxInt of 1: Peek = %v, %v; want refused for decades", ok, wait)
	}
}

// TestSettleRefusedDoesNothing: Settle on a refused reservation, one that
// can never fit, or the zero Reservation, changes nothing.
func TestSettleRefusedDoesNothing(t *testing.T) {
	p, _ := newBurstT(t, 10, 10)
	full := p.ReserveN("k", 10)
	refused, never, zero := p.ReserveN("k", 1), p.ReserveN("k", 11), pace.Reservation{}
	refused.Settle(0)
	never.Settle(100)
	zero.Settle(3)
	if p.Allow("k") {
		t.Fatal("a Settle of a refused reservation gave back events")
	}
	full.Settle(10)
	if p.Allow("k") {
		t.Fatal("settled at exactly what it reserved, events came back")
	}
}

// TestUnderEstimatorCannotSustainMoreThanRate: a client that reserves 2 and
// always spends 5, asking every 10 ms for a minute at 10/s and a burst of
// 10, keeps at most rate × T + burst + its last excess.
func TestUnderEstimatorCannotSustainMoreThanRate(t *testing.T) {
	p, c := newBurstT(t, 10, 10)
	total, last := 0, 0
	for range 6000 {
		if r := p.ReserveN("k", 2); r.OK() {
			r.Settle(5)
			total, last = total+5, 3
		}
		c.Advance(10 * time.Millisecond)
	}
	if bound := 10*60 + 10 + last; total > bound {
		t.Fatalf("an under-estimating client kept %d units in 60 s; at most %d allowed", total, bound)
	}
	if total < 10*60-5 {
		t.Fatalf("kept %d units in 60 s at 10/s: the debt refuses more than it owes", total)
	}
}

// TestSettleAtZeroSpendsNothing: forgers who reserve up to the whole burst
// under the honest client's key and settle at 0 at once change nothing of
// the honest client's decisions, with or without honest reservations
// outstanding.
func TestSettleAtZeroSpendsNothing(t *testing.T) {
	run := func(forge bool) []string {
		p, c := newBurstT(t, 20, 40)
		var log []string
		var held []*pace.Reservation
		for step := range 2000 {
			if forge {
				for n := 1; n <= 40; n += 13 {
					r := p.ReserveN("client", n)
					r.Settle(0)
				}
			}
			switch step % 7 {
			case 0, 3:
				r := p.ReserveN("client", 1+step%5)
				log = append(log, fmt.Sprint(r.OK(), r.Remaining(), r.RetryAfter()))
				if r.OK() {
					held = append(held, &r)
				}
			case 5:
				if len(held) > 0 {
					held[0].Settle(step % 4) // oldest first: out of order
					held = held[1:]
				}
			}
			c.Advance(7 * time.Millisecond)
		}
		return log
	}
	if honest, forged := run(false), run(true); !slices.Equal(honest, forged) {
		i := 0
		for i < len(honest) && honest[i] == forged[i] {
			i++
		}
		t.Fatalf("forgers settled at 0 changed the honest client's decision %d: %s without, %s with", i, honest[i], forged[i])
	}
}
