package httplimit_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/driver"
	"github.com/ratepace/pace/httplimit"
	"github.com/ratepace/pace/internal/fakeclock"
)

// Adversarial tests of costs settled after the fact, through the
// middleware. Each states the promise it attacks.

// rcShared returns a Shared of rate per second with a bucket of burst on a
// memory store of clk's.
func rcShared(t *testing.T, rate, burst float64, clk *fakeclock.Clock, opts ...pace.Option) *pace.Shared {
	t.Helper()
	p, err := pace.NewShared(newMemory(t, clk).(driver.Taker), rate, append([]pace.Option{pace.WithClock(clk.Now), pace.WithBurst(burst)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// retryAfter returns the Retry-After of w in seconds, failing when w is
// not a 429.
func retryAfter(t *testing.T, what string, w *httptest.ResponseRecorder) time.Duration {
	t.Helper()
	if w.Code != 429 {
		t.Fatalf("%s: %d; want 429", what, w.Code)
	}
	s, err := strconv.Atoi(w.Header().Get("Retry-After"))
	if err != nil {
		t.Fatalf("%s: Retry-After %q", what, w.Header().Get("Retry-After"))
	}
	return time.Duration(s) * time.Second
}

// TestReviewCostSharedRetryAfterHeldLocally: Retry-After after a refusal
// must admit the same request when the client waits exactly that long,
// also when the refusal came from the local tier of a Shared limit (the
// second identical request after a store refusal).
func TestReviewCostSharedRetryAfterHeldLocally(t *testing.T) {
	clk := newClock()
	p := rcShared(t, 1, 10, clk)
	m := mustNew(t, []httplimit.Limit{httplimit.Shared(p, httplimit.ClientIP(), httplimit.Name("tokens"), httplimit.Cost(headerCost))})
	h := m.Wrap(ok)
	if w := serve(h, costly("192.0.2.1", 10)); w.Code != 200 {
		t.Fatalf("first: %d", w.Code)
	}
	if ra := retryAfter(t, "second (store)", serve(h, costly("192.0.2.1", 10))); ra != 10*time.Second {
		t.Errorf("second: Retry-After %v; want 10s", ra)
	}
	ra := retryAfter(t, "third (local tier)", serve(h, costly("192.0.2.1", 10)))
	clk.Advance(ra)
	if w := serve(h, costly("192.0.2.1", 10)); w.Code != 200 {
		t.Fatalf("waited the third refusal's Retry-After (%v), then: %d, Retry-After %q; want 200",
			ra, w.Code, w.Header().Get("Retry-After"))
	}
}

// TestReviewCostSharedRetryAfterLaterLimitHeld: the same through
// refuseAt: an earlier limit refuses, a later Shared limit with a Cost
// is held by its local tier; Retry-After must cover the later estimate.
func TestReviewCostSharedRetryAfterLaterLimitHeld(t *testing.T) {
	clk := newClock()
	p := rcShared(t, 1, 10, clk)
	m := mustNew(t, []httplimit.Limit{
		httplimit.Pace(newPace(t, 1, clk), httplimit.ClientIP(), httplimit.Name("per-ip")),
		httplimit.Shared(p, httplimit.ClientIP(), httplimit.Name("tokens"), httplimit.Cost(headerCost)),
	})
	h := m.Wrap(ok)
	if w := serve(h, costly("192.0.2.1", 10)); w.Code != 200 {
		t.Fatalf("first: %d", w.Code)
	}
	// The second request: per-ip refuses (1 s), tokens is asked its wait
	// (10 s) and its local tier now holds the key.
	if ra := retryAfter(t, "second", serve(h, costly("192.0.2.1", 10))); ra != 10*time.Second {
		t.Errorf("second: Retry-After %v; want 10s", ra)
	}
	ra := retryAfter(t, "third", serve(h, costly("192.0.2.1", 10)))
	clk.Advance(ra)
	if w := serve(h, costly("192.0.2.1", 10)); w.Code != 200 {
		t.Fatalf("waited the third refusal's Retry-After (%v), then: %d, Retry-After %q; want 200", ra, w.Code, w.Header().Get("Retry-After"))
	}
}

// TestReviewCostRetryAfterAfterOverdraft: after Settle above the estimate
// puts the key in debt, waiting the refusal's Retry-After admits the same
// request (Pace and Shared).
func TestReviewCostRetryAfterAfterOverdraft(t *testing.T) {
	for _, kind := range []string{"Pace", "Shared"} {
		t.Run(kind, func(t *testing.T) {
			clk := newClock()
			var lim httplimit.Limit
			if kind == "Pace" {
				pc, err := pace.New(2, pace.WithBurst(10), pace.WithClock(clk.Now))
				if err != nil {
					t.Fatal(err)
				}
				lim = httplimit.Pace(pc, httplimit.ClientIP(), httplimit.Name("tokens"), httplimit.Cost(headerCost))
			} else {
				lim = httplimit.Shared(rcShared(t, 2, 10, clk), httplimit.ClientIP(), httplimit.Name("tokens"), httplimit.Cost(headerCost))
			}
			m := mustNew(t, []httplimit.Limit{lim})
			if w := serve(m.Wrap(settling(37, nil)), costly("192.0.2.1", 3)); w.Code != 200 {
				t.Fatalf("overdraft: %d", w.Code)
			}
			ra := retryAfter(t, "in debt", serve(m.Wrap(ok), costly("192.0.2.1", 7)))
			clk.Advance(ra)
			if w := serve(m.Wrap(ok), costly("192.0.2.1", 7)); w.Code != 200 {
				t.Fatalf("waited Retry-After %v: %d; want 200", ra, w.Code)
			}
		})
	}
}

// TestReviewCostSettleExtremes: Settle at math.MaxInt, negative and
// math.MinInt neither panics nor reports a negative or absurd RateLimit;
// negative is zero (everything back); MaxInt refuses the key afterwards.
func TestReviewCostSettleExtremes(t *testing.T) {
	for _, kind := range []string{"Pace", "Shared"} {
		for _, used := range []int{math.MaxInt, math.MinInt, -1, maxInt53() + 1} {
			t.Run(kind+"/"+strconv.Itoa(used), func(t *testing.T) {
				clk := newClock()
				var lim httplimit.Limit
				if kind == "Pace" {
					lim = httplimit.Pace(newPace(t, 100, clk), httplimit.ClientIP(), httplimit.Name("tokens"), httplimit.Cost(headerCost))
				} else {
					lim = httplimit.Shared(rcShared(t, 100, 100, clk), httplimit.ClientIP(), httplimit.Name("tokens"), httplimit.Cost(headerCost))
				}
				m := mustNew(t, []httplimit.Limit{lim})
				w := serve(m.Wrap(settling(max(used, -1), nil)), costly("192.0.2.1", 40))
				if used < 0 {
					// settling ignores negatives; settle directly
					w = serve(m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						_ = httplimit.Settle(r, used)
					})), costly("192.0.2.2", 40))
					want(t, "negative", w, 200, `"tokens";r=100;t=0`, "")
					return
				}
				rl := w.Header().Get("RateLimit")
				if w.Code != 200 || strings.Contains(rl, "-") || !strings.Contains(rl, "r=0;") {
					t.Fatalf("MaxInt: %d, RateLimit %q", w.Code, rl)
				}
				clk.Advance(24 * time.Hour)
				if w := serve(m.Wrap(ok), costly("192.0.2.1", 1)); w.Code != 429 {
					t.Fatalf("a day after a settlement at %d: %d; want 429", used, w.Code)
				}
			})
		}
	}
}

func maxInt53() int { return 1 << 53 }

// TestReviewCostSettleThenReturnOn: a handler that settles then writes a
// ReturnOn status gets nothing back of the settled limit.
func TestReviewCostSettleThenReturnOn(t *testing.T) {
	clk := newClock()
	m := mustNew(t, []httplimit.Limit{httplimit.Pace(newPace(t, 100, clk), httplimit.ClientIP(), httplimit.Name("tokens"), httplimit.Cost(headerCost), httplimit.ReturnOn(500))})
	h := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = httplimit.Settle(r, 60)
		w.WriteHeader(500)
	}))
	want(t, "settled then 500", serve(h, costly("192.0.2.1", 10)), 500, `"tokens";r=40;t=1`, "")
	// 40 left: 41 must be refused.
	if w := serve(m.Wrap(ok), costly("192.0.2.1", 41)); w.Code != 429 {
		t.Fatalf("after: %d; want 429 (60 kept)", w.Code)
	}
}

