package pacer

import (
	"math"
	"time"
)

// Option configures a Pacer (or every Pacer of a Group).
type Option func(*config)

type config struct {
	clock       Clock
	target      float64
	window      time.Duration
	initialGain float64
	increase    float64
	decrease    float64
	throttleCut float64
	minGain     float64
	maxGain     float64
	maxDelay    float64
	burst       float64
	seed        uint64
	seeded      bool
}

// Defaults, gathered in one place; each is documented on its option.
func defaults() config {
	return config{
		clock:       systemClock{},
		target:      0.93,
		window:      time.Minute,
		initialGain: 1,
		increase:    1,
		decrease:    1,
		throttleCut: 0.7,
		minGain:     0.01,
		maxGain:     100,
		maxDelay:    0.5,
		burst:       0.25,
	}
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// WithClock sets the clock the Pacer reads and sleeps on. Default: the
// system clock. A nil clock is ignored.
func WithClock(c Clock) Option {
	return func(cfg *config) {
		if c != nil {
			cfg.clock = c
		}
	}
}

// WithTarget sets the fraction of the limit that all clients together aim
// to use, in (0, 1). Default: 0.93. The rest is the margin that absorbs
// noise, newcomers and limit changes.
func WithTarget(f float64) Option {
	return func(cfg *config) {
		if finite(f) && f > 0 && f < 1 {
			cfg.target = f
		}
	}
}

// WithWindow sets the window assumed until a response carries one (the
// RateLimit-Policy "w" parameter, or the longest X-RateLimit-Reset seen).
// Default: one minute. Durations below a millisecond are ignored.
func WithWindow(d time.Duration) Option {
	return func(cfg *config) {
		if d >= time.Millisecond && d <= maxDuration {
			cfg.window = d
		}
	}
}

// WithGains sets the AIMD gains of the barrier: increase is how much the
// gain grows per window of unused headroom (default 1), decrease the rate
// of its exponential decay per window spent above the target (default 1:
// a factor 1/e per window). Both must be positive and finite.
func WithGains(increase, decrease float64) Option {
	return func(cfg *config) {
		if finite(increase) && increase > 0 && finite(decrease) && decrease > 0 {
			cfg.increase, cfg.decrease = increase, decrease
		}
	}
}

// WithInitialGain sets the gain a new Pacer starts with, in [0.01, 100].
// Default: 1, the barrier of the document with greedy = 1.
func WithInitialGain(g float64) Option {
	return func(cfg *config) {
		if finite(g) && g >= 0.01 && g <= 100 {
			cfg.initialGain = g
		}
	}
}

// WithMaxDelay sets the longest single gap the pacer imposes on its own
// account, as a fraction of the window in (0, 1]. Default: 1/8. Retry-After
// is always honoured, whatever its length.
func WithMaxDelay(f float64) Option {
	return func(cfg *config) {
		if finite(f) && f > 0 && f <= 1 {
			cfg.maxDelay = f
		}
	}
}

// WithBurst sets the initial burst: while the predicted shared count is
// below this fraction of the target, calls go without delay. In [0, 1).
// Default: 0.25. Zero disables the burst.
func WithBurst(f float64) Option {
	return func(cfg *config) {
		if finite(f) && f >= 0 && f < 1 {
			cfg.burst = f
		}
	}
}

// WithSeed seeds the jitter the Pacer adds after a refusal, for
// reproducible simulations. Default: a random seed.
func WithSeed(seed uint64) Option {
	return func(cfg *config) {
		cfg.seed, cfg.seeded = seed, true
	}
}
