package pace

import (
	"fmt"
	"time"

	"github.com/ratepace/pace/driver"
)

// Option configures New, NewShared and WithFailurePolicy. Each option says
// which of them it serves; given to a constructor it does not serve, or with
// an argument out of its range, it makes the constructor return an error
// wrapping ErrInvalidArgument. A nil Option is ignored.
type Option func(*config)

// config gathers what every option sets, and the defaults, in one place.
type config struct {
	clock    func() time.Time
	observer Observer

	// New and NewShared
	burst    float64 // events; meaningful when burstSet
	burstSet bool

	// NewShared
	quotas     []driver.Shape
	fb         *Pace
	fbTimeout  time.Duration
	roundTrips int

	// WithFailurePolicy
	probeInterval time.Duration

	scope target // the constructor being configured
	err   error  // the first option out of place or out of range
}

// target is a constructor an option may serve.
type target uint8

const (
	forNew target = 1 << iota
	forShared
	forFailure
)

func (t target) String() string {
	switch t {
	case forNew:
		return "New"
	case forShared:
		return "NewShared"
	}
	return "WithFailurePolicy"
}

// Defaults of the options.
const (
	// defaultRoundTrips is the round trips in flight of a Shared without
	// WithRoundTrips.
	defaultRoundTrips = 2
	// defaultProbeInterval is the time a store under WithFailurePolicy
	// decides without its backend after a failure, without ProbeInterval:
	// short enough that limits hold again within about a second of the
	// backend's return, long enough that a probe every interval costs the
	// backend nothing.
	defaultProbeInterval = 500 * time.Millisecond
)

// newConfig applies opts for the constructor scope, and returns the first
// error: an option that does not serve it, or an invalid argument.
func newConfig(scope target, opts []Option) (config, error) {
	c := config{scope: scope, roundTrips: defaultRoundTrips, probeInterval: defaultProbeInterval}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.err != nil {
		return c, c.err
	}
	return c, nil
}

// serves reports whether the option named name, which serves the
// constructors in targets, serves the one being configured, and records the
// misuse when it does not. Options with a scope call it first.
func (c *config) serves(name string, targets target) bool {
	if c.scope&targets == 0 {
		c.fail(invalid("%s does not apply to %v", name, c.scope))
		return false
	}
	return true
}

func (c *config) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// WithBurst sets the capacity of each key's bucket to n events: the most a
// key that has been idle long enough can take back to back. The default is
// one second of the pace, max(1, perSecond). pace.New(10.0/60,
// pace.WithBurst(10)) admits 10 events back to back, then one every 6 s;
// whatever the burst, a key gets at most perSecond × T + n events in any
// interval of length T. n must be a finite number of at least 1 (a
// fraction is kept: Burst reports the whole events), and n events must
// refill within about 73 years; otherwise New returns an error wrapping
// ErrInvalidArgument. It serves New and NewShared (where it sets the
// bucket of the pace, not of the quotas).
func WithBurst(n float64) Option {
	return func(c *config) {
		if c.serves("WithBurst", forNew|forShared) {
			c.burst, c.burstSet = n, true
		}
	}
}

// WithClock makes the Pace, the Shared's local tier and fallback timing, or
// the failure policy's probe timing read time from now instead of the
// monotonic clock, for tests and simulations. now is called once per
// decision and must be safe for concurrent use; readings are taken relative
// to the first one, and clamped to about ±73 years of it. A reading earlier
// than a previous one is tolerated: on a key that has a row it can only make
// the decision stricter; a key whose row was dropped (its bucket had
// refilled by a later reading) is full again. Decisions on a store still
// take the store's time. The default reads time.Since of a monotonic epoch,
// the cheapest reading Go offers. A nil now keeps the default. It serves
// New, NewShared and WithFailurePolicy.
func WithClock(now func() time.Time) Option {
	return func(c *config) { c.clock = now }
}

// WithObserver reports what a Pace, a Shared or a failure policy does to o
// (see package instrument): decisions, returns, round trips, and decisions
// made in place of a failed backend. The default is none, which costs
// nothing. It serves New, NewShared and WithFailurePolicy.
func WithObserver(o Observer) Option {
	return func(c *config) { c.observer = o }
}

// WithQuota adds to every key of a Shared a quota of n reservations per
// period, with a bucket of max(1, n) refilled continuously at n per period:
// WithQuota(1000, time.Hour) beside a pace of 20 per second admits bursts of
// 20 and at most 1000 in any hour (plus one hour's refill per hour of
// course). A take must fit the pace and every quota, and a refusal by one
// debits none.
//
// A quota counts reservations, one each, whatever the units ReserveN takes
// of the pace: with a pace counted in tokens,
//
//	pace.NewShared(store, 100_000.0/60, pace.WithBurst(100_000),
//		pace.WithQuota(500, time.Minute))
//
// limits each key to 100,000 tokens and 500 requests a minute, and
// ReserveN(ctx, key, n) takes n tokens and one request. A reservation
// settled at zero gives its request back; settled at any other count, the
// request stays spent.
//
// n must be a positive finite number and period above zero, and the shape
// valid for driver.NewShape; with the pace, at most driver.MaxShapes limits
// in all. It serves NewShared.
func WithQuota(n float64, period time.Duration) Option {
	return func(c *config) {
		if !c.serves("WithQuota", forShared) {
			return
		}
		if !finitePositive(n) || period <= 0 {
			c.fail(invalid("quota of %v per %v is not a positive finite number per positive period", n, period))
			return
		}
		b, err := driver.NewShape(max(1, n), n/period.Seconds(), 1)
		if err != nil {
			c.fail(err)
			return
		}
		c.quotas = append(c.quotas, b)
	}
}