// TestReviewCostPanicAfterSettle: a handler that settles and then panics
// keeps the settlement (the panic's 500 with ReturnOn(500) gives nothing
// back), and the middleware does not hide the panic.
func TestReviewCostPanicAfterSettle(t *testing.T) {
	clk := newClock()
	m := mustNew(t, []httplimit.Limit{httplimit.Pace(newPace(t, 100, clk), httplimit.ClientIP(), httplimit.Name("tokens"), httplimit.Cost(headerCost), httplimit.ReturnOn(500))})
	h := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = httplimit.Settle(r, 70)
		panic("boom")
	}))
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the panic was swallowed")
			}
		}()
		serve(h, costly("192.0.2.1", 10))
	}()
	if w := serve(m.Wrap(ok), costly("192.0.2.1", 31)); w.Code != 429 {
		t.Fatalf("after: %d; want 429 (70 kept)", w.Code)
	}
}

// TestReviewCostMaxCostBodyPerLimit: each limit's MaxCostBody bounds what
// its own CostFunc reads: the second limit's bound of 10 bytes must make a
// 50-byte read a 413 even when the first limit (bound 100) read the body
// into the buffer.
func TestReviewCostMaxCostBodyPerLimit(t *testing.T) {
	clk := newClock()
	readAll := func(r *http.Request) (int, error) {
		b, err := io.ReadAll(r.Body)
		return max(1, len(b)/10), err
	}
	a := httplimit.Pace(newPace(t, 100, clk), httplimit.ClientIP(), httplimit.Name("a"), httplimit.Cost(readAll), httplimit.MaxCostBody(100))
	b := httplimit.Pace(newPace(t, 100, clk), httplimit.ClientIP(), httplimit.Name("b"), httplimit.Cost(readAll), httplimit.MaxCostBody(10))
	for name, limits := range map[string][]httplimit.Limit{"b alone": {b}, "b then a": {b, a}, "a then b": {a, b}} {
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(strings.Repeat("x", 50)))
		r.RemoteAddr = "192.0.2.1:1"
		if w := serve(mustNew(t, limits).Wrap(ok), r); w.Code != http.StatusRequestEntityTooLarge {
			t.Errorf("%s: 50 bytes with a bound of 10 on limit b: %d; want 413", name, w.Code)
		}
	}
}

