package httplimit

import (
	"time"

	"github.com/ratepace/pace"
)

// peek reports whether one event of key would fit in p now, and if not,
// when it would, without debiting anything.
//
// Temporary shim until pace.Pace.Peek lands: a reservation returned at
// once, which leaves the bucket as it was (pace.Reservation.Return). It
// holds the event for the few nanoseconds between the two calls, during
// which a concurrent decision on the same key may be refused; Peek holds
// nothing. Replace the body with p.Peek(key) when it exists.
func peek(p *pace.Pace, key string) (ok bool, retryAfter time.Duration) {
	res := p.Reserve(key)
	if !res.OK() {
		return false, res.RetryAfter()
	}
	res.Return()
	return true, 0
}
