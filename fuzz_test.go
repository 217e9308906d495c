package pace_test

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/ratepace/pace"
)

// model is a reference pace for one key written the other way round: as
// credit (nanoseconds of refill time on hand) rather than as an arrival time.
// It follows the documented rounding: one event costs ceil(1e9/rate) ns of
// credit and a full bucket holds floor(max(1, rate) × that).
type model struct {
	interval, tolerance int64
	credit, last        map[string]int64
}

func newModel(rate float64) *model {
	interval := int64(math.Ceil(1e9 / rate))
	return &model{
		interval:  interval,
		tolerance: int64(math.Floor(math.Max(1, rate) * float64(interval))),
		credit:    map[string]int64{},
		last:      map[string]int64{},
	}
}

func (m *model) refill(k string, now int64) {
	c, seen := m.credit[k]
	if !seen {
		c = m.tolerance
	} else {
		c = min(m.tolerance, c+now-m.last[k])
	}
	m.credit[k], m.last[k] = c, now
}

// reserve also returns when the reserved event's refill time ends: now plus
// the credit missing after it.
func (m *model) reserve(k string, now int64) (ok bool, remaining int, retry time.Duration, ends int64) {
	m.refill(k, now)
	if c := m.credit[k]; c >= m.interval {
		m.credit[k] = c - m.interval
		return true, int((c - m.interval) / m.interval), 0, now + m.tolerance - m.credit[k]
	}
	return false, 0, time.Duration(m.interval - m.credit[k]), 0
}

// giveBack refunds the part of a reserved event that has not refilled yet:
// the part of its refill time after now.
func (m *model) giveBack(k string, now, ends int64) {
	m.refill(k, now)
	give := min(m.interval, max(0, ends-now))
	m.credit[k] = min(m.tolerance, m.credit[k]+give)
}

// FuzzPace runs a script of (advance clock, reserve, return, allow) against
// a Pace and the model, and wants the same decision, Remaining and
// RetryAfter every time. It returns only a key's latest take, where a late
// Return is exact; FuzzReturnAnyOrder checks every other order against the
// kept events.
func FuzzPace(f *testing.F) {
	f.Add(uint16(400), []byte{1, 1, 1, 1, 1, 2, 2, 0x40, 1})        // 4/s: drain, return twice, wait, reserve
	f.Add(uint16(5), []byte{1, 1, 0xfc, 1, 2, 3, 3})                // 0.05/s: slower than one per second
	f.Add(uint16(65535), []byte{3, 3, 3, 3, 2, 0x08, 1, 2, 2, 2})   // 655/s: many small steps, returns without reservations
	f.Add(uint16(100), []byte{0x05, 0x81, 0x82, 0x81, 0x83, 0xff})  // two keys interleaved
	f.Add(uint16(1), []byte{1, 0xfc, 0xfc, 0xfc, 0xfc, 2, 1, 1, 1}) // 0.01/s: return long after the grant
	f.Add(uint16(100), []byte{1, 0x30, 3, 2, 3})                    // 1/s: reserve, refill, another take, then the late return
	f.Fuzz(func(t *testing.T, centiRate uint16, script []byte) {
		if centiRate == 0 || len(script) > 4096 {
			return
		}
		rate := float64(centiRate) / 100
		p, c := newPaceT(t, rate)
		m := newModel(rate)
		type reservation struct {
			r    *pace.Reservation
			key  string
			ends int64
		}
		var held []reservation
		for i, b := range script {
			k := "a"
			if b&0x80 != 0 {
				k = "b"
			}
			now := int64(c.Elapsed())
			switch op, arg := b&3, int64(b>>2&0x1f); op {
			case 0: // advance by arg/8 of an interval, up to four intervals
				c.Advance(time.Duration(arg * m.interval / 8))
			case 1, 3:
				r := p.Reserve(k)
				ok, remaining, retry, ends := m.reserve(k, now)
				if r.OK() != ok || r.Remaining() != remaining || r.RetryAfter() != retry {
					t.Fatalf("step %d: Reserve(%q) at %v = %v, %d left, retry %v; model %v, %d, %v",
						i, k, time.Duration(now), r.OK(), r.Remaining(), r.RetryAfter(), ok, remaining, retry)
				}
				switch {
				case op == 1 && ok:
					held = append(held, reservation{&r, k, ends})
				case ok:
					// A take that stays above the held ones on its key:
					// returning those now would be out of order, which
					// FuzzReturnAnyOrder covers; this model is exact only
					// for returns of a key's latest take.
					held = slices.DeleteFunc(held, func(h reservation) bool { return h.key == k })
				}
			case 2:
				if len(held) == 0 {
					continue
				}
				h := held[len(held)-1]
				held = held[:len(held)-1]
				h.r.Return()
				h.r.Return() // a second Return is a no-op
				m.giveBack(h.key, now, h.ends)
			}
			if p.Len() > 2 {
				t.Fatalf("step %d: Len() = %d with two keys", i, p.Len())
			}
		}
	})
}
