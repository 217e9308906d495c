package httplimit

import (
	"net/http"
	"time"
)

// Option configures New (and NewLimiter).
type Option func(*config)

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
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
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
	return func(c *config) { c.dryRun = true }
}

// LegacyHeaders makes every response also carry X-RateLimit-Limit,
// X-RateLimit-Remaining and X-RateLimit-Reset (delta seconds), for clients
// that read only those: the values of the Pace limit with the fewest events
// left (q, r and t of its RateLimit-Policy and RateLimit items), or on a
// refusal by a Pace limit, of that limit. Default: not sent.
func LegacyHeaders() Option {
	return func(c *config) { c.legacy = true }
}

// WithObserver reports every decision to an Observer: New calls
// newObserver once, after validating everything else, with the names of
// the limits in the order given, and fails with its error. Package
// instrument provides one that counts decisions for Prometheus. Default:
// none, which costs nothing.
func WithObserver(newObserver func(names []string) (Observer, error)) Option {
	return func(c *config) { c.newObserver = newObserver }
}

// Refusal describes a refused request to a RefusalFunc.
type Refusal struct {
	Limit      string        // the name of the limit that refused (of those that would, the one that waits longest)
	RetryAfter time.Duration // when every limit of the request would admit (one second for a full Slots limit)
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
	return func(c *config) {
		if f != nil {
			c.onRefusal = f
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
	return func(c *config) {
		if f != nil {
			c.onKeyError = f
		}
	}
}

// OnStoreError replaces the answer to a request whose Store returned an
// error. The default is a 503 with an RFC 9457 application/problem+json
// body that does not reveal the error. To admit or refuse instead when the
// store fails, wrap the store with pace.WithFailurePolicy: its decisions
// are not errors. A nil f keeps the default.
func OnStoreError(f ErrorFunc) Option {
	return func(c *config) {
		if f != nil {
			c.onStoreError = f
		}
	}
}