// TestReviewCostBodyReplayChunkedGzip: a chunked (unknown length), gzip
// body read by the CostFunc is replayed whole to a handler that wraps it in
// http.MaxBytesReader and decompresses it.
func TestReviewCostBodyReplayChunkedGzip(t *testing.T) {
	clk := newClock()
	var zbuf bytes.Buffer
	zw := gzip.NewWriter(&zbuf)
	payload := strings.Repeat("token ", 500)
	zw.Write([]byte(payload))
	zw.Close()
	cost := func(r *http.Request) (int, error) {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			return 0, err
		}
		b, err := io.ReadAll(zr)
		return len(b) / 6, err
	}
	var got string
	h := mustNew(t, []httplimit.Limit{httplimit.Pace(newPace(t, 1000, clk), httplimit.ClientIP(), httplimit.Name("tokens"), httplimit.Cost(cost))}).
		Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			zr, err := gzip.NewReader(http.MaxBytesReader(w, r.Body, int64(zbuf.Len())))
			if err != nil {
				t.Errorf("handler: %v", err)
				return
			}
			b, err := io.ReadAll(zr)
			if err != nil {
				t.Errorf("handler read: %v", err)
			}
			got = string(b)
		}))
	r := httptest.NewRequest(http.MethodPost, "/", io.NopCloser(bytes.NewReader(zbuf.Bytes())))
	r.ContentLength = -1
	r.RemoteAddr = "192.0.2.1:1"
	w := serve(h, r)
	if w.Code != 200 || got != payload {
		t.Fatalf("%d, handler read %d bytes; want 200, %d", w.Code, len(got), len(payload))
	}
	if rl := w.Header().Get("RateLimit"); rl != `"tokens";r=500;t=1` {
		t.Fatalf("RateLimit %q; want r=500", rl)
	}
}

// TestReviewCostNestedSharedForger: two nested Middlewares each with a
// Cost limit on one *pace.Shared (with a request quota): a forger whose
// request is settled at zero leaves the key exactly as found, and a
// settlement at u keeps u in each, never more.
func TestReviewCostNestedSharedForger(t *testing.T) {
	clk := newClock()
	p := rcShared(t, 10, 100, clk, pace.WithQuota(3, time.Minute))
	lim := func(name string) []httplimit.Limit {
		return []httplimit.Limit{httplimit.Shared(p, httplimit.ClientIP(), httplimit.Name(name), httplimit.Cost(headerCost))}
	}
	outer, inner := mustNew(t, lim("outer")), mustNew(t, lim("inner"))
	for i := 0; i < 5; i++ {
		w := serve(outer.Wrap(inner.Wrap(settling(0, nil))), costly("192.0.2.1", 50))
		if w.Code != 200 {
			t.Fatalf("forger %d: %d, %q", i, w.Code, w.Header().Values("RateLimit"))
		}
	}
	// Left exactly as found: the same request sees what a fresh client sees.
	after := serve(outer.Wrap(inner.Wrap(ok)), costly("192.0.2.1", 50))
	fresh := serve(outer.Wrap(inner.Wrap(ok)), costly("192.0.2.9", 50))
	if after.Code != 200 || strings.Join(after.Header().Values("RateLimit"), ",") != strings.Join(fresh.Header().Values("RateLimit"), ",") {
		t.Fatalf("after forgers: %d %q; a fresh client: %d %q", after.Code, after.Header().Values("RateLimit"), fresh.Code, fresh.Header().Values("RateLimit"))
	}
}

