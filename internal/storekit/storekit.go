// Package storekit holds what the Redis and PostgreSQL stores share in
// implementing pace.Store's Take: the grant a take reports, derived from
// what the server read and decided.
package storekit

import (
	"errors"
	"math/rand/v2"
	"time"

	"github.com/ratepace/pace/driver"
)

// ErrDisagree reports a server-side take whose decision differs from
// driver.TakeAll on the state it read: a bug, never a limit.
var ErrDisagree = errors.New("storekit: the server's take and driver.TakeAll disagree")

// Grant derives the outcome of a take from what the server's script or
// function read (tats, the arrival times before the decision; now, its
// clock; gen, the key's reorder count) and whether it took, with the Go
// arithmetic the server mirrors: driver.TakeAll for the decision, the wait
// and the new arrival times, driver.RemainingAll for Remaining and Reset.
// len(tats) must equal len(shapes). It returns ErrDisagree when TakeAll
// does not reach the server's decision.
func Grant(shapes []driver.Shape, tats []time.Duration, now time.Duration, gen uint64, took bool) (driver.Grant, error) {
	var next [driver.MaxShapes]time.Duration
	n := len(shapes)
	wait, ok := driver.TakeAll(shapes, tats, next[:n], now)
	if ok != took {
		return driver.Grant{}, ErrDisagree
	}
	remaining, reset := driver.RemainingAll(shapes, next[:n], now)
	g := driver.Grant{OK: ok, RetryAfter: wait, Remaining: remaining, Reset: reset}
	if ok {
		g.Receipt = driver.Receipt{At: now, Gen: gen, Reserved: next}
	}
	return g, nil
}

// NewGen returns the reorder count of a key that a take creates: a random
// number below 2^52, so that it differs from every count the key had in an
// earlier life (odds of a collision about k/2^52 for a key that had k
// reorders), and so that a Lua script's doubles hold it and the counts
// after it exactly.
func NewGen() uint64 { return rand.Uint64() >> 12 }

// Shifted is the shifted argument of driver.RefundAll for a store that keeps a
// reorder count per key rather than a total of out-of-order refunds: 0 when
// the receipt's count is still the key's (nothing shifted the take), unknown
// (negative) otherwise.
func Shifted(intact bool) time.Duration {
	if intact {
		return 0
	}
	return -1
}
