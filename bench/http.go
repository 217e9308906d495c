package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"

	"github.com/go-chi/httprate"
	"github.com/ratepace/pace"
	"github.com/ratepace/pace/httplimit"
	"github.com/ratepace/pace/redisstore"
	"github.com/redis/go-redis/v9"
	gohttplimit "github.com/sethvargo/go-limiter/httplimit"
	golimiter "github.com/sethvargo/go-limiter/memorystore"
)

// HTTPKeys is the number of distinct client addresses the HTTP benchmarks
// can use: a request is made for each before the timer.
const HTTPKeys = 10_000

// Middleware is one net/http rate limiter under comparison, keyed by the IP
// address of the connection (not a header), or the bare handler.
type Middleware struct {
	// Name, Title, Module, Setup and Baseline are as in Impl.
	Name, Title, Module, Setup string
	Baseline                   bool
	// Wrap returns next behind a fresh instance of the middleware that
	// allows l per client IP address, and a function that stops the
	// instance's goroutines (nil when it has none).
	Wrap func(l Limit, next http.Handler) (http.Handler, func() error, error)
}

// Middlewares returns the net/http middlewares under comparison, pace's
// first, and the handler alone ("bare"). With a Redis client c it adds pace's
// Shared on Redis ("pace-shared", keys under a prefix of its own per
// instance); with c nil it leaves it out.
func Middlewares(c *redis.Client) []Middleware {
	ms := []Middleware{
		{Name: "pace", Title: "pace httplimit", Module: "github.com/ratepace/pace",
			Setup: "httplimit.New([]Limit{httplimit.Pace(pace.New(rate), httplimit.ClientIP())}), default fields",
			Wrap: func(l Limit, next http.Handler) (http.Handler, func() error, error) {
				p, err := newPace(l)
				if err != nil {
					return nil, nil, err
				}
				m, err := httplimit.New([]httplimit.Limit{httplimit.Pace(p.(paceDecider).p, httplimit.ClientIP())})
				if err != nil {
					return nil, nil, err
				}
				return m.Wrap(next), nil, nil
			}},
	}
	if c != nil {
		ms = append(ms, Middleware{Name: "pace-shared", Title: "pace httplimit, Shared on Redis", Module: "github.com/ratepace/pace/redisstore",
			Setup: "httplimit.New([]Limit{httplimit.Shared(pace.NewShared(redisstore.New(c, WithPrefix(private)), rate), httplimit.ClientIP())})",
			Wrap: func(l Limit, next http.Handler) (http.Handler, func() error, error) {
				s, err := redisstore.New(c, redisstore.WithPrefix(newNamespace()))
				if err != nil {
					return nil, nil, err
				}
				p, err := pace.NewShared(s, l.Rate)
				if err != nil {
					return nil, nil, err
				}
				m, err := httplimit.New([]httplimit.Limit{httplimit.Shared(p, httplimit.ClientIP())})
				if err != nil {
					return nil, nil, err
				}
				return m.Wrap(next), nil, nil
			}})
	}
	return append(ms,
		Middleware{Name: "bare", Title: "no middleware", Module: "net/http", Baseline: true,
			Setup: "the handler alone",
			Wrap: func(_ Limit, next http.Handler) (http.Handler, func() error, error) {
				return next, nil, nil
			}},
		Middleware{Name: "httprate", Title: "go-chi/httprate", Module: "github.com/go-chi/httprate",
			Setup: "httprate.LimitBy(burst, burst/rate, the connection's IP), default headers",
			Wrap: func(l Limit, next http.Handler) (http.Handler, func() error, error) {
				return httprate.LimitBy(l.Burst, l.Period(), remoteIP)(next), nil, nil
			}},
		Middleware{Name: "golimiter", Title: "sethvargo/go-limiter", Module: "github.com/sethvargo/go-limiter",
			Setup: "httplimit.NewMiddleware(memorystore, httplimit.IPKeyFunc())",
			Wrap: func(l Limit, next http.Handler) (http.Handler, func() error, error) {
				s, err := golimiter.New(goLimiterConfig(l))
				if err != nil {
					return nil, nil, err
				}
				closeStore := func() error { return s.Close(context.Background()) }
				m, err := gohttplimit.NewMiddleware(s, gohttplimit.IPKeyFunc())
				if err != nil {
					closeStore()
					return nil, nil, err
				}
				return m.Handle(next), closeStore, nil
			}},
	)
}