// TestReviewCostFuncPanics: a CostFunc that panics gives back what the
// earlier limits took, and the panic goes on.
func TestReviewCostFuncPanics(t *testing.T) {
	clk := newClock()
	first := newPace(t, 10, clk)
	m := mustNew(t, []httplimit.Limit{
		httplimit.Pace(first, httplimit.ClientIP(), httplimit.Name("calls")),
		httplimit.Pace(newPace(t, 100, clk), httplimit.ClientIP(), httplimit.Name("tokens"), httplimit.Cost(func(*http.Request) (int, error) { panic("estimate") })),
	})
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the panic was swallowed")
			}
		}()
		serve(m.Wrap(ok), costly("192.0.2.1", 1))
	}()
	if r := first.ReserveN("192.0.2.1", 10); !r.OK() {
		t.Fatal("the first limit kept its event after the CostFunc panicked")
	}
}

// TestReviewCostSettleAfterDisconnect: the client goes away (the request's
// context is cancelled) before the handler settles a Shared limit at zero:
// the settlement still reaches the store and the key is left as found.
func TestReviewCostSettleAfterDisconnect(t *testing.T) {
	clk := newClock()
	p := rcShared(t, 10, 10, clk)
	m := mustNew(t, []httplimit.Limit{httplimit.Shared(p, httplimit.ClientIP(), httplimit.Name("tokens"), httplimit.Cost(headerCost))})
	ctx, cancel := context.WithCancel(context.Background())
	var settleErr error
	h := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cancel()
		settleErr = httplimit.Settle(r, 0)
	}))
	serve(h, costly("192.0.2.1", 10).WithContext(ctx))
	if settleErr != nil {
		t.Fatalf("Settle after the client left: %v", settleErr)
	}
	if w := serve(m.Wrap(ok), costly("192.0.2.1", 10)); w.Code != 200 {
		t.Fatalf("after the settled-at-zero request of a client that left: %d; want 200", w.Code)
	}
}

// TestReviewCostSharedStoreRefusalExact: a Shared limit's store refusal of
// an estimate larger than what remains (no local hold) reports when it
// fits: waiting Retry-After admits.
func TestReviewCostSharedStoreRefusalExact(t *testing.T) {
	clk := newClock()
	p := rcShared(t, 1, 10, clk)
	m := mustNew(t, []httplimit.Limit{httplimit.Shared(p, httplimit.ClientIP(), httplimit.Name("tokens"), httplimit.Cost(headerCost))})
	h := m.Wrap(ok)
	if w := serve(h, costly("192.0.2.1", 6)); w.Code != 200 {
		t.Fatalf("first: %d", w.Code)
	}
	ra := retryAfter(t, "10 of 4 left", serve(h, costly("192.0.2.1", 10)))
	clk.Advance(ra)
	if w := serve(h, costly("192.0.2.1", 10)); w.Code != 200 {
		t.Fatalf("waited Retry-After %v: %d", ra, w.Code)
	}
}

// TestReviewCostNestedRefusalGivesBackEstimate: the inner Middleware
// refuses: the outer one's Cost reservation is given back whole.
func TestReviewCostNestedRefusalGivesBackEstimate(t *testing.T) {
	clk := newClock()
	tokens := newPace(t, 100, clk)
	outer := mustNew(t, []httplimit.Limit{httplimit.Pace(tokens, httplimit.ClientIP(), httplimit.Name("tokens"), httplimit.Cost(headerCost))})
	inner := mustNew(t, []httplimit.Limit{httplimit.Pace(newPace(t, 1, clk), httplimit.ClientIP(), httplimit.Name("per-ip"))})
	h := outer.Wrap(inner.Wrap(ok))
	if w := serve(h, costly("192.0.2.1", 10)); w.Code != 200 {
		t.Fatalf("first: %d", w.Code)
	}
	for i := 0; i < 5; i++ {
		if w := serve(h, costly("192.0.2.1", 80)); w.Code != 429 {
			t.Fatalf("refused by the inner: %d", w.Code)
		}
	}
	if r := tokens.ReserveN("192.0.2.1", 90); !r.OK() {
		t.Fatal("the outer limit kept estimates of requests the inner refused")
	}
}

