package pacer_test

import (
	"time"

	"github.com/ratepace/pace/internal/fakeclock"
)

// newFakeClock returns a Clock at start that moves only when told to;
// After sets a timer that fires when Advance or Set passes its deadline.
func newFakeClock(start time.Time) *fakeclock.Clock { return fakeclock.New(start) }
