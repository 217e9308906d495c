package pace

import (
	"math"
	"time"
)

// BurstRefillWindow is how long a slot must sit at or below its sustained cap
// to refill the full burst budget. Draining above sustained is proportional
// to how far above (a full 2× load drains 1:1); refilling is linear over this
// window.
const BurstRefillWindow = time.Hour

// BurstSlotState is the state behind Store.AcquireSlotBurst: live usage,
// remaining burst budget, and the last assessment time, with the model
// parameters persisted so that releases and heartbeats can account for time
// without their callers repeating them.
//
// The zero value is an absent slot: Count 0 and, at its first admission, a
// full budget.
//
// The arithmetic of AdmitBurst, RefreshBurst and ReleaseBurst (each first
// brings the budget up to date at the live count) is the reference for every
// backend. Each step's drain or refill is computed as floor(a × b / c) in
// IEEE-754 double precision on integer nanoseconds, so a Lua script or a SQL
// function doing the same operations in the same order reaches the same
// state to the nanosecond.
type BurstSlotState struct {
	Count          int64         // live connections
	BurstRemaining time.Duration // budget left, in [0, BurstBudget]
	LastAssessed   time.Time     // when BurstRemaining was last brought up to date
	Expires        time.Time     // when the holders are presumed gone without a refresh
	Sustained      int64         // the sustained cap of the last admission
	BurstBudget    time.Duration // the budget of the last admission
}

// AdmitBurst brings st up to date at now, then decides whether one more
// connection is admitted under the sustained/ceiling burst model (see
// Store.AcquireSlotBurst and docs/store.md): up to sustained always, up to
// ceiling while burst budget remains, never past ceiling. Above sustained the
// budget drains by elapsed × (count − sustained) / sustained; at or below it,
// it refills at burstBudget per BurstRefillWindow.
//
// st is mutated in place: on admission Count and Expires (now + ttl)
// advance, on rejection only the assessment is recorded; the caller tells a
// ceiling rejection (st.Count >= ceiling) from a budget one. A state never
// assessed (zero LastAssessed) starts with a full budget, so now must not be
// the zero time.Time. The arguments are not validated here: see
// driver.ValidateSlotBurst.
func AdmitBurst(st *BurstSlotState, sustained, ceiling int64, burstBudget, ttl time.Duration, now time.Time) bool {
	if st.LastAssessed.IsZero() {
		*st = BurstSlotState{BurstRemaining: burstBudget, LastAssessed: now}
	} else {
		AssessBurst(st, now)
	}
	st.Sustained, st.BurstBudget = sustained, burstBudget
	st.BurstRemaining = min(st.BurstRemaining, burstBudget)

	switch {
	case st.Count >= ceiling:
		return false
	case st.Count >= sustained && st.BurstRemaining <= 0:
		return false
	}
	st.Count++
	st.Expires = now.Add(ttl)
	return true
}

// AssessBurst charges or refills the interval from st.LastAssessed to now at
// the live count, with the parameters persisted in st. A slot whose idle TTL
// has run out is charged at its count up to Expires; then its holders are
// presumed gone and its count drops to zero, while the budget it burned stays
// owed until it has refilled, so letting a slot expire does not launder a
// burst. A now before LastAssessed (a clock that went backwards) charges
// nothing and does not move LastAssessed back. The zero state (an absent
// slot) is left as it is, so that a release or a heartbeat on a slot that
// does not exist cannot turn it into one with an empty budget.
func AssessBurst(st *BurstSlotState, now time.Time) {
	if st.LastAssessed.IsZero() {
		return
	}
	if st.Count > 0 && !st.Expires.IsZero() && !now.Before(st.Expires) {
		chargeBurst(st, st.Expires)
		st.Count = 0
	}
	chargeBurst(st, now)
}

// chargeBurst accounts for the time from st.LastAssessed to t at st.Count.
func chargeBurst(st *BurstSlotState, t time.Time) {
	elapsed := t.Sub(st.LastAssessed)
	if elapsed <= 0 {
		return
	}
	st.LastAssessed = t
	if st.Count > st.Sustained && st.Sustained > 0 {
		drain := mulDiv(elapsed, time.Duration(st.Count-st.Sustained), time.Duration(st.Sustained))
		st.BurstRemaining = max(st.BurstRemaining-drain, 0)
		return
	}
	// Compared as a deficit, not summed: remaining + refill overflows an
	// int64 for huge budgets and long idle times.
	if refill := mulDiv(elapsed, st.BurstBudget, BurstRefillWindow); refill >= st.BurstBudget-st.BurstRemaining {
		st.BurstRemaining = st.BurstBudget
	} else {
		st.BurstRemaining += refill
	}
}

// mulDiv returns floor(a × b / c) computed in double precision, saturated to
// the int64 range. Written as one expression so that every engine rounds it
// alike.
func mulDiv(a, b, c time.Duration) time.Duration {
	q := math.Floor(float64(a) * float64(b) / float64(c))
	if q >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(q)
}

// RefreshBurst charges elapsed time before extending the slot's idle TTL to
// now + ttl. It is a no-op on a slot with no live connection, including one
// whose TTL has already run out, so a stray heartbeat cannot resurrect a
// reaped counter.
func RefreshBurst(st *BurstSlotState, ttl time.Duration, now time.Time) {
	AssessBurst(st, now)
	if st.Count > 0 {
		st.Expires = now.Add(ttl)
	}
}

// ReleaseBurst charges the time spent at the old count before releasing one
// connection, clamped at zero. This prevents disconnecting burst holders from
// erasing the budget they consumed.
func ReleaseBurst(st *BurstSlotState, now time.Time) {
	AssessBurst(st, now)
	if st.Count > 0 {
		st.Count--
	}
}

// ReclaimAt reports an instant from which st, left alone, is
// indistinguishable from an absent slot (no live connection and a full
// budget), so a backend may drop the row then. It is deliberately
// conservative: a slot with a deficit, or above sustained, is kept two
// whole BurstRefillWindows after its last activity or expiry, whichever is
// later. A tighter bound (the exact refill time of the deficit) can fall a
// nanosecond short, because assessBurst floors each piece of a refill split
// at the expiry, and double precision rounds products beyond 2⁵³; one
// window refills a full budget from empty, and the second absorbs every
// rounding. The zero state reports the zero time.
func (st *BurstSlotState) ReclaimAt() time.Time {
	at := st.LastAssessed
	if st.Count > 0 && st.Expires.After(at) {
		at = st.Expires
	}
	if st.BurstRemaining < st.BurstBudget || st.Count > st.Sustained {
		at = at.Add(2 * BurstRefillWindow)
	}
	return at
}