// WithFallback makes a Shared's decisions go to fb, a per-replica Pace
// (declared at the replica's share of the pace: pace.New(rate/replicas)),
// while the store fails. Each round trip is then bounded by timeout; one
// that errors or times out sends the decisions it carried, and every
// decision for the next timeout, to fb. After that, the next decision starts
// one probe of the store in the background (a Take of a key of its own,
// bounded by timeout) and is itself still decided by fb, as are the others
// until the store has answered the probe: no caller waits for a store that
// is down, and decisions go back to the store within about one timeout of
// its return. fb applies only the pace of NewShared, not the quotas of
// WithQuota. A reservation made by fb is returned to fb. Errors that a
// fallback cannot mend are still returned: invalid arguments, a closed
// store, the caller's own context ending. Choose timeout below the callers'
// deadlines: a round trip cut short by its caller's deadline ends as that
// caller's error, not as a store timeout, so a hanging store reaches fb only
// through round trips that outlive timeout. fb must not be nil and timeout
// must be above zero. The default is no fallback: store errors are
// returned. What the timeout assumes of the store's client is in
// docs/replicas.md. It serves NewShared.
func WithFallback(fb *Pace, timeout time.Duration) Option {
	return func(c *config) {
		if !c.serves("WithFallback", forShared) {
			return
		}
		if fb == nil || timeout <= 0 {
			c.fail(invalid("fallback needs a Pace and a timeout above zero (got timeout %v)", timeout))
			return
		}
		c.fb, c.fbTimeout = fb, timeout
	}
}

// WithRoundTrips sets how many round trips to the store one Shared keeps in
// flight at once. A decision that finds fewer than n in flight goes at once,
// alone; the others queue, and the queue goes whole as the next round trip
// as soon as one ends. The default, 2, keeps the store busy while a round
// trip's results are delivered and the next is gathered; 1 gives the
// largest batches, more can help a store whose server has cores to spare (a
// PostgreSQL pool, say). n must be at least 1. It serves NewShared.
func WithRoundTrips(n int) Option {
	return func(c *config) {
		if !c.serves("WithRoundTrips", forShared) {
			return
		}
		if n < 1 {
			c.fail(invalid("round trips in flight %d < 1", n))
			return
		}
		c.roundTrips = n
	}
}

// ProbeInterval sets how long a store under WithFailurePolicy keeps off its
// backend after a failure before it probes it again (see
// WithFailurePolicy), and so the retryAfter of a fail-closed refusal: the
// backend is not asked again before then. It must be above zero; the
// default is 500 ms. It serves WithFailurePolicy.
func ProbeInterval(d time.Duration) Option {
	return func(c *config) {
		if !c.serves("ProbeInterval", forFailure) {
			return
		}
		if d <= 0 {
			c.fail(invalid("probe interval %v must be above zero", d))
			return
		}
		c.probeInterval = d
	}
}

// Observer receives what a Pace, a Shared or a failure policy does (see
// WithObserver), for metrics. Its methods are called on the decision path,
// synchronously, possibly from many goroutines at once: they must be fast
// and safe for concurrent use. Each type calls the methods that concern it;
// package instrument implements them all.
type Observer interface {
	// Decided is called once per decision (Reserve or Allow that did not
	// fail) with the source that made it and its outcome.
	Decided(src Source, ok bool)
	// Returned is called once per Return that gave back (all or part of)
	// an admitted reservation, or tried to (a store error counts too), with
	// the source that had admitted it.
	Returned(src Source)
	// RoundTrip is called by a Shared once per round trip to the store
	// (successful or not) with the number of decisions it carried.
	RoundTrip(decisions int)
	// Failed is called by a store under WithFailurePolicy once per
	// decision made in place of its backend: op is the method name
	// ("TokenBucket", "AcquireSlot", ...), err the backend error that
	// caused it, allowed the decision.
	Failed(op string, err error, allowed bool)
}

// Source says what made a decision.
type Source uint8

const (
	// SourceMemory is a decision of a Pace, in this process's memory.
	SourceMemory Source = iota + 1
	// SourceStore is a decision a Shared's store made.
	SourceStore
	// SourceHeld is a refusal a Shared made in process, for a key the
	// store had refused (or emptied) and whose retry-after had not passed,
	// or for a ReserveN that can never fit.
	SourceHeld
	// SourceFallback is a decision a Shared's fallback Pace made while the
	// store failed (see WithFallback).
	SourceFallback
)

// String returns "memory", "store", "held" or "fallback" (a description of
// an invalid value otherwise): the values of instrument's source label.
func (s Source) String() string {
	switch s {
	case SourceMemory:
		return "memory"
	case SourceStore:
		return "store"
	case SourceHeld:
		return "held"
	case SourceFallback:
		return "fallback"
	}
	return fmt.Sprintf("Source(%d)", uint8(s))
}
