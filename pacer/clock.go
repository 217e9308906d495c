package pacer

import "time"

// Clock is the pacer's only source of time. Pacer reads Now once per
// decision and sleeps through After; a fake Clock makes every decision
// deterministic in tests and simulations.
//
// Implementations must be safe for concurrent use by multiple goroutines.
type Clock interface {
	// Now returns the current time. A Now that moves backwards is clamped
	// by the Pacer to the latest time it has seen.
	Now() time.Time

	// After returns a channel that receives a value once d has elapsed,
	// and a stop function that releases the timer early. Calling stop
	// after the timer fired, or twice, is harmless.
	After(d time.Duration) (c <-chan time.Time, stop func())
}

// systemClock is the default Clock: time.Now (with its monotonic reading)
// and a runtime timer.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) After(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTimer(d)
	return t.C, func() { t.Stop() }
}
