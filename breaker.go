package pace

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// breaker keeps callers off a backend that failed (a circuit breaker).
// After a failure it is open: decisions are made without the backend, at
// no cost to their callers. Once a probe interval has passed, the first
// decision to see it starts one probe, in the background, and is itself
// still made without the backend, as are the others; a probe the backend
// answers closes the breaker, one it does not answer opens it for another
// interval from its end. So no caller ever waits for a backend that is
// down, there is one probe at a time, and calls go back to the backend
// within about one interval (plus a probe's time) of its return.
//
// The methods are safe for concurrent use. The zero value is not usable:
// set every field before the first call.
type breaker struct {
	interval time.Duration
	// bound is a probe's deadline.
	bound time.Duration
	// now reads the clock, in nanoseconds of the caller's choosing.
	now func() int64
	// probe makes one call to the backend; an error that is not an answer
	// of the backend (see answered) leaves the breaker open.
	probe func(ctx context.Context) error

	open   atomic.Bool
	next   atomic.Int64 // while open: the clock reading from which a probe may start
	probes sync.WaitGroup
}

// probeKey is the key of the probes: a Get of the failure policy (in the
// values' namespace, where nothing sets it, so an answer only says the
// backend is there), a Take of a Shared (a key of its own, debited one
// event a probe).
const probeKey = "pace:breaker-probe"

// closed reports whether calls go to the backend. While the breaker is
// open it reports false, and starts the probe when one is due.
func (b *breaker) closed() bool {
	if !b.open.Load() {
		return true
	}
	now := b.now()
	if next := b.next.Load(); now >= next && b.next.CompareAndSwap(next, now+int64(b.interval)) {
		b.probes.Add(1)
		go b.runProbe()
	}
	return false
}

// isOpen reports whether the breaker is open, and starts nothing.
func (b *breaker) isOpen() bool { return b.open.Load() }

// trip opens the breaker after a failure, for one interval from now.
// The interval is stored before the breaker opens, so whoever sees it open
// sees its interval.
func (b *breaker) trip() {
	b.next.Store(b.now() + int64(b.interval))
	if !b.open.Load() {
		b.open.Store(true)
	}
}

// reset closes the breaker after the backend answered.
func (b *breaker) reset() {
	if b.open.Load() {
		b.open.Store(false)
	}
}

func (b *breaker) runProbe() {
	defer b.probes.Done()
	ctx, cancel := context.WithTimeout(context.Background(), b.bound)
	err := b.probe(ctx)
	cancel()
	if answered(err) {
		b.reset()
		return
	}
	b.next.Store(b.now() + int64(b.interval)) // from the end of the failed probe
}

// answered reports whether err, returned by a probe, came from a backend
// that answered: nothing, ErrNotFound, or ErrClosed (a closed store is not
// down; its calls should say it is closed).
func answered(err error) bool {
	return err == nil || errors.Is(err, ErrNotFound) || errors.Is(err, ErrClosed)
}

// wait waits until no probe is under way.
func (b *breaker) wait() { b.probes.Wait() }
