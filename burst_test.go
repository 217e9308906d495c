package pace_test

import (
	"math"
	"testing"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/driver"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// burstStep is one line of a burst story: at t0+at, do op, and expect the
// admission (for "admit"), the count and the remaining budget after it.
type burstStep struct {
	at        time.Duration
	op        string // admit, release, refresh or assess
	want      bool
	count     int64
	remaining time.Duration
}

type burstScript struct {
	name               string
	sustained, ceiling int64
	budget, ttl        time.Duration
	steps              []burstStep
}

func (sc burstScript) run(t *testing.T) {
	t.Helper()
	var st pace.BurstSlotState
	for i, s := range sc.steps {
		now := t0.Add(s.at)
		switch s.op {
		case "admit":
			if got := pace.AdmitBurst(&st, sc.sustained, sc.ceiling, sc.budget, sc.ttl, now); got != s.want {
				t.Fatalf("step %d: at t0+%v AdmitBurst(%d, %d, %v, %v) = %v; want %v (state %+v)", i, s.at, sc.sustained, sc.ceiling, sc.budget, sc.ttl, got, s.want, st)
			}
		case "release":
			pace.ReleaseBurst(&st, now)
		case "refresh":
			pace.RefreshBurst(&st, sc.ttl, now)
		case "assess":
			pace.AssessBurst(&st, now)
		default:
			t.Fatalf("step %d: unknown op %q", i, s.op)
		}
		if st.Count != s.count || st.BurstRemaining != s.remaining {
			t.Fatalf("step %d: at t0+%v after %s: Count %d, BurstRemaining %v; want %d, %v", i, s.at, s.op, st.Count, st.BurstRemaining, s.count, s.remaining)
		}
	}
}

func TestBurstScripts(t *testing.T) {
	const s = time.Second
	for _, sc := range []burstScript{
		{
			name: "SustainedAlwaysAdmittedNoBudgetAbove", sustained: 3, ceiling: 6, budget: 0, ttl: time.Hour,
			steps: []burstStep{
				{0, "admit", true, 1, 0},
				{0, "admit", true, 2, 0},
				{0, "admit", true, 3, 0},
				{0, "admit", false, 3, 0},
				{time.Hour / 2, "admit", false, 3, 0}, // a zero budget never refills
				{time.Hour / 2, "release", false, 2, 0},
				{time.Hour / 2, "admit", true, 3, 0}, // back to sustained: always admitted
			},
		},
		{
			name: "BurstWhileBudgetLasts", sustained: 2, ceiling: 4, budget: 10 * s, ttl: time.Hour,
			steps: []burstStep{
				{0, "admit", true, 1, 10 * s},
				{0, "admit", true, 2, 10 * s},
				{0, "admit", true, 3, 10 * s},     // above sustained, budget left
				{4 * s, "admit", true, 4, 8 * s},  // 4s at one above of two: 2s drained
				{6 * s, "admit", false, 4, 6 * s}, // the ceiling: 2s at two above drained 2s
				{12 * s, "release", false, 3, 0},  // charged at 4 first: 6s at 1:1
				{12 * s, "admit", false, 3, 0},    // below the ceiling, budget spent
				{12 * s, "release", false, 2, 0},
				{12 * s, "admit", false, 2, 0}, // a third would be above sustained
				{12 * s, "release", false, 1, 0},
				{12 * s, "admit", true, 2, 0},                        // up to sustained: always, even with nothing left
				{48 * s, "assess", false, 2, 100 * time.Millisecond}, // 36s refill 10s/3600s each
				{48 * s, "admit", true, 3, 100 * time.Millisecond},
				{48*s + 200*time.Millisecond, "admit", false, 3, 0}, // 200ms at one above of two: 100ms
			},
		},
		{
			name: "DrainIsFloorOfProportion", sustained: 3, ceiling: 6, budget: time.Hour, ttl: 3 * time.Hour,
			steps: []burstStep{
				{0, "admit", true, 1, time.Hour},
				{0, "admit", true, 2, time.Hour},
				{0, "admit", true, 3, time.Hour},
				{0, "admit", true, 4, time.Hour},
				{0, "admit", true, 5, time.Hour},
				{1000, "assess", false, 5, time.Hour - 666}, // floor(1000 × 2 / 3)
				{2000, "assess", false, 5, time.Hour - 1332},
				{2 * time.Hour, "assess", false, 5, 0}, // clamped at zero
			},
		},
		{
			name: "RefillLinearAndCapped", sustained: 1, ceiling: 2, budget: time.Hour, ttl: 24 * time.Hour,
			steps: []burstStep{
				{0, "admit", true, 1, time.Hour},
				{0, "admit", true, 2, time.Hour},
				{time.Hour, "release", false, 1, 0}, // camping at 2×: drained 1:1
				{90 * time.Minute, "assess", false, 1, 30 * time.Minute},
				{2 * time.Hour, "assess", false, 1, time.Hour},
				{5 * time.Hour, "assess", false, 1, time.Hour}, // never above the budget
			},
		},
		{
			name: "RefreshChargesFirst", sustained: 1, ceiling: 2, budget: 10 * s, ttl: 5 * s,
			steps: []burstStep{
				{0, "admit", true, 1, 10 * s},
				{0, "admit", true, 2, 10 * s},
				{4 * s, "refresh", false, 2, 6 * s}, // charged 4s at 2, expiry now t0+9s
				{8 * s, "assess", false, 2, 2 * s},  // still alive thanks to the refresh
				{8 * s, "release", false, 1, 2 * s},
				{44 * s, "assess", false, 0, 2*s + 2777777 + 97222222}, // 1s of refill at 1 until the expiry at 9s, 35s at 0
			},
		},
		{
			// The decision that closes the laundering hole: the holders of
			// an expired slot are presumed gone, but the budget they burned
			// is still owed.
			name: "ExpiryKeepsDebt", sustained: 1, ceiling: 2, budget: 10 * s, ttl: 5 * s,
			steps: []burstStep{
				{0, "admit", true, 1, 10 * s},
				{0, "admit", true, 2, 10 * s},
				{20 * s, "assess", false, 0, 5*s + 41666666}, // 5s charged at 2 until expiry, then 15s × 10s/3600s back
				{20 * s, "admit", true, 1, 5*s + 41666666},
				{20 * s, "admit", true, 2, 5*s + 41666666},
				{24 * s, "admit", false, 2, s + 41666666}, // at the ceiling: 4s more drained from what was left
			},
		},
		{
			name: "RefreshDoesNotResurrect", sustained: 1, ceiling: 1, budget: 0, ttl: s,
			steps: []burstStep{
				{0, "admit", true, 1, 0},
				{2 * s, "refresh", false, 0, 0}, // expired at 1s: stays at zero
				{2 * s, "admit", true, 1, 0},
				{2*s + s/2, "refresh", false, 1, 0}, // alive: extended to 3.5s
				{3 * s, "admit", false, 1, 0},
				{3*s + s/2, "admit", true, 1, 0},
			},
		},
		{
			name: "ReleaseClampsAtZero", sustained: 2, ceiling: 2, budget: 0, ttl: time.Hour,
			steps: []burstStep{
				{0, "release", false, 0, 0},
				{0, "admit", true, 1, 0},
				{s, "release", false, 0, 0},
				{s, "release", false, 0, 0},
				{s, "admit", true, 1, 0},
				{s, "admit", true, 2, 0},
				{s, "admit", false, 2, 0},
			},
		},
		{
			name: "ClockBackwardsChargesNothing", sustained: 1, ceiling: 2, budget: 10 * s, ttl: time.Hour,
			steps: []burstStep{
				{10 * s, "admit", true, 1, 10 * s},
				{10 * s, "admit", true, 2, 10 * s},
				{12 * s, "assess", false, 2, 8 * s},
				{5 * s, "assess", false, 2, 8 * s},  // earlier than the last assessment
				{13 * s, "assess", false, 2, 7 * s}, // charged from 12s, not from 5s
			},
		},
	} {
		t.Run(sc.name, sc.run)
	}
}

// TestBurstRejectionReasons: a caller tells a ceiling rejection from a
// budget one by comparing the count with the ceiling.
func TestBurstRejectionReasons(t *testing.T) {
	var st pace.BurstSlotState
	for range 3 {
		pace.AdmitBurst(&st, 2, 3, time.Second, time.Hour, t0)
	}
	if pace.AdmitBurst(&st, 2, 3, time.Second, time.Hour, t0) || st.Count < 3 {
		t.Fatalf("at the ceiling: admitted or Count %d < ceiling 3", st.Count)
	}
	pace.ReleaseBurst(&st, t0.Add(2*time.Second)) // 2s at one above of two: 1s, all of it
	if pace.AdmitBurst(&st, 2, 3, time.Second, time.Hour, t0.Add(2*time.Second)) || st.Count >= 3 {
		t.Fatalf("budget spent: admitted or Count %d ≥ ceiling 3", st.Count)
	}
}

// TestBurstLowerBudgetClamps: a smaller budget on a later admission caps
// what is left.
func TestBurstLowerBudgetClamps(t *testing.T) {
	var st pace.BurstSlotState
	pace.AdmitBurst(&st, 1, 2, time.Hour, time.Hour, t0)
	pace.AdmitBurst(&st, 1, 2, time.Minute, time.Hour, t0)
	if st.BurstRemaining != time.Minute || st.BurstBudget != time.Minute {
		t.Fatalf("BurstRemaining, BurstBudget = %v, %v; want 1m0s, 1m0s", st.BurstRemaining, st.BurstBudget)
	}
}

// TestReleaseBurstOnAbsentSlotKeepsFullBudget pins a fixed bug: a release or
// a heartbeat on the zero state set its assessment time, so a backend that
// stored the result gave the slot's first admission an empty budget.
func TestReleaseBurstOnAbsentSlotKeepsFullBudget(t *testing.T) {
	var st pace.BurstSlotState
	pace.ReleaseBurst(&st, t0)
	pace.RefreshBurst(&st, time.Hour, t0)
	if st != (pace.BurstSlotState{}) {
		t.Fatalf("after ReleaseBurst and RefreshBurst on the zero state: %+v; want the zero state", st)
	}
	pace.AdmitBurst(&st, 1, 2, time.Hour, time.Hour, t0.Add(time.Second))
	if !pace.AdmitBurst(&st, 1, 2, time.Hour, time.Hour, t0.Add(time.Second)) {
		t.Fatalf("second admission above sustained on a new slot refused; state %+v", st)
	}
}

// TestBurstRefillDoesNotOverflow pins a fixed bug: the refill added
// BurstRemaining and the refill before clamping, which wrapped an int64 for
// a huge budget after a long idle time and left a negative budget.
func TestBurstRefillDoesNotOverflow(t *testing.T) {
	const budget = time.Duration(math.MaxInt64 - 1)
	var st pace.BurstSlotState
	pace.AdmitBurst(&st, 1, 2, budget, time.Hour, t0)
	pace.AdmitBurst(&st, 1, 2, budget, time.Hour, t0)
	pace.ReleaseBurst(&st, t0.Add(time.Hour)) // one hour drained
	pace.AssessBurst(&st, t0.Add(100*365*24*time.Hour))
	if st.BurstRemaining != budget {
		t.Fatalf("BurstRemaining %v after a century of refill; want the budget %v", st.BurstRemaining, budget)
	}
}

func TestReclaimAt(t *testing.T) {
	for _, tc := range []struct {
		name string
		st   pace.BurstSlotState
		want time.Time
	}{
		{"Zero", pace.BurstSlotState{}, time.Time{}},
		{"FullAndIdle", pace.BurstSlotState{BurstRemaining: time.Hour, BurstBudget: time.Hour, LastAssessed: t0, Sustained: 1}, t0},
		{"Deficit", pace.BurstSlotState{BurstRemaining: 30 * time.Minute, BurstBudget: time.Hour, LastAssessed: t0, Sustained: 1}, t0.Add(2 * pace.BurstRefillWindow)},
		{"LiveUntilExpiry", pace.BurstSlotState{Count: 1, BurstRemaining: time.Hour, BurstBudget: time.Hour, LastAssessed: t0, Expires: t0.Add(time.Minute), Sustained: 1}, t0.Add(time.Minute)},
		{"LiveWithDeficit", pace.BurstSlotState{Count: 1, BurstRemaining: time.Second, BurstBudget: time.Hour, LastAssessed: t0, Expires: t0.Add(time.Minute), Sustained: 1}, t0.Add(time.Minute + 2*pace.BurstRefillWindow)},
		{"AboveSustained", pace.BurstSlotState{Count: 2, BurstRemaining: time.Hour, BurstBudget: time.Hour, LastAssessed: t0, Expires: t0.Add(time.Minute), Sustained: 1}, t0.Add(time.Minute + 2*pace.BurstRefillWindow)},
		{"ExpiredBeforeAssessed", pace.BurstSlotState{Count: 1, BurstRemaining: time.Hour, BurstBudget: time.Hour, LastAssessed: t0, Expires: t0.Add(-time.Minute), Sustained: 1}, t0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.st.ReclaimAt(); !got.Equal(tc.want) {
				t.Fatalf("ReclaimAt() = %v; want %v", got, tc.want)
			}
		})
	}
}

