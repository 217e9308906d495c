package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/go-chi/httprate"
	"github.com/ratepace/pace"
	golimiter "github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	"github.com/throttled/throttled/v2/store/memstore"
	ulule "github.com/ulule/limiter/v3"
	ulemory "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"
)

// Limit is the shape every implementation is given: Rate events per second
// per key, with room for Burst events at once. The shapes used here all have
// Burst = max(1, Rate × 1 s), pace's bucket of one second, so every library
// is asked for the same thing.
type Limit struct {
	Rate  float64
	Burst int
	// Sweep, when positive, is the interval at which the libraries that
	// forget idle keys on a timer (go-limiter, ulule) run it, and go-limiter
	// then forgets a key idle for one Period. Zero leaves each library's
	// defaults (every 6 h, keys idle for 12 h, for go-limiter; every 30 s
	// for ulule).
	Sweep time.Duration
	// Step, when positive, is go-limiter's refill interval: it is given
	// Rate × Step tokens every Step instead of Burst every Period. Its
	// memory store refills a spent key with Interval/Tokens tokens
	// (nanoseconds), not Tokens (TestGoLimiterRefillsIntervalOverTokens),
	// so it refills in full only while Rate × Rate × Step is at most 10⁹
	// per second: a short step lets it admit a high rate. Zero means Period.
	Step time.Duration
}

// The three shapes of the benchmarks.
var (
	// Admit is far faster than any key is asked: every decision admits.
	Admit = Limit{Rate: 1e9, Burst: 1e9}
	// Refuse is one event per 1000 s: once a key is spent, every decision
	// on it refuses.
	Refuse = Limit{Rate: 1e-3, Burst: 1}
	// Flood is one event per second: a key never seen before is admitted
	// and then holds state for a whole second, the heaviest case.
	Flood = Limit{Rate: 1, Burst: 1}
)

// Period reports the time the whole burst takes to refill: Burst / Rate.
func (l Limit) Period() time.Duration {
	return time.Duration(math.Round(float64(l.Burst) / l.Rate * float64(time.Second)))
}

// goLimiterConfig returns go-limiter's memory store configuration for l.
func goLimiterConfig(l Limit) *golimiter.Config {
	cfg := &golimiter.Config{Tokens: uint64(l.Burst), Interval: l.Period()}
	if l.Step > 0 {
		cfg.Tokens, cfg.Interval = uint64(math.Round(l.Rate*l.Step.Seconds())), l.Step
	}
	if l.Sweep > 0 {
		cfg.SweepInterval, cfg.SweepMinTTL = l.Sweep, l.Period()
	}
	return cfg
}

// Decider is one limiter instance: a table of keys under one Limit.
type Decider interface {
	// Allow decides one event for key and debits it if admitted. A
	// limiter's own failure (never a refusal) is an error.
	Allow(key string) (bool, error)
	// Close stops the limiter's goroutines, if it has any.
	Close() error
}

// Lener is implemented by the Deciders that can count the keys they hold.
type Lener interface{ Len() int }

// Namespacer is implemented by the Deciders whose state outlives them (in
// Redis): each instance has its own namespace, which the benchmarks put in
// front of every key so that two instances never share a key.
type Namespacer interface{ Namespace() string }

// Impl is one implementation under comparison.
type Impl struct {
	// Name is the benchmark name's impl= value.
	Name string
	// Title is the name the report shows.
	Title string
	// Module is the Go module the implementation comes from.
	Module string
	// Setup says how the implementation is configured, for the report.
	Setup string
	// MaxKeys is the number of keys the implementation keeps at most (it
	// forgets the least recently used beyond), 0 for no such cap.
	MaxKeys int
	// Baseline marks what limits nothing (the bare handler): it runs on the
	// admit path only, as the cost the others add to.
	Baseline bool
	// New returns a fresh instance for l.
	New func(l Limit) (Decider, error)
}

// throttledMaxKeys is the LRU size of throttled's memstore, as its README
// configures it.
const throttledMaxKeys = 65536

// Local returns the in-process implementations, pace first.
func Local() []Impl {
	return []Impl{
		{Name: "pace", Title: "pace", Module: "github.com/ratepace/pace",
			Setup: "pace.New(rate); Allow", New: newPace},
		{Name: "xrate-mutex", Title: "x/time/rate + mutex map", Module: "golang.org/x/time",
			Setup: "map[string]*rate.Limiter under a sync.Mutex, no eviction", New: newXRateMutex},
		{Name: "xrate-syncmap", Title: "x/time/rate + sync.Map", Module: "golang.org/x/time",
			Setup: "sync.Map of *rate.Limiter (Load, then LoadOrStore), no eviction", New: newXRateSyncMap},
		{Name: "golimiter", Title: "sethvargo/go-limiter", Module: "github.com/sethvargo/go-limiter",
			Setup: "memorystore (Tokens = burst, Interval = burst/rate)", New: newGoLimiter},
		{Name: "throttled", Title: "throttled", Module: "github.com/throttled/throttled/v2",
			Setup: "GCRA on memstore.NewCtx(65536), an LRU of 65,536 keys", MaxKeys: throttledMaxKeys, New: newThrottled},
		{Name: "ulule", Title: "ulule/limiter", Module: "github.com/ulule/limiter/v3",
			Setup: "memory store (a fixed window of burst/rate)", New: newUlule},
		{Name: "httprate", Title: "go-chi/httprate", Module: "github.com/go-chi/httprate",
			Setup: "in-memory sliding-window counter, RateLimiter.OnLimit with no response headers", New: newHTTPRate},
	}
}

// errShape is returned when a library cannot express a Limit exactly.
var errShape = errors.New("bench: the library cannot express this limit exactly")