// TestReviewCostFallbackSettleHeaders: while the store is down a Shared
// limit's fallback decides; the RateLimit field after Settle reports the
// fallback's settled state (the state the next request sees), as it does
// for a decision of the fallback not settled.
func TestReviewCostFallbackSettleHeaders(t *testing.T) {
	clk := newClock()
	fb, err := pace.New(50, pace.WithBurst(500), pace.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	p, err := pace.NewShared(downStore{}, 100, pace.WithBurst(1000), pace.WithClock(clk.Now), pace.WithFallback(fb, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	m := mustNew(t, []httplimit.Limit{httplimit.Shared(p, httplimit.ClientIP(), httplimit.Name("tokens"), httplimit.Cost(headerCost))})
	// Unsettled: 100 of the fallback's 500, full in 2 s.
	want(t, "unsettled", serve(m.Wrap(ok), costly("192.0.2.1", 100)), 200, `"tokens";r=400;t=2`, "")
	// Settled at 50 of 100: the fallback misses 50, full in 1 s.
	want(t, "settled", serve(m.Wrap(settling(50, nil)), costly("192.0.2.2", 100)), 200, `"tokens";r=450;t=1`, "")
}

// TestReviewCostSettleRacesHandlerEnd: a goroutine the handler started
// settles while the handler returns: no race, no panic, and the key keeps
// either the estimate (too late) or the settlement, nothing else; a
// settlement after the request is over touches a recycled ticket of no
// other request.
func TestReviewCostSettleRacesHandlerEnd(t *testing.T) {
	clk := newClock()
	p := newPace(t, 1000, clk)
	m := mustNew(t, []httplimit.Limit{httplimit.Pace(p, httplimit.ClientIP(), httplimit.Name("tokens"), httplimit.Cost(headerCost))})
	for i := 0; i < 200; i++ {
		addr := "192.0.2." + strconv.Itoa(i%250+1)
		done := make(chan struct{})
		h := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			go func() { defer close(done); _ = httplimit.Settle(r, 0) }()
		}))
		serve(h, costly(addr, 600))
		// Another request, whose ticket may reuse the recycled state.
		other := serve(m.Wrap(ok), costly("198.51.100.1", 1))
		<-done
		if other.Code != 200 {
			t.Fatalf("iteration %d: the other request: %d", i, other.Code)
		}
		// The other request keeps its one event: a late Settle(0) of the
		// first must not reach its ticket.
		if r := p.ReserveN("198.51.100.1", 1000); r.OK() {
			t.Fatalf("iteration %d: the other request's event was given back", i)
		}
		clk.Advance(time.Second) // refills everything
	}
}

// TestReviewCostNestedRetryAfterCoversInnerEstimate: the outer Middleware
// refuses; the inner one's Cost limit needs longer for the same request.
// docs/httplimit.md says inner Middlewares are not asked: waiting the
// outer Retry-After may meet the inner's refusal, whose own Retry-After
// then admits. This checks that documented two-step behaviour.
func TestReviewCostNestedRetryAfterCoversInnerEstimate(t *testing.T) {
	clk := newClock()
	tokens, err := pace.New(5, pace.WithBurst(10), pace.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	outer := mustNew(t, []httplimit.Limit{httplimit.Pace(newPace(t, 1, clk), httplimit.ClientIP(), httplimit.Name("per-ip"))})
	inner := mustNew(t, []httplimit.Limit{httplimit.Pace(tokens, httplimit.ClientIP(), httplimit.Name("tokens"), httplimit.Cost(headerCost))})
	h := outer.Wrap(inner.Wrap(ok))
	if w := serve(h, costly("192.0.2.1", 10)); w.Code != 200 {
		t.Fatalf("first: %d", w.Code)
	}
	clk.Advance(retryAfter(t, "second (outer)", serve(h, costly("192.0.2.1", 10))))
	clk.Advance(retryAfter(t, "third (inner)", serve(h, costly("192.0.2.1", 10))))
	if w := serve(h, costly("192.0.2.1", 10)); w.Code != 200 {
		t.Fatalf("waited both Retry-Afters: %d, Retry-After %q; want 200", w.Code, w.Header().Get("Retry-After"))
	}
}
