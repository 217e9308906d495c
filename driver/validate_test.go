package driver_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/driver"
)

func TestValidate(t *testing.T) {
	huge := strings.Repeat("k", driver.MaxKeyLen+1)
	nan, inf := math.NaN(), math.Inf(1)
	cases := []struct {
		name string
		err  error
	}{
		{"empty key", driver.ValidateKey("")},
		{"huge key", driver.ValidateKey(huge)},
		{"negative ttl", driver.ValidateSet("k", -time.Nanosecond)},
		{"set empty key", driver.ValidateSet("", time.Second)},
		{"slot limit 0", driver.ValidateSlot("k", 0, time.Second)},
		{"slot ttl 0", driver.ValidateSlot("k", 1, 0)},
		{"slot ttl negative", driver.ValidateSlot("k", 1, -time.Second)},
		{"sustained 0", driver.ValidateSlotBurst("k", 0, 0, time.Minute, time.Second)},
		{"ceiling below sustained", driver.ValidateSlotBurst("k", 4, 3, time.Minute, time.Second)},
		{"ceiling above 2x", driver.ValidateSlotBurst("k", 4, 9, time.Minute, time.Second)},
		{"ceiling above 2x, huge sustained", driver.ValidateSlotBurst("k", math.MaxInt64/2, math.MaxInt64, time.Minute, time.Second)},
		{"negative budget", driver.ValidateSlotBurst("k", 4, 8, -time.Minute, time.Second)},
		{"burst ttl 0", driver.ValidateSlotBurst("k", 4, 8, time.Minute, 0)},
		{"refresh ttl 0", driver.ValidateRefresh("k", 0)},
		{"refresh empty key", driver.ValidateRefresh("", time.Second)},
	}
	for _, c := range cases {
		if !errors.Is(c.err, pace.ErrInvalidArgument) {
			t.Errorf("%s: err = %v; want ErrInvalidArgument", c.name, c.err)
		} else if msg := c.err.Error(); !strings.HasPrefix(msg, "driver: ") || !strings.HasSuffix(msg, ": "+pace.ErrInvalidArgument.Error()) {
			t.Errorf("%s: err = %q; want \"driver: what: pace: invalid argument\"", c.name, msg)
		}
	}
	// A bad key of TakeMany is named by its index, never by its text.
	err := driver.ValidateTakeMany([]string{"ok", huge}, nil, make([]driver.Grant, 2))
	if !errors.Is(err, pace.ErrInvalidArgument) || !strings.HasPrefix(err.Error(), "driver: keys[1]: ") || strings.Contains(err.Error(), "kkk") {
		t.Errorf("ValidateTakeMany(a huge second key) = %v; want an error naming keys[1], without the key", err)
	}
	valid := []error{
		driver.ValidateKey(huge[:driver.MaxKeyLen]),
		driver.ValidateSet("k", 0),
		driver.ValidateSlot("k", 1, time.Nanosecond),
		driver.ValidateSlotBurst("k", 4, 4, 0, time.Second),
		driver.ValidateSlotBurst("k", 4, 8, time.Minute, time.Second),
		driver.ValidateSlotBurst("k", 4, 8, math.MaxInt64, time.Second),
		driver.ValidateSlotBurst("k", math.MaxInt64/2+1, math.MaxInt64, time.Minute, time.Second), // 2 × sustained overflows an int64
		driver.ValidateRefresh("k", time.Second),
	}
	for i, err := range valid {
		if err != nil {
			t.Errorf("valid case %d: %v", i, err)
		}
	}

	for _, c := range []struct{ capacity, rate, cost float64 }{
		{0, 1, 1}, {-1, 1, 1}, {nan, 1, 1}, {inf, 1, 1},
		{10, 0, 1}, {10, -1, 1}, {10, nan, 1}, {10, inf, 1},
		{10, 1, -1}, {10, 1, nan}, {10, 1, inf}, {10, 1, 11},
		{10, 1e12, 1},   // one take refills in under a nanosecond
		{1e300, 1, 1},   // the capacity takes longer than 73 years to refill
		{10, 1e-300, 0}, // so does a zero-cost bucket's
	} {
		if _, err := driver.ValidateTokenBucket("k", c.capacity, c.rate, c.cost); !errors.Is(err, pace.ErrInvalidArgument) {
			t.Errorf("ValidateTokenBucket(%v, %v, %v) = %v; want ErrInvalidArgument", c.capacity, c.rate, c.cost, err)
		}
	}
	if _, err := driver.ValidateTokenBucket("", 10, 1, 1); !errors.Is(err, pace.ErrInvalidArgument) {
		t.Errorf("ValidateTokenBucket with an empty key = %v; want ErrInvalidArgument", err)
	}
}

// TestBucketShapes pins the documented rounding: an interval rounded up to
// the nanosecond, and a tolerance holding exactly capacity/cost whole takes.
func TestBucketShapes(t *testing.T) {
	for _, c := range []struct {
		capacity, rate, cost float64
		takes                int
	}{
		{3, 3, 1, 3}, {10, 3, 1, 10}, {3, 1.5, 1, 3}, {100, 1.5, 1, 100}, {2.5, 2.5, 1, 2},
		{12, 1, 3, 4}, {10, 5, 4, 2}, {1, 0.001, 1, 1}, {1e6, 1e6, 1, 1e6},
	} {
		b, err := driver.NewShape(c.capacity, c.rate, c.cost)
		if err != nil {
			t.Fatalf("NewBucket(%v, %v, %v) = %v", c.capacity, c.rate, c.cost, err)
		}
		if want := time.Duration(math.Ceil(c.cost * 1e9 / c.rate)); b.Interval() != want {
			t.Errorf("NewBucket(%v, %v, %v).Interval() = %v; want %v", c.capacity, c.rate, c.cost, b.Interval(), want)
		}
		var tat time.Duration
		n := 0
		for {
			next, _, ok := b.Take(tat, 0)
			if !ok {
				break
			}
			tat, n = next, n+1
		}
		if n != c.takes || b.Remaining(0, 0) != c.takes {
			t.Errorf("NewBucket(%v, %v, %v): %d takes fit a full bucket, Remaining says %d; want %d",
				c.capacity, c.rate, c.cost, n, b.Remaining(0, 0), c.takes)
		}
	}
}