// FuzzBurst drives one slot through any sequence of admissions, releases,
// heartbeats and assessments at any times (including backwards), and checks
// the invariants of the model after every step:
//
//   - 0 ≤ Count ≤ ceiling;
//   - 0 ≤ BurstRemaining ≤ BurstBudget;
//   - an admission happens exactly when the assessed count is below the
//     ceiling and either below sustained or with budget left (so never past
//     the ceiling, never above sustained with an empty budget);
//   - LastAssessed never moves backwards;
//   - a state left alone until ReclaimAt is indistinguishable from an absent
//     slot: no holder and a full budget.
//
// The script is read two bytes per step: the first picks the operation (low
// two bits), the unit of the time step (next two bits: ns, ms, s, h) and its
// direction (bit 4: backwards); the second is the number of units.
func FuzzBurst(f *testing.F) {
	// Camping at the 2× ceiling (sustained 4, ceiling 8) with one-second
	// steps: drains 1:1 and hits both the ceiling and an empty budget.
	f.Add(uint16(4), uint16(4), int64(5*time.Second), int64(time.Hour), []byte{0x00, 0, 0x00, 0, 0x00, 0, 0x00, 0, 0x00, 0, 0x08, 1, 0x00, 0, 0x00, 0, 0x00, 0, 0x08, 2, 0x00, 0, 0x08, 3, 0x00, 1})
	// A short TTL that runs out between steps: the count drops to zero
	// while the debt stays, then refills over hours.
	f.Add(uint16(1), uint16(1), int64(time.Minute), int64(time.Second), []byte{0x00, 0, 0x00, 0, 0x08, 5, 0x00, 0, 0x00, 0, 0x03, 0, 0x0c, 2, 0x00, 0, 0x00, 0})
	// Releases and heartbeats on an absent slot, then admissions: the
	// regression of the zero state turned into an empty budget.
	f.Add(uint16(2), uint16(2), int64(time.Hour), int64(time.Hour), []byte{0x01, 0, 0x02, 0, 0x08, 1, 0x00, 0, 0x00, 0, 0x00, 0, 0x00, 0})
	// A budget near the int64 limit and a century-long step: the refill
	// overflow regression.
	f.Add(uint16(1), uint16(1), int64(math.MaxInt64-1), int64(time.Hour), []byte{0x00, 0, 0x00, 0, 0x09, 1, 0x0c, 255, 0x0c, 255, 0x03, 0})
	// A clock that jumps backwards between steps.
	f.Add(uint16(3), uint16(2), int64(time.Second), int64(time.Minute), []byte{0x00, 0, 0x00, 0, 0x00, 0, 0x00, 0, 0x18, 5, 0x00, 0, 0x1b, 200, 0x08, 10, 0x01, 0})
	// Nanosecond steps with a large sustained: the floor of tiny drains.
	f.Add(uint16(1000), uint16(999), int64(time.Millisecond), int64(time.Hour), []byte{0x00, 0, 0x00, 0, 0x00, 1, 0x00, 1, 0x03, 7, 0x02, 1})
	// A zero budget: nothing is ever admitted above sustained.
	f.Add(uint16(2), uint16(2), int64(0), int64(time.Hour), []byte{0x00, 0, 0x00, 0, 0x00, 0, 0x08, 100, 0x00, 0})

	f.Fuzz(func(t *testing.T, sus, extra uint16, budgetN, ttlN int64, script []byte) {
		sustained := max(int64(sus), 1)
		ceiling := sustained + int64(extra)%(sustained+1)
		budget := time.Duration(budgetN)
		if budget < 0 {
			budget = -(budget + 1)
		}
		ttl := time.Duration(ttlN)
		if ttl < 0 {
			ttl = -(ttl + 1)
		}
		ttl = max(ttl, 1)
		if err := driver.ValidateSlotBurst("k", sustained, ceiling, budget, ttl); err != nil {
			t.Skip(err)
		}
		units := [4]time.Duration{time.Nanosecond, time.Millisecond, time.Second, time.Hour}

		var st pace.BurstSlotState
		now := t0
		for i := 0; i+1 < len(script); i += 2 {
			op, n := script[i], script[i+1]
			step := time.Duration(n) * units[op>>2&3]
			if op&0x10 != 0 {
				step = -step
			}
			now = now.Add(step)
			prev := st

			// The assessed state the decision is taken on.
			assessed := st
			if assessed.LastAssessed.IsZero() {
				assessed = pace.BurstSlotState{BurstRemaining: budget}
			} else {
				pace.AssessBurst(&assessed, now)
			}
			assessed.BurstRemaining = min(assessed.BurstRemaining, budget)

			switch op & 3 {
			case 0:
				ok := pace.AdmitBurst(&st, sustained, ceiling, budget, ttl, now)
				want := assessed.Count < ceiling && (assessed.Count < sustained || assessed.BurstRemaining > 0)
				if ok != want {
					t.Fatalf("step %d: AdmitBurst = %v on assessed %+v; want %v", i/2, ok, assessed, want)
				}
				if ok && st.Count != assessed.Count+1 || !ok && st.Count != assessed.Count {
					t.Fatalf("step %d: AdmitBurst = %v took Count from %d to %d", i/2, ok, assessed.Count, st.Count)
				}
			case 1:
				pace.ReleaseBurst(&st, now)
				if prev.LastAssessed.IsZero() && st != prev {
					t.Fatalf("step %d: ReleaseBurst changed the zero state to %+v", i/2, st)
				}
			case 2:
				pace.RefreshBurst(&st, ttl, now)
				if st.Count > 0 && st.Count != assessed.Count {
					t.Fatalf("step %d: RefreshBurst changed Count from %d to %d", i/2, assessed.Count, st.Count)
				}
			case 3:
				pace.AssessBurst(&st, now)
			}

			if st.Count < 0 || st.Count > ceiling {
				t.Fatalf("step %d: Count %d outside [0, %d]", i/2, st.Count, ceiling)
			}
			if st.BurstRemaining < 0 || st.BurstRemaining > budget {
				t.Fatalf("step %d: BurstRemaining %v outside [0, %v]", i/2, st.BurstRemaining, budget)
			}
			if st.LastAssessed.Before(prev.LastAssessed) {
				t.Fatalf("step %d: LastAssessed moved back from %v to %v", i/2, prev.LastAssessed, st.LastAssessed)
			}
			if at := st.ReclaimAt(); !st.LastAssessed.IsZero() && !at.Before(st.LastAssessed) {
				later := st
				pace.AssessBurst(&later, at)
				if later.Count != 0 || later.BurstRemaining != later.BurstBudget {
					t.Fatalf("step %d: at ReclaimAt %v the slot %+v is assessed to %+v; want no holder and a full budget", i/2, at, st, later)
				}
			}
		}
	})
}
