package pace

import "time"

// AssessBurst exposes assessBurst, the step every burst function starts
// with, to the tests of package pace_test.
func AssessBurst(st *BurstSlotState, now time.Time) { assessBurst(st, now) }

// FailureClock makes a Store of WithFailurePolicy read its breaker's time
// from now.
func FailureClock(now func() time.Time) FailureOption {
	return func(c *failureConfig) { c.clock = now }
}

// WaitFailureProbes waits until no probe of s, a Store of
// WithFailurePolicy, is under way.
func WaitFailureProbes(s Store) { s.(*failureStore).brk.wait() }
