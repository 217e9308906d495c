package redisstore

import (
	"testing"

	"github.com/ratepace/pace/internal/settlemodel"
)

// FuzzSharedSettle attacks the promise of Shared.ReserveN and
// SharedReservation.Settle on the Redis scripts, with two replicas, a pace
// counted in units and a quota counted in requests, the scripts reading the
// test's clock (settlemodel.RunShared).
func FuzzSharedSettle(f *testing.F) {
	clock := newFakeClock()
	s, _ := newTestStore(f, withClock(clock.Now))
	settlemodel.Fuzz(f, s, clock)
}
