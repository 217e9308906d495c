package pacertest

import (
	"context"
	"net/http"
	"time"

	"github.com/go-chi/httprate"
	gohttplimit "github.com/sethvargo/go-limiter/httplimit"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	"github.com/throttled/throttled/v2/store/memstore"
	ulule "github.com/ulule/limiter/v3"
	ulehttp "github.com/ulule/limiter/v3/drivers/middleware/stdlib"
	ulemory "github.com/ulule/limiter/v3/drivers/store/memory"
)

// Lib is one server library, configured for limit calls per window on one
// key shared by every client.
type Lib struct {
	Name string
	// Algorithm says what the library does, for tables.
	Algorithm string
	// Burst says the library is a bucket that starts full: what a run
	// allows is then limit + limit × duration / window.
	Burst bool
	// Wrap puts the library's middleware around next; stop releases it.
	Wrap func(limit int, window time.Duration, next http.Handler) (h http.Handler, stop func(), err error)
}

// oneKey keys every request the same: all clients share one limit.
func oneKey(*http.Request) (string, error) { return "key", nil }

// Libs are the libraries the pacer is validated against.
var Libs = []Lib{
	{Name: "go-limiter", Algorithm: "fixed window from the store's start, reset and Retry-After as UTC dates",
		Wrap: func(limit int, window time.Duration, next http.Handler) (http.Handler, func(), error) {
			s, err := memorystore.New(&memorystore.Config{Tokens: uint64(limit), Interval: window})
			if err != nil {
				return nil, nil, err
			}
			m, err := gohttplimit.NewMiddleware(s, oneKey)
			if err != nil {
				return nil, nil, err
			}
			return m.Handle(next), func() { s.Close(context.Background()) }, nil
		}},
	{Name: "httprate", Algorithm: "sliding window counter, reset in epoch seconds, Retry-After in seconds",
		Wrap: func(limit int, window time.Duration, next http.Handler) (http.Handler, func(), error) {
			return httprate.LimitBy(limit, window, oneKey)(next), func() {}, nil
		}},
	{Name: "ulule", Algorithm: "fixed window from the first call, reset in epoch seconds, no Retry-After",
		Wrap: func(limit int, window time.Duration, next http.Handler) (http.Handler, func(), error) {
			l := ulule.New(ulemory.NewStore(), ulule.Rate{Period: window, Limit: int64(limit)})
			m := ulehttp.NewMiddleware(l, ulehttp.WithKeyGetter(func(*http.Request) string { return "key" }))
			return m.Handler(next), func() {}, nil
		}},
	{Name: "throttled", Algorithm: "GCRA (token bucket), reset and Retry-After in seconds", Burst: true,
		Wrap: func(limit int, window time.Duration, next http.Handler) (http.Handler, func(), error) {
			st, err := memstore.NewCtx(16)
			if err != nil {
				return nil, nil, err
			}
			rl, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{
				MaxRate: throttled.PerDuration(limit, window), MaxBurst: limit - 1})
			if err != nil {
				return nil, nil, err
			}
			h := throttled.HTTPRateLimiterCtx{RateLimiter: rl, VaryBy: &throttled.VaryBy{Custom: func(*http.Request) string { return "key" }}}
			return h.RateLimit(next), func() {}, nil
		}},
}
