// Package progress runs the worker goroutines of a load test and lets the
// test wait for a condition on what they have done, woken by the workers
// instead of polling on a sleep, and bounded by a time limit.
package progress

import (
	"sync"
	"testing"
	"time"
)

// Load is a set of worker goroutines, running until Stop. Its methods are
// safe for concurrent use, except WaitFor and Stop, which belong to the
// test's goroutine.
type Load struct {
	stop chan struct{}
	wake chan struct{}
	wg   sync.WaitGroup
}

// New returns a Load with no workers.
func New() *Load {
	return &Load{stop: make(chan struct{}), wake: make(chan struct{}, 1)}
}

// Go runs work in a new goroutine. work should return soon after Stopping
// reports true.
func (l *Load) Go(work func()) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		work()
	}()
}

// Stopping reports whether Stop has been called.
func (l *Load) Stopping() bool {
	select {
	case <-l.stop:
		return true
	default:
		return false
	}
}

// Notify wakes the test waiting in WaitFor, if any; it never blocks. A
// worker calls it after each step that may change a condition.
func (l *Load) Notify() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// WaitFor blocks until cond holds, testing it again at each Notify, and
// fails tb when limit passes first, with what and state() (the counts the
// condition reads) in the message.
func (l *Load) WaitFor(tb testing.TB, limit time.Duration, what string, cond func() bool, state func() string) {
	tb.Helper()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for !cond() {
		select {
		case <-l.wake:
		case <-timer.C:
			tb.Fatalf("%s: not reached within %v (%s)", what, limit, state())
		}
	}
}

// Stop tells the workers to return and waits until they have.
func (l *Load) Stop() {
	close(l.stop)
	l.wg.Wait()
}
