package httplimit_test

// Regression tests for defects an adversarial review found at the edge:
// each names the promise it pins.

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/httplimit"
	"github.com/ratepace/pace/memory"
)

// TestClientIDFormWithInvalidMediaParameter breaks docs/httplimit.md's
// "the client_id parameter wherever net/http hands one to a handler ... a
// urlencoded POST" (RFC 6749 section 2.3: one
// authentication method per request). mime.ParseMediaType returns the media
// type together with ErrInvalidMediaParameter when a parameter is
// malformed ("application/x-www-form-urlencoded; charset"), and net/http's
// parsePostForm keeps the media type and parses the body anyway; ClientID
// treats the error as "no form" and skips the body. A forger then sends
// Basic naming the victim beside its own client_id and secret in the body:
// keyed as the victim, authenticated (r.PostFormValue) as the forger.
func TestClientIDFormWithInvalidMediaParameter(t *testing.T) {
	for _, ct := range []string{
		"application/x-www-form-urlencoded; charset",
		"application/x-www-form-urlencoded; =utf-8",
		`application/x-www-form-urlencoded; charset="utf-8`,
	} {
		t.Run(ct, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/token", strings.NewReader("grant_type=client_credentials&client_id=forger&client_secret=forgers-own"))
			r.Header.Set("Content-Type", ct)
			r.SetBasicAuth("victim", "")
			key, err := httplimit.ClientID()(r)
			if err != nil {
				return // refused: spends nothing, as promised
			}
			if got := r.PostFormValue("client_id"); got != key {
				t.Fatalf("keyed as %q, but the handler reads client_id %q from the body: the forger spends the victim's limit", key, got)
			}
		})
	}
}

// TestSlotsRefreshIntervalAboveZero breaks "refreshed every ttl/3 while it
// streams" and "bad input: a clear error ..., never silent": New accepts a
// Slots ttl of 1 or 2 ns (ValidateSlot wants only ttl > 0), the refresh
// interval ttl/3 is then 0, and the refresher re-arms a timer of 0 after
// every refresh: a store call in a loop at full speed for as long as the
// stream lives (on Redis, a flood of PEXPIREs from every stream). New must
// refuse such a ttl, or the refresher must never arm a timer of 0.
func TestSlotsRefreshIntervalAboveZero(t *testing.T) {
	var mu sync.Mutex
	var asked []time.Duration
	after := func(d time.Duration, f func()) func() bool {
		mu.Lock()
		asked = append(asked, d)
		mu.Unlock()
		return func() bool { return true } // never fires: the test only reads d
	}
	m, err := httplimit.New([]httplimit.Limit{httplimit.Slots(memory.New(), 2, 2*time.Nanosecond, httplimit.ClientIP())}, httplimit.WithAfterFunc(after))
	if err != nil {
		return // refused at New: fine
	}
	serve(m.Wrap(ok), from("192.0.2.1"))
	mu.Lock()
	defer mu.Unlock()
	for _, d := range asked {
		if d <= 0 {
			t.Fatalf("slot refresh armed every %v: a busy loop of store calls while the stream lives", d)
		}
	}
}

// TestTrustedProxyByMappedOrNAT64Prefix breaks "IPv4-mapped addresses and
// IPv4 clients translated by NAT64 ... are keyed by their IPv4 address" as
// it applies to the trusted list: the peer is unmapped before it is looked
// up in TrustProxies, but the prefixes are not, so a proxy trusted by the
// address form the server sees (a dual-stack listener reports
// [::ffff:10.0.0.1], an IPv6-only one behind NAT64 [64:ff9b::a00:1]) is
// not trusted. Its forwarding headers are then ignored and every client
// behind it gets the proxy's one key: one client's flood refuses everyone.
func TestTrustedProxyByMappedOrNAT64Prefix(t *testing.T) {
	for _, c := range []struct{ trusted, peer string }{
		{"::ffff:10.0.0.0/104", "[::ffff:10.0.0.1]:443"},
		{"64:ff9b::10.0.0.0/104", "[64:ff9b::a00:1]:443"},
		{"::ffff:10.0.0.0/104", "10.0.0.1:443"},
	} {
		t.Run(c.trusted+" "+c.peer, func(t *testing.T) {
			key := httplimit.ClientIP(netip.MustParsePrefix(c.trusted))
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = c.peer
			r.Header.Set("X-Forwarded-For", "198.51.100.7")
			got, err := key(r)
			if err != nil {
				t.Fatal(err)
			}
			if got != "198.51.100.7" {
				t.Fatalf("key %q; want the client the trusted proxy names, 198.51.100.7", got)
			}
		})
	}
}

