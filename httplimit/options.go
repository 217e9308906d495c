package httplimit

import (
	"net/http"
	"time"
)

// Option configures New and NewLimiter, one Limit (Pace, Shared, Bucket,
// Slots), or ClientIPWith: one option type for the package. Each option
// says which it serves; given to another, it is an error wrapping
// pace.ErrInvalidArgument, returned by New (or NewLimiter) for the options
// of a Limit and by ClientIPWith for its own. A nil Option is ignored.
type Option func(*settings)

// settings is what an Option configures: exactly one of mw, lim and ip is
// set, by the constructor that applies the options.
type settings struct {
	mw  *config
	lim *limitConfig
	ip  *ipConfig
	err error
}

// fail records that the option name does not serve the constructor at hand.
func (s *settings) fail(name, serves string) {
	if s.err == nil {
		s.err = invalidf("%s configures %s, not this", name, serves)
	}
}

// middleware returns the configuration of New, or nil (recording the
// misuse) when name is given to something else.
func (s *settings) middleware(name string) *config {
	if s.mw == nil {
		s.fail(name, "New")
	}
	return s.mw
}

// limit returns the configuration of a Limit, or nil (recording the misuse).
func (s *settings) limit(name string) *limitConfig {
	if s.lim == nil {
		s.fail(name, "a Limit")
	}
	return s.lim
}

// clientIP returns the configuration of ClientIPWith, or nil (recording the
// misuse).
func (s *settings) clientIP(name string) *ipConfig {
	if s.ip == nil {
		s.fail(name, "ClientIPWith")
	}
	return s.ip
}

// apply applies opts to s and returns the first error.
func (s *settings) apply(opts []Option) error {
	for _, o := range opts {
		if o != nil {
			o(s)
		}
	}
	return s.err
}

type config struct {
	dryRun       bool
	legacy       bool
	newObserver  func(names []string) (Observer, error)
	onRefusal    RefusalFunc
	onKeyError   ErrorFunc
	onStoreError ErrorFunc
	afterFunc    func(d time.Duration, f func()) (stop func() bool)
	err          error
}

func newConfig(opts []Option) config {
	c := config{
		onKeyError:   defaultKeyError,
		onStoreError: defaultStoreError,
		afterFunc:    afterFunc,
	}
	if err := (&settings{mw: &c}).apply(opts); err != nil && c.err == nil {
		c.err = err
	}
	return c
}

func afterFunc(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }

// DryRun makes the Middleware decide, count and send the rate-limit
// headers as usual, but never refuse: a request a limit refuses, whose key
// cannot be read, or whose store fails, is served as if admitted (and, as
// in earnest, spends nothing of the earlier limits). Verified always
// reports true. Use it to see what a new limit would refuse before
// enforcing it, through the metrics (see WithObserver).
func DryRun() Option {
	return func(s *settings) {
		if c := s.middleware("DryRun"); c != nil {
			c.dryRun = true
		}
	}
}

// LegacyHeaders makes every response also carry X-RateLimit-Limit,
// X-RateLimit-Remaining and X-RateLimit-Reset (delta seconds), for clients
// that read only those: the values of the limit with the fewest events
// left (q, r and t of its RateLimit-Policy and RateLimit items) among the
// limits of every Middleware the request went through (nested ones
// included), as the next request sees them (a limit given back counts its
// event again), or on a refusal, of the refusing limit. A Slots limit has
// none. Default: not sent.
func LegacyHeaders() Option {
	return func(s *settings) {
		if c := s.middleware("LegacyHeaders"); c != nil {
			c.legacy = true
		}
	}
}

// WithObserver reports every decision to an Observer: New calls
// newObserver once, after validating everything else, with the names of
// the limits in the order given, and fails with its error. Package
// instrument provides one that counts decisions for Prometheus. Default:
// none, which costs nothing.
func WithObserver(newObserver func(names []string) (Observer, error)) Option {
	return func(s *settings) {
		if c := s.middleware("WithObserver"); c != nil {
			c.newObserver = newObserver
		}
	}
}

// Refusal describes a refused request to a RefusalFunc.
type Refusal struct {
	Limit      string        // the name of the limit that refused (of those that would, the one that waits longest)
	RetryAfter time.Duration // when every limit of the request would admit (one second for a full Slots limit), of this Middleware and those around it; one nested inside it is not reached
}

// RefusalFunc answers a refused request. When it is called, Retry-After
// (whole seconds, rounded up, so that waiting that long admits) and the
// RateLimit-Policy and RateLimit fields are already set on w's header; it
// writes the status and body.
type RefusalFunc func(w http.ResponseWriter, r *http.Request, ref Refusal)

// ErrorFunc answers a request whose key could not be read, or whose store
// failed. err is never nil; it may contain text the client sent when it
// comes from a KeyFunc of your own, so do not echo it unchecked.
type ErrorFunc func(w http.ResponseWriter, r *http.Request, err error)

// OnRefusal replaces the answer to a refused request. The default is a 429
// with an RFC 9457 application/problem+json body of the quota-exceeded
// problem type (draft-ietf-httpapi-ratelimit-headers), naming the limit in
// violated-policies. A nil f keeps the default.
func OnRefusal(f RefusalFunc) Option {
	return func(s *settings) {
		if c := s.middleware("OnRefusal"); c != nil {
			if f != nil {
				c.onRefusal = f
			}
		}
	}
}

// OnKeyError replaces the answer to a request whose key could not be read.
// The default answers with the Status of a *KeyError (400 when the error is
// not one) and an RFC 9457 application/problem+json body whose detail is
// the KeyError's text, which never contains client-supplied text; errors of
// other types and server faults (status 500) get a generic detail. A nil f
// keeps the default.
func OnKeyError(f ErrorFunc) Option {
	return func(s *settings) {
		if c := s.middleware("OnKeyError"); c != nil {
			if f != nil {
				c.onKeyError = f
			}
		}
	}
}

// OnStoreError replaces the answer to a request whose Store returned an
// error. The default is a 503 with an RFC 9457 application/problem+json
// body that does not reveal the error. To admit or refuse instead when the
// store fails, wrap the store with pace.WithFailurePolicy: its decisions
// are not errors. A nil f keeps the default.
func OnStoreError(f ErrorFunc) Option {
	return func(s *settings) {
		if c := s.middleware("OnStoreError"); c != nil {
			if f != nil {
				c.onStoreError = f
			}
		}
	}
}