// HTTP returns the in-process net/http middlewares of Middlewares as
// Impls, each around an empty handler, served one prepared request per key.
func HTTP() []Impl {
	var impls []Impl
	for _, m := range Middlewares(nil) {
		impls = append(impls, Impl{Name: m.Name, Title: m.Title, Module: m.Module, Setup: m.Setup, Baseline: m.Baseline,
			New: func(l Limit) (Decider, error) { return newHTTPDecider(l, m.Wrap) }})
	}
	return impls
}

// remoteIP is the key of the httprate middleware: the IP address of the
// connection.
func remoteIP(r *http.Request) (string, error) {
	ip, _, err := net.SplitHostPort(r.RemoteAddr)
	return ip, err
}

// httpDecider serves one prepared request per key through a middleware
// around an empty handler; a decision admitted is a request that reached
// the handler.
type httpDecider struct {
	h     http.Handler
	reqs  map[string]*http.Request // Key(i) to a request from 10.x.y.z
	close func() error
}

func newHTTPDecider(l Limit, wrap func(Limit, http.Handler) (http.Handler, func() error, error)) (*httpDecider, error) {
	h, closeMiddleware, err := wrap(l, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { reached(w) }))
	if err != nil {
		return nil, err
	}
	reqs := make(map[string]*http.Request, HTTPKeys)
	for i := range HTTPKeys {
		r, err := http.NewRequest(http.MethodGet, "/", nil)
		if err != nil {
			if closeMiddleware != nil {
				closeMiddleware()
			}
			return nil, err
		}
		r.RemoteAddr = fmt.Sprintf("10.%d.%d.%d:40000", i>>16, (i>>8)&0xff, i&0xff)
		reqs[Key(i)] = r
	}
	return &httpDecider{h: h, reqs: reqs, close: closeMiddleware}, nil
}

// Allow serves key's request with a writer of its own.
func (d *httpDecider) Allow(key string) (bool, error) { return d.Worker()(key) }

// Worker returns a function that serves requests with one writer, reused:
// one goroutine's.
func (d *httpDecider) Worker() func(string) (bool, error) {
	w := &countingWriter{h: make(http.Header)}
	return func(key string) (bool, error) {
		r := d.reqs[key]
		if r == nil {
			return false, errors.New("bench: no request prepared for a key")
		}
		w.reached, w.code = false, 0
		d.h.ServeHTTP(w, r)
		switch {
		case w.reached:
			return true, nil
		case w.code == http.StatusTooManyRequests:
			return false, nil
		}
		return false, fmt.Errorf("bench: the middleware answered %d", w.code)
	}
}

func (d *httpDecider) Close() error {
	if d.close != nil {
		return d.close()
	}
	return nil
}

// reached marks the countingWriter under w, unwrapping the writers that
// middlewares put around it, as http.ResponseController does.
func reached(w http.ResponseWriter) {
	for {
		switch x := w.(type) {
		case *countingWriter:
			x.reached = true
			return
		case interface{ Unwrap() http.ResponseWriter }:
			w = x.Unwrap()
		default:
			panic(fmt.Sprintf("bench: the handler got a %T, which does not unwrap to the benchmark's writer", w))
		}
	}
}

// countingWriter is a ResponseWriter that keeps only the status code and
// whether the handler was reached. Its header map is reused: middlewares
// set the same few fields every time.
type countingWriter struct {
	h       http.Header
	code    int
	reached bool
}

func (w *countingWriter) Header() http.Header         { return w.h }
func (w *countingWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *countingWriter) WriteHeader(code int)        { w.code = code }