type paceDecider struct{ p *pace.Pace }

func newPace(l Limit) (Decider, error) {
	p, err := pace.New(l.Rate)
	if err != nil {
		return nil, err
	}
	if p.Burst() != l.Burst {
		return nil, fmt.Errorf("bench: pace's burst at %g/s is %d, not %d: %w", l.Rate, p.Burst(), l.Burst, errShape)
	}
	return paceDecider{p}, nil
}

func (d paceDecider) Allow(key string) (bool, error) { return d.p.Allow(key), nil }
func (d paceDecider) Close() error                   { return nil }
func (d paceDecider) Len() int                       { return d.p.Len() }

// xrateMutex is the per-key x/time/rate limiter as most services write it: a
// map under one mutex, the lookup inside the lock, the decision outside.
type xrateMutex struct {
	mu    sync.Mutex
	m     map[string]*rate.Limiter
	limit rate.Limit
	burst int
}

func newXRateMutex(l Limit) (Decider, error) {
	return &xrateMutex{m: make(map[string]*rate.Limiter), limit: rate.Limit(l.Rate), burst: l.Burst}, nil
}

func (d *xrateMutex) Allow(key string) (bool, error) {
	d.mu.Lock()
	lim := d.m[key]
	if lim == nil {
		lim = rate.NewLimiter(d.limit, d.burst)
		d.m[key] = lim
	}
	d.mu.Unlock()
	return lim.Allow(), nil
}

func (d *xrateMutex) Close() error { return nil }

func (d *xrateMutex) Len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.m)
}

// xrateSyncMap is the same with a sync.Map: a Load, and a LoadOrStore for a
// key not seen before.
type xrateSyncMap struct {
	m     sync.Map
	limit rate.Limit
	burst int
}

func newXRateSyncMap(l Limit) (Decider, error) {
	return &xrateSyncMap{limit: rate.Limit(l.Rate), burst: l.Burst}, nil
}

func (d *xrateSyncMap) Allow(key string) (bool, error) {
	v, ok := d.m.Load(key)
	if !ok {
		v, _ = d.m.LoadOrStore(key, rate.NewLimiter(d.limit, d.burst))
	}
	return v.(*rate.Limiter).Allow(), nil
}

func (d *xrateSyncMap) Close() error { return nil }

func (d *xrateSyncMap) Len() int {
	n := 0
	d.m.Range(func(any, any) bool { n++; return true })
	return n
}

type goLimiter struct {
	s interface {
		Take(ctx context.Context, key string) (tokens, remaining, reset uint64, ok bool, err error)
		Close(ctx context.Context) error
	}
}

func newGoLimiter(l Limit) (Decider, error) {
	s, err := golimiter.New(goLimiterConfig(l))
	if err != nil {
		return nil, err
	}
	return goLimiter{s}, nil
}

func (d goLimiter) Allow(key string) (bool, error) {
	_, _, _, ok, err := d.s.Take(context.Background(), key)
	return ok, err
}

func (d goLimiter) Close() error { return d.s.Close(context.Background()) }

type throttledDecider struct{ rl *throttled.GCRARateLimiterCtx }

func newThrottled(l Limit) (Decider, error) {
	st, err := memstore.NewCtx(throttledMaxKeys)
	if err != nil {
		return nil, err
	}
	// MaxBurst is the burst beyond the first event.
	rl, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{
		MaxRate:  throttled.PerDuration(1, time.Duration(math.Round(float64(time.Second)/l.Rate))),
		MaxBurst: l.Burst - 1,
	})
	if err != nil {
		return nil, err
	}
	return throttledDecider{rl}, nil
}

func (d throttledDecider) Allow(key string) (bool, error) {
	limited, _, err := d.rl.RateLimitCtx(context.Background(), key, 1)
	return !limited && err == nil, err
}

func (d throttledDecider) Close() error { return nil }

type ululeDecider struct{ l *ulule.Limiter }

func newUlule(l Limit) (Decider, error) {
	clean := l.Sweep
	if clean <= 0 {
		clean = ulule.DefaultCleanUpInterval
	}
	store := ulemory.NewStoreWithOptions(ulule.StoreOptions{Prefix: ulule.DefaultPrefix, CleanUpInterval: clean})
	return ululeDecider{ulule.New(store, ulule.Rate{Period: l.Period(), Limit: int64(l.Burst)})}, nil
}

func (d ululeDecider) Allow(key string) (bool, error) {
	c, err := d.l.Get(context.Background(), key)
	return err == nil && !c.Reached, err
}

// Close does nothing: the memory store stops its cleaner from a finalizer.
func (d ululeDecider) Close() error { return nil }

// httpRate calls the limiter's own decision, RateLimiter.OnLimit, which
// needs a request and a response writer: it gets one request made once (it
// reads only its context) and a writer it never touches, since every
// response header is switched off.
type httpRate struct {
	rl  *httprate.RateLimiter
	req *http.Request
}

func newHTTPRate(l Limit) (Decider, error) {
	req, err := http.NewRequest(http.MethodGet, "/", nil)
	if err != nil {
		return nil, err
	}
	rl := httprate.NewRateLimiter(l.Burst, l.Period(), httprate.WithResponseHeaders(httprate.ResponseHeaders{}))
	return httpRate{rl, req}, nil
}

func (d httpRate) Allow(key string) (bool, error) {
	return !d.rl.OnLimit(noWriter{}, d.req, key), nil
}

func (d httpRate) Close() error { return nil }

// noWriter is a ResponseWriter that keeps nothing.
type noWriter struct{}

func (noWriter) Header() http.Header         { return http.Header{} }
func (noWriter) Write(p []byte) (int, error) { return len(p), nil }
func (noWriter) WriteHeader(int)             {}
