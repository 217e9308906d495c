package pgstore

import (
	"testing"
	"time"

	"github.com/ratepace/pace/internal/settlemodel"
)

// FuzzSharedSettle attacks the promise of Shared.ReserveN and
// SharedReservation.Settle on the SQL functions, with two replicas, a pace
// counted in units and a quota counted in requests, the functions reading
// the test's clock (settlemodel.RunShared).
func FuzzSharedSettle(f *testing.F) {
	s, _, clock := newClockedStore(f, testPool(f), time.Now().UnixNano())
	settlemodel.Fuzz(f, s, clock)
}