// TestNestedInnerErrorGivesBackOuter breaks "nested middlewares ... all or
// nothing, as within one middleware" (the sibling of all or nothing across a chain) and
// "an outage must cost callers nothing": within one Middleware a key error
// or a store error gives back what the earlier limits took
// (Limiter.Decide), but across nested Middlewares only a refusal does
// (ServeHTTP calls Return only on Refused). The same two limits split into
// an outer per-address Middleware and an inner per-route one then charge
// the outer limit for every request the inner one answers 400 or 503: an
// outage of the inner limit's store drains every client's per-address pace,
// so once the store is back clients are refused for what the outage did.
func TestNestedInnerErrorGivesBackOuter(t *testing.T) {
	for _, c := range []struct {
		name  string
		inner httplimit.Limit
		code  int
	}{
		{"store error", httplimit.Bucket(downStore{}, 5, 5, httplimit.ClientIP(), httplimit.Name("inner")), http.StatusServiceUnavailable},
		{"key error", httplimit.Pace(newPace(t, 5, newClock()), httplimit.Header("X-Api-Key"), httplimit.Name("inner")), http.StatusBadRequest},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := newClock()
			perIP := newPace(t, 1, clk) // a burst of one
			outer := mustNew(t, []httplimit.Limit{httplimit.Pace(perIP, httplimit.ClientIP(), httplimit.Name("per-ip"))})
			inner := mustNew(t, []httplimit.Limit{c.inner})
			h := outer.Wrap(inner.Wrap(ok))
			if w := serve(h, from("192.0.2.1")); w.Code != c.code {
				t.Fatalf("status %d; want %d", w.Code, c.code)
			}
			if ok, _ := perIP.Peek("192.0.2.1"); !ok {
				t.Fatalf("the outer Middleware kept its event after the inner one answered %d (one Middleware of both limits gives it back)", c.code)
			}
		})
	}
}

// TestSharedQuotaRateLimitTIsTheQuotas breaks "RateLimit ... t the seconds
// until its bucket is full again" and the promise that the fields never lie: a
// Shared limit's RateLimit item takes r from the tightest of its limits
// (here the hourly pace.WithQuota) but t from the pace of NewShared, so the
// admission that spends the hourly quota says r=0;t=1. A client that waits
// that second is refused for twelve minutes.
func TestSharedQuotaRateLimitTIsTheQuotas(t *testing.T) {
	clk := newClock()
	st := memory.New(memory.WithClock(clk.Now))
	p, err := pace.NewShared(st, 10, pace.WithQuota(5, time.Hour), pace.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	m := mustNew(t, []httplimit.Limit{httplimit.Shared(p, httplimit.ClientIP(), httplimit.Name("api"))})
	h := m.Wrap(ok)
	var last *httptest.ResponseRecorder
	for i := range 5 {
		last = serve(h, from("192.0.2.1"))
		if last.Code != http.StatusOK {
			t.Fatalf("request %d: %d", i, last.Code)
		}
	}
	rl := itemsOf(t, last, "RateLimit")["api"]
	r, secs := rl.intParam(t, "r"), rl.intParam(t, "t")
	if r != 0 {
		t.Fatalf("r=%d after the hourly quota of 5 is spent; want 0", r)
	}
	clk.Advance(time.Duration(secs) * time.Second)
	if w := serve(h, from("192.0.2.1")); w.Code != http.StatusOK {
		t.Fatalf("RateLimit said r=0;t=%d, waited %d s: %d, Retry-After %s", secs, secs, w.Code, w.Header().Get("Retry-After"))
	}
}

// TestPaceWithBurstRateLimitT breaks "t the seconds until its bucket is
// full again (rounded up)" for a Pace built with pace.WithBurst: the
// limit's time to refill is max(1 s, one interval), not the burst's, so at
// 1/s with a burst of 10 the first response says r=9;t=0 (full now, though
// one event is missing for a second) and the one that empties the bucket
// r=0;t=1 (it is full after 10 s, not 1: a client that waits t and asks
// again finds r=0 again, not 9).
func TestPaceWithBurstRateLimitT(t *testing.T) {
	clk := newClock()
	p, err := pace.New(1, pace.WithBurst(10), pace.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	m := mustNew(t, []httplimit.Limit{httplimit.Pace(p, httplimit.ClientIP(), httplimit.Name("api"))})
	h := m.Wrap(ok)
	var rs, ts []int64
	for range 10 {
		w := serve(h, from("192.0.2.1"))
		it := itemsOf(t, w, "RateLimit")["api"]
		rs, ts = append(rs, it.intParam(t, "r")), append(ts, it.intParam(t, "t"))
	}
	for i := range rs {
		// i+1 events missing, one a second: full in i+1 seconds.
		if want := int64(i + 1); ts[i] != want {
			t.Errorf("response %d: r=%d;t=%d; want t=%d (the bucket of 10 at 1/s is full again in %d s)", i, rs[i], ts[i], want, want)
		}
	}
}

// TestNestedLegacyHeadersTightest breaks "LegacyHeaders() adds
// X-RateLimit-Limit, -Remaining and -Reset of the tightest limit" with
// "nested middlewares combine their fields":
// the inner Middleware overwrites the outer one's X-RateLimit-* with its
// own limit, so the response that spends the outer per-address pace says
// X-RateLimit-Remaining: 8, and the next request is refused.
func TestNestedLegacyHeadersTightest(t *testing.T) {
	clk := newClock()
	outer := mustNew(t, []httplimit.Limit{httplimit.Pace(newPace(t, 2, clk), httplimit.ClientIP(), httplimit.Name("per-ip"))}, httplimit.LegacyHeaders())
	inner := mustNew(t, []httplimit.Limit{httplimit.Pace(newPace(t, 10, clk), httplimit.ClientIP(), httplimit.Name("route"))}, httplimit.LegacyHeaders())
	h := outer.Wrap(inner.Wrap(ok))
	serve(h, from("192.0.2.1"))
	w := serve(h, from("192.0.2.1"))
	if got := w.Header().Get("X-Ratelimit-Remaining"); got != "0" {
		next := serve(h, from("192.0.2.1"))
		t.Fatalf("X-RateLimit-Remaining %q (Limit %q) with per-ip spent; the next request: %d", got, w.Header().Get("X-Ratelimit-Limit"), next.Code)
	}
}

// TestGivenBackLegacyHeadersReportNextRequest breaks "a response whose
// event was given back before its header was written ... reports what the
// next request will see" for LegacyHeaders: RateLimit
// is rewritten at WriteHeader, X-RateLimit-Remaining is not, so a 401 that
// gave its event back says Remaining 0 while the next request is admitted
// with r=0 left (it had 1).
func TestGivenBackLegacyHeadersReportNextRequest(t *testing.T) {
	clk := newClock()
	m := mustNew(t, []httplimit.Limit{httplimit.Pace(newPace(t, 1, clk), httplimit.ClientIP(), httplimit.Name("per-client"), httplimit.ReturnOn(http.StatusUnauthorized))}, httplimit.LegacyHeaders())
	h := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusUnauthorized) }))
	w := serve(h, from("192.0.2.1"))
	rl := itemsOf(t, w, "RateLimit")["per-client"].intParam(t, "r")
	if got := w.Header().Get("X-Ratelimit-Remaining"); got != strconv.FormatInt(rl, 10) {
		t.Fatalf("after the give-back: RateLimit r=%d, X-RateLimit-Remaining %q; want them to agree on what the next request sees", rl, got)
	}
}

