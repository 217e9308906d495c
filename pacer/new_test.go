package pacer_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/pacer"
)

// TestNewInvalidOption: an option given a value outside its documented
// range, and a nil option, make New and NewGroup fail with an error
// wrapping pace.ErrInvalidArgument (WithTarget(1.5) used to be ignored).
func TestNewInvalidOption(t *testing.T) {
	for name, o := range map[string]pacer.Option{
		"WithTarget(1.5)":    pacer.WithTarget(1.5),
		"WithTarget(NaN)":    pacer.WithTarget(math.NaN()),
		"WithTarget(0)":      pacer.WithTarget(0),
		"WithWindow(0)":      pacer.WithWindow(0),
		"WithWindow(48h)":    pacer.WithWindow(48 * time.Hour),
		"WithGains(-1, 2)":   pacer.WithGains(-1, 2),
		"WithGains(1, +Inf)": pacer.WithGains(1, math.Inf(1)),
		"WithMaxDelay(0)":    pacer.WithMaxDelay(0),
		"WithMaxDelay(1.01)": pacer.WithMaxDelay(1.01),
		"WithBurst(1)":       pacer.WithBurst(1),
		"WithBurst(-0.1)":    pacer.WithBurst(-0.1),
		"WithClock(nil)":     pacer.WithClock(nil),
		"nil option":         nil,
	} {
		p, err := pacer.New(pacer.WithSeed(1), o)
		if p != nil || !errors.Is(err, pace.ErrInvalidArgument) || !strings.HasPrefix(err.Error(), "pacer: ") {
			t.Errorf("New(%s) = %v, %v; want nil, an error wrapping pace.ErrInvalidArgument", name, p, err)
		}
		g, err := pacer.NewGroup(o)
		if g != nil || !errors.Is(err, pace.ErrInvalidArgument) {
			t.Errorf("NewGroup(%s) = %v, %v; want nil, an error wrapping pace.ErrInvalidArgument", name, g, err)
		}
	}
	for name, o := range map[string]pacer.Option{
		"WithTarget(0.5)":   pacer.WithTarget(0.5),
		"WithWindow(1ms)":   pacer.WithWindow(time.Millisecond),
		"WithGains(0.1, 1)": pacer.WithGains(0.1, 1),
		"WithMaxDelay(1)":   pacer.WithMaxDelay(1),
		"WithBurst(0)":      pacer.WithBurst(0),
		"WithSeed(0)":       pacer.WithSeed(0),
	} {
		if p, err := pacer.New(o); p == nil || err != nil {
			t.Errorf("New(%s) = %v, %v; want a Pacer, nil", name, p, err)
		}
	}
}

// TestReserveAtObserveAt: the time-as-parameter methods decide as the
// clock-reading ones do at the same instants, and a time before one
// already seen is taken as that one.
func TestReserveAtObserveAt(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := newFakeClock(start)
	a := pacer.MustNew(pacer.WithClock(clock), pacer.WithSeed(3))
	b := pacer.MustNew(pacer.WithClock(newFakeClock(start.Add(-time.Hour))), pacer.WithSeed(3))
	s := pacer.Signal{Limit: 10, Used: 9, HasUsed: true, Reset: 5 * time.Second}
	var now time.Time
	for i := range 20 {
		now = start.Add(time.Duration(i) * 300 * time.Millisecond)
		clock.Set(now)
		if da, db := a.Reserve(), b.ReserveAt(now); da != db {
			t.Fatalf("call %d: Reserve() = %v, ReserveAt(now) = %v", i, da, db)
		}
		a.Observe(s)
		b.ObserveAt(now, s)
	}
	// a's clock stays at the latest instant; b is told a minute earlier.
	if da, db := a.Reserve(), b.ReserveAt(now.Add(-time.Minute)); da != db {
		t.Fatalf("a time before the latest: ReserveAt = %v, want it taken as the latest (Reserve = %v)", db, da)
	}
}
