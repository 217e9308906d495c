package pace_test

import (
	"testing"

	"github.com/ratepace/pace/internal/settlemodel"
	"github.com/ratepace/pace/memory"
)

// FuzzSharedSettle attacks the promise of Shared.ReserveN and
// SharedReservation.Settle on the memory store, with two replicas, a pace
// counted in units and a quota counted in requests (settlemodel.RunShared).
func FuzzSharedSettle(f *testing.F) {
	c := newClock()
	settlemodel.Fuzz(f, memory.New(memory.WithClock(c.Now)), c)
}