// TestNestedRetryAfterCoversInnerLimits pins what docs/httplimit.md
// promises of Retry-After across nested Middlewares, once the review found
// the wider promise broken: a refusal by the outer Middleware covers its
// own limits only (the inner one is not reached, and which inner
// Middlewares a request would reach the outer one cannot know), so at 1/s
// outside and 0.2/s inside the second request is told 1 s and, waiting
// that, is refused by the inner limit with the rest of its wait (4 s),
// after which it is admitted; the same limits in one Middleware tell 5 s
// at once.
func TestNestedRetryAfterCoversInnerLimits(t *testing.T) {
	clk := newClock()
	outer := mustNew(t, []httplimit.Limit{httplimit.Pace(newPace(t, 1, clk), httplimit.ClientIP(), httplimit.Name("per-ip"))})
	inner := mustNew(t, []httplimit.Limit{httplimit.Pace(newPace(t, 0.2, clk), httplimit.ClientIP(), httplimit.Name("route"))})
	h := outer.Wrap(inner.Wrap(ok))
	one := mustNew(t, []httplimit.Limit{
		httplimit.Pace(newPace(t, 1, clk), httplimit.ClientIP(), httplimit.Name("per-ip")),
		httplimit.Pace(newPace(t, 0.2, clk), httplimit.ClientIP(), httplimit.Name("route")),
	}).Wrap(ok)
	for _, c := range []struct {
		name  string
		h     http.Handler
		waits []string // the Retry-After of each refusal until admitted
	}{
		{"nested", h, []string{"1", "4"}},
		{"one Middleware", one, []string{"5"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if w := serve(c.h, from("192.0.2.1")); w.Code != http.StatusOK {
				t.Fatal(w.Code)
			}
			for _, want := range c.waits {
				w := serve(c.h, from("192.0.2.1"))
				if got := w.Header().Get("Retry-After"); w.Code != http.StatusTooManyRequests || got != want {
					t.Fatalf("%d, Retry-After %q; want 429, %s", w.Code, got, want)
				}
				secs, _ := strconv.Atoi(want)
				clk.Advance(time.Duration(secs) * time.Second)
			}
			if w := serve(c.h, from("192.0.2.1")); w.Code != http.StatusOK {
				t.Fatalf("after waiting every Retry-After: %d, Retry-After %s", w.Code, w.Header().Get("Retry-After"))
			}
		})
	}
}
