package pace_test

import (
	"slices"
	"testing"
	"time"

	"github.com/ratepace/pace"
)

// settledUnits is an independent model of the promise of settlements: it knows
// nothing of arrival times, refunds or debt, only, per key, the clock
// readings of admissions with the units they reserved and were settledUnits at,
// and of the settlements above what was reserved (the overdrafts).
type settledUnits struct {
	rate, burst float64 // units per second; units
	adm         []*admitted
	seq         int // the order of admissions and settlements
	over        []overdraft
}

type admitted struct {
	at      time.Duration
	seq     int
	n, used int // used = n until settledUnits
}

type overdraft struct {
	at    time.Duration
	seq   int
	units int
}

func (m *settledUnits) admit(at time.Duration, n int) *admitted {
	m.seq++
	a := &admitted{at: at, seq: m.seq, n: n, used: n}
	m.adm = append(m.adm, a)
	return a
}

func (m *settledUnits) settle(a *admitted, at time.Duration, used int) {
	m.seq++
	a.used = max(used, 0)
	if a.used > a.n {
		m.over = append(m.over, overdraft{at, m.seq, a.used - a.n})
	}
}

// kept is what an admission keeps at its decision: what it was settledUnits at,
// up to what it reserved (the excess is an overdraft, kept when settledUnits).
func (a *admitted) kept() int { return min(a.used, a.n) }

// check asserts, for the key:
//
//   - in every window [from, to], the units kept (admissions decided in it,
//     overdrafts settledUnits in it) are at most rate × (to − from) + burst + the
//     overdrafts settledUnits in it;
//   - from the idle key at 0 up to each admission A, the units kept by the
//     admissions up to A and the overdrafts settledUnits before A are at most
//     rate × A + burst: the debt of an overdraft is repaid before anything
//     more is admitted, so over any interval the total is at most
//     rate × T + burst + the overdrafts settledUnits after the last admission.
func (m *settledUnits) check(t *testing.T, key string) {
	t.Helper()
	const eps = 1e-9
	at := make([]time.Duration, 0, len(m.adm)+len(m.over))
	for _, a := range m.adm {
		at = append(at, a.at)
	}
	for _, o := range m.over {
		at = append(at, o.at)
	}
	slices.Sort(at)
	at = slices.Compact(at)
	for i, from := range at {
		for _, to := range at[i:] {
			units, allowance := 0, 0
			for _, a := range m.adm {
				if a.at >= from && a.at <= to {
					units += a.kept()
				}
			}
			for _, o := range m.over {
				if o.at >= from && o.at <= to {
					units += o.units
					allowance += o.units
				}
			}
			if bound := m.rate*(to-from).Seconds() + m.burst + float64(allowance); float64(units) > bound+eps {
				t.Fatalf("key %s: %d units kept in [%v, %v]; at most %.3f (rate %v, burst %v, overdrafts %d)",
					key, units, from, to, bound, m.rate, m.burst, allowance)
			}
		}
	}
	for _, last := range m.adm {
		units := 0
		for _, a := range m.adm {
			if a.seq <= last.seq {
				units += a.kept()
			}
		}
		for _, o := range m.over {
			if o.seq < last.seq {
				units += o.units
			}
		}
		if bound := m.rate*last.at.Seconds() + m.burst; float64(units) > bound+eps {
			t.Fatalf("key %s: from idle, %d units kept up to the admission at %v; at most %.3f (rate %v, burst %v)",
				key, units, last.at, bound, m.rate, m.burst)
		}
	}
}

// FuzzSettle attacks the promise of ReserveN and Settle on two keys: a
// script reserves any count (valid or not), settles any outstanding
// reservation for any amount (below, at or above what it reserved) at any
// time, forges (reserves and settles at 0 at once), and moves the clock.
// The units kept are checked against settledUnits, which counts them per window;
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
		models := map[string]*settledUnits{"a": {rate: rate, burst: capacity}, "b": {rate: rate, burst: capacity}}
		type out struct {
			r   *pace.Reservation
			key string
			a   *admitted
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
					outs = append(outs, out{&r, key, m.admit(c.Elapsed(), a)})
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
				models[o.key].settle(o.a, c.Elapsed(), b)
				outs = slices.Delete(outs, j, j+1)
			case 3: // a forgery of a%B+1 units: reserved and settledUnits at 0 at once
				ok, wait := p.Peek(key)
				r := p.ReserveN(key, a%B+1)
				r.Settle(0)
				if ok2, wait2 := p.Peek(key); ok2 != ok || wait2 != wait {
					t.Fatalf("step %d: a forgery of %d settledUnits at 0 changed Peek from %v, %v to %v, %v", i/3, a%B+1, ok, wait, ok2, wait2)
				}
			case 5: // Allow: one unit, never settledUnits
				if p.Allow(key) {
					m.admit(c.Elapsed(), 1)
				}
			}
		}
		for key, m := range models {
			m.check(t, key)
		}
	})
}
