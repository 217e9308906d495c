package pace_test

import (
	"slices"
	"testing"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/internal/settlemodel"
)

// FuzzSettle attacks the promise of ReserveN and Settle on two keys: a
// script reserves any count (valid or not), settles any outstanding
// reservation for any amount (below, at or above what it reserved) at any
// time, forges (reserves and settles at 0 at once), and moves the clock.
// The units kept are checked against settlemodel.Units, which counts them per window;
// a forgery must leave its key exactly as it found it (Peek before and
// after); a count outside [1, Burst] must be refused as never fitting.
func FuzzSettle(f *testing.F) {
	// Each step is three bytes: op, a, b.
	f.Add(uint16(1000), uint8(10), []byte{1, 4, 0, 1, 6, 0, 2, 0, 9, 0, 16, 0, 1, 10, 0})                         // reserve 4 and 6, settle the first at 9, wait, reserve 10
	f.Add(uint16(100), uint8(1), []byte{1, 1, 0, 2, 0, 30, 0, 32, 0, 1, 1, 0, 0, 255, 0, 1, 1, 0})                // 1/s, burst 1: an overdraft of 29, then its debt
	f.Add(uint16(1000), uint8(20), []byte{1, 8, 0, 1, 8, 0, 0, 40, 0, 2, 0, 1, 2, 0, 0, 1, 20, 0})                // two outstanding, the older settled late and low: out of order
	f.Add(uint16(500), uint8(0), []byte{3, 5, 0, 1, 5, 0, 3, 1, 0, 0, 8, 0, 4, 0, 0, 1, 6, 0})                    // forgeries around an honest reservation; default burst
	f.Add(uint16(7), uint8(3), []byte{0x81, 3, 0, 0, 100, 0, 0x82, 0, 1, 0x81, 4, 0, 0x81, 0, 0})                 // 0.07/s, key b: invalid counts 4 and 0
	f.Add(uint16(2000), uint8(50), []byte{1, 50, 0, 0, 10, 0, 2, 0, 100, 0, 200, 0, 1, 1, 0, 5, 0, 0})            // settle 100 of 50, then Allow
	f.Add(uint16(200), uint8(0), []byte{1, 1, 0, 1, 1, 0, 2, 0, 0, 0, 16, 0, 5, 0, 0, 5, 0, 0, 2, 0, 0, 5, 0, 0}) // TestOutOfOrderReturnsNeverOverPace, settled at 0
	f.Add(uint16(1000), uint8(10), []byte{1, 6, 0, 1, 4, 0, 2, 0, 2, 0, 8, 0, 1, 5, 0, 2, 0, 1, 1, 3, 0})         // reserve 6 and 4, settle 6 at 2 at once, wait, take 5, settle 4 at 1 late
	f.Fuzz(func(t *testing.T, centiRate uint16, burst uint8, script []byte) {
		if centiRate == 0 || len(script) > 3*150 {
			return
		}
		rate := float64(centiRate) / 100
		c := newClock()
		opts := []pace.Option{pace.WithClock(c.Now)}
		capacity := max(1, rate)
		if burst > 0 {
			opts = append(opts, pace.WithBurst(float64(burst)))
			capacity = float64(burst)
		}
		p, err := pace.New(rate, opts...)
		if err != nil {
			t.Fatal(err)
		}
		B := p.Burst()
		models := map[string]*settlemodel.Units{"a": {Rate: rate, Burst: capacity}, "b": {Rate: rate, Burst: capacity}}
		type out struct {
			r   *pace.Reservation
			key string
			a   *settlemodel.Admission
		}
		var outs []out
		interval := time.Duration(float64(time.Second) / rate)
		for i := 0; i+2 < len(script); i += 3 {
			op, a, b := script[i], int(script[i+1]), int(script[i+2])
			key := "a"
			if op&0x80 != 0 {
				key = "b"
			}
			m := models[key]
			switch op & 7 {
			case 0: // advance by a/16 of an interval
				c.Advance(time.Duration(a) * interval / 16)
			case 1: // reserve a units (0 to 255: some beyond the burst)
				r := p.ReserveN(key, a)
				if (a < 1 || a > B) && (r.OK() || r.RetryAfter() != never) {
					t.Fatalf("step %d: ReserveN(%d) with a burst of %d = %v, retry %v; want refused, never", i/3, a, B, r.OK(), r.RetryAfter())
				}
				if r.OK() {
					outs = append(outs, out{&r, key, m.Admit(c.Elapsed(), a)})
				}
			case 2, 4: // settle outstanding reservation a at b (4: and again)
				if len(outs) == 0 {
					continue
				}
				j := a % len(outs)
				o := outs[j]
				o.r.Settle(b)
				if op&7 == 4 {
					o.r.Settle(b)
				}
				models[o.key].Settle(o.a, c.Elapsed(), b)
				outs = slices.Delete(outs, j, j+1)
			case 3: // a forgery of a%B+1 units: reserved and settled at 0 at once
				ok, wait := p.Peek(key)
				r := p.ReserveN(key, a%B+1)
				r.Settle(0)
				if ok2, wait2 := p.Peek(key); ok2 != ok || wait2 != wait {
					t.Fatalf("step %d: a forgery of %d settled at 0 changed Peek from %v, %v to %v, %v", i/3, a%B+1, ok, wait, ok2, wait2)
				}
			case 5: // Allow: one unit, never settled
				if p.Allow(key) {
					m.Admit(c.Elapsed(), 1)
				}
			}
		}
		for key, m := range models {
			m.Check(t, key)
		}
	})
}
