// Package limittest holds the test helpers that httplimit's and grpclimit's
// tests share: a fake clock, a Pace on it, and an Observer that counts
// outcomes.
package limittest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/httplimit"
	"github.com/ratepace/pace/internal/fakeclock"
)

// NewClock returns a fake clock for pace.WithClock and memory.WithClock,
// at the start of 2026: it moves only when told.
func NewClock() *fakeclock.Clock {
	return fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
}

// NewPace returns a Pace of perSecond on clk, failing the test on an error.
func NewPace(t testing.TB, perSecond float64, clk *fakeclock.Clock) *pace.Pace {
	t.Helper()
	p, err := pace.New(perSecond, pace.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Counter is an httplimit.Observer that counts outcomes per limit name.
// Its zero value is ready once passed to a constructor through Option; it
// is safe for concurrent use.
type Counter struct {
	mu    sync.Mutex
	names []string
	n     map[string]int // "name outcome"
}

// Option installs c as the observer of the middleware or interceptor it
// is passed to.
func (c *Counter) Option() httplimit.Option {
	return httplimit.WithObserver(func(names []string) (httplimit.Observer, error) {
		c.names, c.n = names, map[string]int{}
		return c, nil
	})
}

// Observe counts outcome o of the limit at index i.
func (c *Counter) Observe(i int, o httplimit.Outcome) {
	c.mu.Lock()
	c.n[c.names[i]+" "+o.String()]++
	c.mu.Unlock()
}

// Get reports how many times the limit name had outcome o.
func (c *Counter) Get(name string, o httplimit.Outcome) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[name+" "+o.String()]
}

// Spent reports admitted minus returned for the limit name.
func (c *Counter) Spent(name string) int {
	return c.Get(name, httplimit.Admitted) - c.Get(name, httplimit.Returned)
}

// String returns the counts, keyed "name outcome", for failure messages.
func (c *Counter) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprint(c.n)
}
