package pace_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ratepace/pace"
)

// TestWithBurst: "10 a minute" with a burst of 10 admits 10 back to back,
// then one every 6 s, and never more than 10/60 × T + 10 in a window of T.
func TestWithBurst(t *testing.T) {
	c := newClock()
	p, err := pace.New(10.0/60, pace.WithBurst(10), pace.WithClock(c.Now))
	if err != nil {
		t.Fatal(err)
	}
	if p.Burst() != 10 {
		t.Fatalf("Burst() = %d; want 10", p.Burst())
	}
	for i := range 10 {
		if r := p.Reserve("k"); !r.OK() || r.Remaining() != 9-i {
			t.Fatalf("reservation %d: OK %v, %d left; want true, %d", i+1, r.OK(), r.Remaining(), 9-i)
		}
	}
	r := p.Reserve("k")
	if r.OK() || r.RetryAfter() != 6*time.Second {
		t.Fatalf("the 11th at once: OK %v, retry after %v; want refused, 6s", r.OK(), r.RetryAfter())
	}
	k := &kept{rate: 10.0 / 60, capacity: 10}
	for range 10 {
		k.add(0)
	}
	for step := range 600 { // a minute in steps of 100 ms, asking at every step
		c.Advance(100 * time.Millisecond)
		if p.Allow("k") {
			if at := c.Elapsed(); at%(6*time.Second) != 0 {
				t.Fatalf("step %d: admitted at %v, not on the 6 s grid", step, at)
			}
			k.add(c.Elapsed())
		}
	}
	if n := len(k.at); n != 20 {
		t.Fatalf("%d events in the first minute; want 10 at once and 10 more, one every 6 s", n)
	}
	k.check(t, "10 a minute, burst 10")
}

// TestWithBurstDefault: without WithBurst the bucket stays one second of the
// pace, at least one event.
func TestWithBurstDefault(t *testing.T) {
	for _, c := range []struct {
		rate float64
		want int
	}{{20, 20}, {1, 1}, {0.5, 1}, {10.0 / 60, 1}} {
		p, err := pace.New(c.rate)
		if err != nil || p.Burst() != c.want {
			t.Errorf("New(%v).Burst() = %d, %v; want %d", c.rate, p.Burst(), err, c.want)
		}
	}
	if p, err := pace.New(1000, pace.WithBurst(1)); err != nil || p.Burst() != 1 {
		t.Errorf("New(1000, WithBurst(1)).Burst() = %d, %v; want 1 (a burst below the pace)", p.Burst(), err)
	}
}

// TestWithBurstRejectsBadValues: a burst below one event, not a number or
// infinite, or one that takes longer than about 73 years to refill, is an
// error wrapping ErrInvalidArgument, never a panic nor a silent default.
func TestWithBurstRejectsBadValues(t *testing.T) {
	for _, c := range []struct {
		rate, burst float64
	}{
		{10, 0}, {10, 0.999}, {10, -1}, {10, math.NaN()}, {10, math.Inf(1)}, {10, math.Inf(-1)},
		{1e-9, 1e9}, // 1e18 s to refill
	} {
		p, err := pace.New(c.rate, pace.WithBurst(c.burst))
		if !errors.Is(err, pace.ErrInvalidArgument) || p != nil {
			t.Errorf("New(%v, WithBurst(%v)) = %v, %v; want nil, ErrInvalidArgument", c.rate, c.burst, p, err)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "pace: ") {
			t.Errorf("New(%v, WithBurst(%v)): error %q does not start with \"pace: \"", c.rate, c.burst, err)
		}
	}
	if p, err := pace.New(2, pace.WithBurst(2.5)); err != nil || p.Burst() != 2 {
		t.Errorf("New(2, WithBurst(2.5)).Burst() = %d, %v; want 2 (whole events)", p.Burst(), err)
	}
}
