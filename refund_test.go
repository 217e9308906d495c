package pace_test

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/driver"
)

// kept is an independent check of the promise "never over pace": it knows
// nothing of arrival times or refunds, only the clock readings of the events
// that were admitted and not given back, and counts them in every window.
type kept struct {
	rate, capacity float64 // events per second; events
	at             []time.Duration
}

func newKept(rate float64) *kept { return &kept{rate: rate, capacity: max(1, rate)} }

func (k *kept) add(at time.Duration) { k.at = append(k.at, at) }

func (k *kept) remove(at time.Duration) {
	i := slices.Index(k.at, at)
	k.at = slices.Delete(k.at, i, i+1)
}

// worst returns the window [from, to] whose count most exceeds
// rate × (to − from) + capacity, and by how much (≤ 0: the promise holds).
func (k *kept) worst() (from, to time.Duration, n int, excess float64) {
	at := slices.Clone(k.at)
	slices.Sort(at)
	excess = -1
	for i := range at {
		for j := i; j < len(at); j++ {
			bound := k.rate*(at[j]-at[i]).Seconds() + k.capacity
			if e := float64(j-i+1) - bound; e > excess {
				from, to, n, excess = at[i], at[j], j-i+1, e
			}
		}
	}
	return from, to, n, excess
}

func (k *kept) check(t *testing.T, what string) {
	t.Helper()
	if from, to, n, e := k.worst(); e > 1e-9 {
		t.Fatalf("%s: %d kept events in [%v, %v]; at most %.3f allowed (rate %v, capacity %v)",
			what, n, from, to, float64(n)-e, k.rate, k.capacity)
	}
}

// held is a reservation kept by a test, with the clock reading of its
// decision, for the kept-events model.
type held struct {
	r  *pace.Reservation
	at time.Duration
}

// TestOutOfOrderReturnsNeverOverPace pins an over-admission that refunds out
// of order once allowed: at 2/s (capacity 2), reserve A and B, return A at
// once; at 500 ms take 2 events, return B, take again. The third take at
// 500 ms must be refused: B's place moved earlier when A was given back,
// and by 500 ms it had refilled.
func TestOutOfOrderReturnsNeverOverPace(t *testing.T) {
	p, c := newPaceT(t, 2)
	a, b := p.Reserve("k"), p.Reserve("k")
	a.Return()
	c.Advance(500 * time.Millisecond)
	if n := drain(p, "k"); n != 2 {
		t.Fatalf("at 500 ms %d events fit; want 2", n)
	}
	b.Return()
	if p.Allow("k") {
		t.Fatal("3 kept events at 500 ms at capacity 2: B's late return gave back time already refilled")
	}
}

// TestHalfReturnedThenDrained is a second over-admission that refunds out of
// order once allowed, on a fake clock: pace 10/s, reserve 10, return 5,
// 500 ms later drain, return the other 5, drain again. The kept events must
// stay within rate × T + capacity.
func TestHalfReturnedThenDrained(t *testing.T) {
	p, c := newPaceT(t, 10)
	k := newKept(10)
	var rs []*pace.Reservation
	for range 10 {
		r := p.Reserve("k")
		if !r.OK() {
			t.Fatal("a full bucket of 10 refused")
		}
		rs = append(rs, &r)
		k.add(c.Elapsed())
	}
	for _, r := range rs[:5] {
		r.Return()
		k.remove(0)
	}
	c.Advance(500 * time.Millisecond)
	for p.Allow("k") {
		k.add(c.Elapsed())
	}
	for _, r := range rs[5:] {
		r.Return()
		k.remove(0)
	}
	for p.Allow("k") {
		k.add(c.Elapsed())
	}
	k.check(t, "reserve 10, return 5, drain at 500 ms, return 5, drain")
}

// TestRandomReturnOrders searches for an order and timing of returns that
// over-admits: many keys' worth of random schedules at 10/s, each return
// picking any outstanding reservation.
func TestRandomReturnOrders(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 7))
		p, c := newPaceT(t, 10)
		k := newKept(10)
		var out []held
		for range 300 {
			switch rng.IntN(4) {
			case 0, 1:
				r := p.Reserve("k")
				if r.OK() {
					out = append(out, held{&r, c.Elapsed()})
					k.add(c.Elapsed())
				}
			case 2:
				if len(out) > 0 {
					i := rng.IntN(len(out))
					out[i].r.Return()
					k.remove(out[i].at)
					out = slices.Delete(out, i, i+1)
				}
			case 3:
				c.Advance(time.Duration(rng.Int64N(int64(150 * time.Millisecond))))
			}
		}
		k.check(t, "random schedule")
	}
}

