package httplimit_test

import (
	"context"
	"net/http"
	"reflect"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/httplimit"
	"github.com/ratepace/pace/internal/benchkit"
)

var (
	sinkKey     *int
	sinkPassage *passage
)

// passage has the size of the middleware's per-request allocation: the
// request copy and its call (the context and ResponseWriter of the
// request), pointers included; the rest of its state is recycled.
type passage struct {
	r    http.Request
	call [10]*int
}

// reportCPU starts measuring the CPU time of the benchmark; the function it
// returns reports it as cpu-ns/op, all cores together (see benchkit.CPUTime).
func reportCPU(b *testing.B) func() {
	start := benchkit.CPUTime()
	return func() {
		b.ReportMetric(float64(benchkit.CPUTime()-start)/float64(b.N), "cpu-ns/op")
	}
}

// discard is a ResponseWriter that keeps one header map across requests, as
// net/http's own writer costs the same with and without the middleware. It
// keeps the last status written, for the check that a benchmark took the
// path its name says.
type discard struct {
	h    http.Header
	code int
}

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(code int)        { d.code = code }

// BenchmarkMiddleware measures what the middleware adds to a request: an
// empty handler bare and behind one Pace limit keyed by ClientIP, side by
// side in one run, over 10,000 client addresses whose every request is
// admitted. The difference between "bare" and "pace" is the overhead.
// "pace-refuse" is the refusal of those addresses, every one spent before
// the timer: the 429 with its problem body, Retry-After and the RateLimit
// fields.
func BenchmarkMiddleware(b *testing.B) {
	const keys = 10000
	reqs := make([]*http.Request, keys)
	seen := map[string]bool{}
	for i := range reqs {
		r, err := http.NewRequest(http.MethodGet, "/", nil)
		if err != nil {
			b.Fatal(err)
		}
		r.RemoteAddr = "10." + strconv.Itoa(i>>16&255) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255) + ":443"
		seen[r.RemoteAddr] = true
		reqs[i] = r
	}
	if len(seen) != keys {
		b.Fatalf("%d distinct addresses; want %d", len(seen), keys)
	}
	// 1000/s per address: at the few million requests per second of this
	// benchmark, spread over 10,000 addresses, every request is admitted,
	// so it measures the path of an admission, not a refusal's.
	p, err := pace.New(1000)
	if err != nil {
		b.Fatal(err)
	}
	m, err := httplimit.New([]httplimit.Limit{httplimit.Pace(p, httplimit.ClientIP())})
	if err != nil {
		b.Fatal(err)
	}
	// One event per 1000 s per address, each spent now: every request is
	// refused, with a Retry-After of 1000 s.
	spent, err := pace.New(0.001)
	if err != nil {
		b.Fatal(err)
	}
	refusing, err := httplimit.New([]httplimit.Limit{httplimit.Pace(spent, httplimit.ClientIP())})
	if err != nil {
		b.Fatal(err)
	}
	for _, r := range reqs {
		refusing.Wrap(http.NotFoundHandler()).ServeHTTP(&discard{h: http.Header{}}, r)
	}
	empty := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	// byHand decides as the middleware does, written into the handler
	// (ClientIP, Reserve, the RateLimit fields): what the decision costs
	// without the middleware's per-request state.
	key := httplimit.ClientIP()
	policy, field := []string{`"pace-0";q=1000;w=1`}, []string{`"pace-0";r=999;t=1`}
	byHand := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k, err := key(r)
		if err != nil {
			b.Fatal(err)
		}
		if res := p.Reserve(k); res.OK() {
			h := w.Header()
			h["Ratelimit-Policy"], h["Ratelimit"] = policy, field
		}
	})
	// allocs makes the middleware's allocation of a request and nothing
	// else (a copy of the request with a context of its own, beside an
	// object of the size of its call): what it costs on this machine,
	// garbage collection included.
	ctx := context.WithValue(context.Background(), sinkKey, 0)
	allocs := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := new(passage)
		p.r = *r.WithContext(ctx)
		p.call[0] = sinkKey
		sinkPassage = p
	})
	for _, c := range []struct {
		name string
		h    http.Handler
		code int // the status every request gets
	}{
		{"bare", empty, 0},
		{"allocs", allocs, 0},
		{"by-hand", byHand, 0},
		{"pace", m.Wrap(empty), 0},
		{"pace-refuse", refusing.Wrap(empty), http.StatusTooManyRequests},
	} {
		check := func(b *testing.B, w *discard) {
			if w.code != c.code {
				b.Errorf("status %d; want %d: the benchmark measures the wrong path", w.code, c.code)
			}
		}
		b.Run(c.name+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			w := &discard{h: http.Header{}}
			defer reportCPU(b)()
			for i := range b.N {
				c.h.ServeHTTP(w, reqs[i%keys])
			}
			check(b, w)
		})
		b.Run(c.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			defer reportCPU(b)()
			b.RunParallel(func(pb *testing.PB) {
				w := &discard{h: http.Header{}, code: c.code} // a goroutine may serve none
				i := 0
				for pb.Next() {
					c.h.ServeHTTP(w, reqs[i%keys])
					i += 7919 // a prime: goroutines walk the keys in different orders
				}
				check(b, w)
			})
		})
	}
}

// BenchmarkCarrier measures the carriers of a request's state that
// Return(r) and Verified(w, r) could find it through, alone, over the
// requests of BenchmarkMiddleware: "context", the request copy and a
// context of its own apart (the middleware before); "passage", both in
// one allocation (the middleware now); "table", no allocation: the
// identity of the request's header map (which r.WithContext copies keep),
// standing for the recycled state, registered in a table of atomic slots,
// looked up once and taken out again. The table cannot tell a request that is over from
// one that never went through a Middleware (Verified with a kept request
// must then report false, TestAttackLateCallersConcurrent), which is why
// the middleware does not use it.
func BenchmarkCarrier(b *testing.B) {
	const keys = 10000
	reqs := make([]*http.Request, keys)
	for i := range reqs {
		r, err := http.NewRequest(http.MethodGet, "/", nil)
		if err != nil {
			b.Fatal(err)
		}
		reqs[i] = r
	}
	type call struct {
		context.Context
		rest [8]*int // the rest of the middleware's call (80 bytes in all)
	}
	type passageOf struct {
		r http.Request
		c call
	}
	var slots [1 << 13]atomic.Uintptr
	slotOf := func(h http.Header) (*atomic.Uintptr, uintptr) {
		p := uintptr(reflect.ValueOf(h).UnsafePointer())
		return &slots[(uint64(p)*0x9E3779B97F4A7C15)>>51], p
	}
	var sink any
	for _, c := range []struct {
		name string
		f    func(r *http.Request)
	}{
		{"context", func(r *http.Request) {
			c := &call{Context: r.Context()}
			c.rest[0] = sinkKey
			sink = r.WithContext(c)
		}},
		{"passage", func(r *http.Request) {
			p := &passageOf{}
			p.c = call{Context: r.Context()}
			p.c.rest[0] = sinkKey
			p.r = *r.WithContext(&p.c)
			sink = p
		}},
		{"table", func(r *http.Request) {
			slot, key := slotOf(r.Header)
			if !slot.CompareAndSwap(0, key) {
				b.Fatal("slot taken")
			}
			if got, key := slotOf(r.Header); got.Load() != key {
				b.Fatal("lookup missed")
			}
			slot.CompareAndSwap(key, 0)
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			defer reportCPU(b)()
			for i := range b.N {
				c.f(reqs[i%keys])
			}
		})
	}
	_ = sink
}
