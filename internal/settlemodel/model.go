// Package settlemodel is an independent model of the promise of
// reservations settled at their actual count: it knows nothing of arrival
// times, refunds or debt, only, per key, the clock readings of admissions
// with the units they reserved and were settled at, and of the settlements
// above what was reserved (the overdrafts). It checks what a limiter kept
// against the bound the promise states, counted per window from first
// principles.
package settlemodel

import (
	"slices"
	"testing"
	"time"
)

// Units counts the units one key kept under a limit of Rate units per
// second with a bucket of Burst units. It is not safe for concurrent use.
type Units struct {
	Rate, Burst float64 // units per second; units
	adm         []*Admission
	seq         int // the order of admissions and settlements
	over        []overdraft
}

// Admission is one admitted reservation, as the model keeps it.
type Admission struct {
	at      time.Duration
	seq     int
	n, used int // used = n until settled
}

type overdraft struct {
	at    time.Duration
	seq   int
	units int
}

// Admit records an admission of n units at the clock reading at (any
// epoch, the same for every call) and returns it, kept at n until settled.
func (m *Units) Admit(at time.Duration, n int) *Admission {
	m.seq++
	a := &Admission{at: at, seq: m.seq, n: n, used: n}
	m.adm = append(m.adm, a)
	return a
}

// Settle records the settlement of a at used units (below 0: 0) at the
// clock reading at.
func (m *Units) Settle(a *Admission, at time.Duration, used int) {
	m.seq++
	a.used = max(used, 0)
	if a.used > a.n {
		m.over = append(m.over, overdraft{at, m.seq, a.used - a.n})
	}
}

// Admissions reports how many admissions the model holds.
func (m *Units) Admissions() int { return len(m.adm) }

// kept is what an admission keeps at its decision: what it was settled at,
// up to what it reserved (the excess is an overdraft, kept when settled).
func (a *Admission) kept() int { return min(a.used, a.n) }

// Check fails t unless, for the key named key:
//
//   - in every window [from, to], the units kept (admissions decided in it,
//     overdrafts settled in it) are at most Rate × (to − from) + Burst + the
//     overdrafts settled in it;
//   - from the idle key at 0 up to each admission A, the units kept by the
//     admissions up to A and the overdrafts settled before A are at most
//     Rate × A + Burst: the debt of an overdraft is repaid before anything
//     more is admitted, so over any interval the total is at most
//     Rate × T + Burst + the overdrafts settled after the last admission,
//     and a client that always reserves too little cannot sustain more
//     than Rate.
func (m *Units) Check(t testing.TB, key string) {
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
			if bound := m.Rate*(to-from).Seconds() + m.Burst + float64(allowance); float64(units) > bound+eps {
				t.Fatalf("key %s: %d units kept in [%v, %v]; at most %.3f (rate %v, burst %v, overdrafts %d)",
					key, units, from, to, bound, m.Rate, m.Burst, allowance)
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
		if bound := m.Rate*last.at.Seconds() + m.Burst; float64(units) > bound+eps {
			t.Fatalf("key %s: from idle, %d units kept up to the admission at %v; at most %.3f (rate %v, burst %v)",
				key, units, last.at, bound, m.Rate, m.Burst)
		}
	}
}
