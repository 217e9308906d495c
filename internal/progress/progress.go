// Package progress lets a test wait for a condition on what its worker
// goroutines have done, woken by the workers instead of polling on a sleep,
// and bounded by a time limit.
package progress

import (
	"testing"
	"time"
)

// Signal carries the workers' "something happened" to the waiting test.
// Its methods are safe for concurrent use.
type Signal struct{ c chan struct{} }

// New returns a Signal.
func New() *Signal { return &Signal{c: make(chan struct{}, 1)} }

// Notify wakes the waiting test, if any; it never blocks.
func (s *Signal) Notify() {
	select {
	case s.c <- struct{}{}:
	default:
	}
}

// WaitFor blocks until cond holds, testing it again at each Notify, and
// fails tb when limit passes first, with what and state() (the counts the
// condition reads) in the message. Call it from the test's goroutine.
func (s *Signal) WaitFor(tb testing.TB, limit time.Duration, what string, cond func() bool, state func() string) {
	tb.Helper()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for !cond() {
		select {
		case <-s.c:
		case <-timer.C:
			tb.Fatalf("%s: not reached within %v (%s)", what, limit, state())
		}
	}
}
