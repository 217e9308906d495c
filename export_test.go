package pace

import "time"

// AssessBurst exposes assessBurst, the step every burst function starts
// with, to the tests of package pace_test.
func AssessBurst(st *BurstSlotState, now time.Time) { assessBurst(st, now) }