// TestReturnIsExactWhenInOrder: returning the latest reservation is exact,
// at once and later, even with other outstanding reservations below it (the
// forger at the head of the queue is what the token endpoint sees).
func TestReturnIsExactWhenInOrder(t *testing.T) {
	p, c := newPaceT(t, 4) // 250 ms per event, capacity 4
	p.Allow("k")
	p.Allow("k")
	a := p.Reserve("k")
	b := p.Reserve("k") // the bucket is empty
	c.Advance(100 * time.Millisecond)
	b.Return() // the latest: all of it, though 100 ms have passed
	a.Return() // now the latest again: all of it
	// Two events kept at 0, 100 ms elapsed: 2 + 0.4 events of room, so 2 fit.
	if n := drain(p, "k"); n != 2 {
		t.Fatalf("after in-order returns %d events fit; want 2", n)
	}
}

// TestCopiedReservationReturnsOnce: a second Return through a copy of a
// reservation gives nothing back (five copies once kept 14 events at
// capacity 10), whether the first Return gave back the key's latest event or
// one below others.
func TestCopiedReservationReturnsOnce(t *testing.T) {
	for _, latest := range []bool{true, false} {
		p, _ := newPaceT(t, 10)
		k := newKept(10)
		var copies []*pace.Reservation
		for i := range 10 {
			r := p.Reserve("k")
			k.add(0)
			if (i == 9) == latest && copies == nil {
				for range 5 {
					copies = append(copies, copyOf(&r))
				}
			}
		}
		for _, c := range copies {
			c.Return()
		}
		k.remove(0)
		for p.Allow("k") {
			k.add(0)
		}
		k.check(t, fmt.Sprintf("five Returns through copies (latest: %v)", latest))
	}
}

// TestFrozenInstantReturnsAreNotCopies: takes at one frozen instant can share
// key, decision time and arrival time; a genuine Return must never be taken
// for a copy's.
func TestFrozenInstantReturnsAreNotCopies(t *testing.T) {
	p, _ := newPaceT(t, 3)
	z, x := p.Reserve("k"), p.Reserve("k")
	z.Return()
	y, w := p.Reserve("k"), p.Reserve("k")
	y.Return()
	x.Return()
	if !w.OK() {
		t.Fatal("w refused")
	}
	if n := drain(p, "k"); n != 2 {
		t.Fatalf("after the returns %d events fit; want 2 (only w kept)", n)
	}
}

// copyOf copies a Reservation the way careless code does. go vet reports
// such copies (the point of the marker), so the copy goes through reflect.
func copyOf(r *pace.Reservation) *pace.Reservation {
	c := new(pace.Reservation)
	reflect.ValueOf(c).Elem().Set(reflect.ValueOf(r).Elem())
	return c
}

// TestZeroBucketRefuses: the zero Bucket admits nothing, through Take and
// through a table.
func TestZeroBucketRefuses(t *testing.T) {
	var z driver.Shape
	if _, wait, ok := z.Take(0, 0); ok || wait <= 0 {
		t.Fatalf("Bucket{}.Take = %v, %v; want refused with a wait", ok, wait)
	}
	if n := z.Remaining(0, 0); n != 0 {
		t.Fatalf("Bucket{}.Remaining = %d; want 0", n)
	}
	tab := pace.NewBuckets(nil)
	for range 1000 {
		if ok, _ := tab.Take("k", driver.Shape{}); ok {
			t.Fatal("Buckets.Take with the zero Bucket admitted")
		}
	}
	if tab.Len() != 0 {
		t.Fatalf("Len() = %d after refused takes; want 0", tab.Len())
	}
}

// TestPeek: Peek answers as Reserve would and debits nothing.
func TestPeek(t *testing.T) {
	p, c := newPaceT(t, 2)
	for range 3 {
		if ok, wait := p.Peek("k"); !ok || wait != 0 {
			t.Fatalf("Peek on a full bucket = %v, %v; want true, 0", ok, wait)
		}
	}
	if p.Len() != 0 {
		t.Fatalf("Peek left %d rows; want 0", p.Len())
	}
	drain(p, "k")
	c.Advance(100 * time.Millisecond)
	ok, wait := p.Peek("k")
	if ok || wait != 400*time.Millisecond {
		t.Fatalf("Peek on an empty bucket = %v, %v; want false, 400ms", ok, wait)
	}
	c.Advance(wait)
	if ok, _ := p.Peek("k"); !ok || !p.Allow("k") || p.Allow("k") {
		t.Fatal("after the Peek's wait, want exactly one event")
	}
}

