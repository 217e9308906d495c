package pacer

import (
	"fmt"
	"math"
	"time"

	"github.com/ratepace/pace"
)

// Option configures a Pacer (or every Pacer of a Group). An option given
// an invalid value makes New fail with an error wrapping
// pace.ErrInvalidArgument.
type Option func(*config) error

// invalid is the error of an option given a value outside its range.
func invalid(option string) error {
	return fmt.Errorf("pacer: %s: value out of range: %w", option, pace.ErrInvalidArgument)
}

type config struct {
	clock    Clock
	target   float64
	window   time.Duration
	increase float64
	decrease float64
	maxDelay float64
	burst    float64
	seed     uint64
	seeded   bool
}

// Defaults, gathered in one place; each is documented on its option.
func defaults() config {
	return config{
		clock:    systemClock{},
		target:   0.95,
		window:   time.Minute,
		increase: 0.2,
		decrease: 2,
		maxDelay: 0.5,
		burst:    0.25,
	}
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// WithClock sets the clock the Pacer reads and sleeps on. Default: the
// system clock. A nil clock is invalid.
func WithClock(c Clock) Option {
	return func(cfg *config) error {
		if c == nil {
			return invalid("WithClock")
		}
		cfg.clock = c
		return nil
	}
}

// WithTarget sets the fraction of the limit that all the clients of a key
// together aim to use, in (0, 1). Default: 0.95. The rest is the margin
// that absorbs noise, newcomers and limit changes.
func WithTarget(f float64) Option {
	return func(cfg *config) error {
		if !(finite(f) && f > 0 && f < 1) {
			return invalid("WithTarget")
		}
		cfg.target = f
		return nil
	}
}

// WithWindow sets the window assumed until a response carries one (the
// RateLimit-Policy "w" parameter, or the longest X-RateLimit-Reset seen).
// Default: one minute. Durations below a millisecond or above a day are
// invalid.
func WithWindow(d time.Duration) Option {
	return func(cfg *config) error {
		if !(d >= time.Millisecond && d <= maxDuration) {
			return invalid("WithWindow")
		}
		cfg.window = d
		return nil
	}
}

// WithGains sets the gains of the AIMD loop. Below the target, the rate
// grows additively by increase × (the fraction of the target still
// unused) × L/W per window, the same for every client (default 0.2).
// Above it, the rate is multiplied by (target/x)^decrease per window, x
// being the projected utilisation (default 2). Larger gains react faster
// and oscillate more. Both must be positive and finite.
func WithGains(increase, decrease float64) Option {
	return func(cfg *config) error {
		if !(finite(increase) && increase > 0 && finite(decrease) && decrease > 0) {
			return invalid("WithGains")
		}
		cfg.increase, cfg.decrease = increase, decrease
		return nil
	}
}

// WithMaxDelay sets the longest wait the barrier imposes on the strength
// of one sample, as a fraction of the window in (0, 1]. Default: 1/2.
// Retry-After is always honoured, whatever its length.
func WithMaxDelay(f float64) Option {
	return func(cfg *config) error {
		if !(finite(f) && f > 0 && f <= 1) {
			return invalid("WithMaxDelay")
		}
		cfg.maxDelay = f
		return nil
	}
}

// WithBurst sets the initial burst: while the predicted shared count is
// below this fraction of the target, calls go without delay. In [0, 1).
// Default: 0.25. Zero disables the burst.
func WithBurst(f float64) Option {
	return func(cfg *config) error {
		if !(finite(f) && f >= 0 && f < 1) {
			return invalid("WithBurst")
		}
		cfg.burst = f
		return nil
	}
}

// WithSeed seeds the jitter the Pacer adds after a refusal, for
// reproducible simulations. Default: a random seed.
func WithSeed(seed uint64) Option {
	return func(cfg *config) error {
		cfg.seed, cfg.seeded = seed, true
		return nil
	}
}