// TestSlowCheckDecideAfter: with a 50 ms check (a password hash), 50 forged
// presentations in flight under the honest client's id must not starve it
// when the endpoint decides after verification (Peek, check, Allow). The
// honest client asks at half its pace of 5/s.
func TestSlowCheckDecideAfter(t *testing.T) {
	const check = 50 * time.Millisecond
	run := func(forgers int, decideAfter bool) int {
		p, c := newPaceT(t, 5)
		// In flight: a reservation (reserve-then-return) or nothing
		// (decide-after), finishing its check at done.
		type flight struct {
			r    *pace.Reservation
			done time.Duration
		}
		var inFlight []flight
		admitted := 0
		for step := range 4000 { // 4 s in steps of 1 ms
			now := c.Elapsed()
			// Checks that finished fail (forgers) and give back.
			inFlight = slices.DeleteFunc(inFlight, func(f flight) bool {
				if f.done > now {
					return false
				}
				if f.r != nil {
					f.r.Return()
				}
				return true
			})
			for len(inFlight) < forgers { // the forger keeps its quota in flight
				f := flight{done: now + check}
				if decideAfter {
					p.Peek("client") // over pace or not, the check runs and fails: nothing taken
				} else {
					r := p.Reserve("client")
					f.r = &r
				}
				inFlight = append(inFlight, f)
			}
			if step%400 == 0 { // the honest client, at 2.5/s; its check passes
				if decideAfter {
					if ok, _ := p.Peek("client"); ok && p.Allow("client") {
						admitted++
					}
				} else if r := p.Reserve("client"); r.OK() {
					admitted++
				}
			}
			c.Advance(time.Millisecond)
		}
		return admitted
	}
	// The attack bites reserve-then-return (so the scenario is an attack):
	// the forgers' reservations in flight hold the client's bucket.
	if n := run(50, false); n > 5 {
		t.Errorf("reserve-then-return with 50 slow forgers in flight: honest client admitted %d/10; the scenario should starve it (<= 5)", n)
	}
	for _, forgers := range []int{0, 5, 20, 50} {
		if n := run(forgers, true); n < 9 {
			t.Errorf("decide-after with %d forgers in flight: honest client admitted %d/10; want >= 9", forgers, n)
		}
	}
}

// FuzzReturnAnyOrder runs a script of reservations on two keys, returns of
// any outstanding reservation at any time, and clock steps, and checks the
// kept events of each key against rate × T + capacity in every window.
func FuzzReturnAnyOrder(f *testing.F) {
	f.Add(uint16(200), []byte{1, 1, 0x02, 0x20, 1, 1, 0x06, 1})           // TestOutOfOrderReturnsNeverOverPace's 2/s case
	f.Add(uint16(1000), []byte{1, 1, 1, 1, 1, 0x02, 0x02, 0x7c, 1, 1, 1}) // 10/s: return half, wait, drain
	f.Add(uint16(100), []byte{0x81, 1, 0x82, 0x7c, 0x81, 0x06})           // two keys interleaved
	f.Add(uint16(7), []byte{1, 1, 0xfc, 0x0a, 1, 0xfe, 1})                // 0.07/s: slower than one per second
	f.Fuzz(func(t *testing.T, centiRate uint16, script []byte) {
		if centiRate == 0 || len(script) > 600 {
			return
		}
		rate := float64(centiRate) / 100
		p, c := newPaceT(t, rate)
		models := map[string]*kept{"a": newKept(rate), "b": newKept(rate)}
		type out struct {
			held
			key string
		}
		var outs []out
		interval := time.Duration(float64(time.Second) / rate)
		for _, b := range script {
			key := "a"
			if b&0x80 != 0 {
				key = "b"
			}
			switch op, arg := b&3, int(b>>2&0x1f); op {
			case 0: // advance by arg/8 of an interval
				c.Advance(time.Duration(arg) * interval / 8)
			case 1:
				r := p.Reserve(key)
				if r.OK() {
					outs = append(outs, out{held{&r, c.Elapsed()}, key})
					models[key].add(c.Elapsed())
				}
			case 2, 3: // return any outstanding one (3: and try it twice)
				if len(outs) == 0 {
					continue
				}
				i := arg % len(outs)
				o := outs[i]
				o.r.Return()
				if op == 3 {
					o.r.Return()
				}
				models[o.key].remove(o.at)
				outs = slices.Delete(outs, i, i+1)
			}
		}
		for key, m := range models {
			m.check(t, "key "+key)
		}
	})
}

// TestLateReturnsOldestFirstAreExact: two reservations returned late, the
// older first (as forgers' checks finish), each give back the whole event:
// the first's return moves the second's place earlier, and the total of
// out-of-order refunds tells the second how far. A conservative refund (one
// interval after the decision) would give the second nothing back at 260 ms.
func TestLateReturnsOldestFirstAreExact(t *testing.T) {
	p, c := newPaceT(t, 4) // 250 ms an event, capacity 4
	k := newKept(4)
	p.Allow("k")
	p.Allow("k")
	k.add(0)
	k.add(0)
	a, b := p.Reserve("k"), p.Reserve("k") // the bucket is empty
	c.Advance(260 * time.Millisecond)
	a.Return()
	b.Return()
	n := 0
	for p.Allow("k") {
		n++
		k.add(c.Elapsed())
	}
	if n != 3 {
		t.Fatalf("after two late returns, oldest first, %d events fit at 260 ms; want 3 (as if neither had been reserved)", n)
	}
	k.check(t, "late returns, oldest first")
}
