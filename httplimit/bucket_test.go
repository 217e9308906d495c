package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/ratepace/pace/httplimit"
	"github.com/ratepace/pace/memory"
)

// rateLimitOf parses the RateLimit field of w and returns the r and t of
// the item named name, failing the test when it is absent.
func rateLimitOf(t *testing.T, w *httptest.ResponseRecorder, name string) (r, secs int64) {
	t.Helper()
	items, err := parseSFList(w.Header().Values("RateLimit"))
	if err != nil {
		t.Fatalf("RateLimit %q: %v", w.Header().Values("RateLimit"), err)
	}
	for _, it := range items {
		if it.value == name {
			return it.intParam(t, "r"), it.intParam(t, "t")
		}
	}
	t.Fatalf("RateLimit %q has no item %q", w.Header().Values("RateLimit"), name)
	return 0, 0
}

// TestBucketReturn: a Bucket limit gives its token back through
// Store.Refund when the handler's status is one of its ReturnOn statuses,
// and when the handler calls Return, once however often it is asked; its
// RateLimit item reports what the store has left, and parses.
func TestBucketReturn(t *testing.T) {
	clk := newClock()
	st := memory.New(memory.WithClock(clk.Now))
	var c counter
	// 3 tokens, refilled at one per 100 s: nothing refills during the test.
	m := mustNew(t, []httplimit.Limit{
		httplimit.Bucket(st, 3, 0.01, httplimit.ClientIP(), httplimit.Name("per-ip"), httplimit.ReturnOn(http.StatusUnauthorized)),
	}, c.Option())
	h := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code, _ := strconv.Atoi(r.URL.Query().Get("code"))
		if r.URL.Query().Get("return") != "" {
			httplimit.Return(r)
			httplimit.Return(r) // single use: the second gives back nothing more
		}
		w.WriteHeader(code)
	}))
	send := func(code int, ret bool) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, "/?code="+strconv.Itoa(code), nil)
		if ret {
			r = httptest.NewRequest(http.MethodGet, "/?return=1&code="+strconv.Itoa(code), nil)
		}
		r.RemoteAddr = "192.0.2.1:1234"
		return serve(h, r)
	}
	// Policy: q=3 over 300 s.
	pol, err := parseSFList(send(200, false).Header().Values("RateLimit-Policy"))
	if err != nil || len(pol) != 1 || pol[0].value != "per-ip" || pol[0].intParam(t, "q") != 3 || pol[0].intParam(t, "w") != 300 {
		t.Fatalf("RateLimit-Policy %v, %v; want per-ip;q=3;w=300", pol, err)
	}
	// One token spent (2 left). A 401 is given back by ReturnOn, a 403 by
	// Return (twice, and then the 403 is not in ReturnOn): each takes the
	// second token at its decision and gives it back before its header is
	// written, so it reports what the next request sees: 2 left, full in
	// 100 s.
	for _, c := range []struct {
		code int
		ret  bool
	}{{401, false}, {403, true}, {401, true}} {
		w := send(c.code, c.ret)
		if r, secs := rateLimitOf(t, w, "per-ip"); w.Code != c.code || r != 2 || secs != 100 {
			t.Fatalf("%d (Return %v): %d, r=%d t=%d; want r=2 t=100 (one token spent before, this one given back)", c.code, c.ret, w.Code, r, secs)
		}
	}
	// A 200 spends: 1 left after it, then 0, then a refusal.
	if r, _ := rateLimitOf(t, send(200, false), "per-ip"); r != 1 {
		t.Fatalf("after the returns, r=%d; want 1: a return gave back more or less than its own token", r)
	}
	if r, secs := rateLimitOf(t, send(200, false), "per-ip"); r != 0 || secs != 300 {
		t.Fatalf("last token: r=%d t=%d; want 0, 300", r, secs)
	}
	w := send(200, false)
	ra, _ := strconv.Atoi(w.Header().Get("Retry-After"))
	if r, secs := rateLimitOf(t, w, "per-ip"); w.Code != 429 || r != 0 || secs != int64(ra) || ra != 100 {
		t.Fatalf("refusal: %d, r=%d t=%d, Retry-After %d; want 429, 0, 100, 100", w.Code, r, secs, ra)
	}
	// Retry-After admits when honoured.
	clk.Advance(time.Duration(ra) * time.Second)
	if w := send(200, false); w.Code != 200 {
		t.Fatalf("after Retry-After: %d", w.Code)
	}
	if got := c.Get("per-ip", httplimit.Returned); got != 3 {
		t.Fatalf("%d returns counted; want 3", got)
	}
}

// TestBucketAllOrNothing: when a later limit refuses, the token an earlier
// Bucket took is refunded; when a Bucket refuses, the event an earlier Pace
// took is given back.
func TestBucketAllOrNothing(t *testing.T) {
	clk := newClock()
	st := memory.New(memory.WithClock(clk.Now))
	client := func(id string) *http.Request {
		r := from("192.0.2.1")
		r.Header.Set("X-Client", id)
		return r
	}

	// The Bucket first, then a Pace of one event per client.
	p := newPace(t, 0.01, clk)
	m := mustNew(t, []httplimit.Limit{
		httplimit.Bucket(st, 2, 0.01, httplimit.ClientIP(), httplimit.Name("per-ip")),
		httplimit.Pace(p, httplimit.Header("X-Client"), httplimit.Name("per-client")),
	})
	h := m.Wrap(ok)
	if w := serve(h, client("a")); w.Code != 200 {
		t.Fatalf("first request: %d", w.Code)
	}
	for range 5 { // refused by per-client: the per-ip token is refunded each time
		w := serve(h, client("a"))
		if _, name := w.Code, problemOf(t, w)["violated-policies"]; w.Code != 429 || name.([]any)[0] != "per-client" {
			t.Fatalf("client a again: %d %v; want 429 by per-client", w.Code, name)
		}
	}
	w := serve(h, client("b"))
	if r, _ := rateLimitOf(t, w, "per-ip"); w.Code != 200 || r != 0 {
		t.Fatalf("client b: %d, per-ip r=%d; want 200 with the address's last token: the refusals spent it", w.Code, r)
	}

	// A Pace first, then a Bucket of one token per address.
	q := newPace(t, 0.01, clk)
	m = mustNew(t, []httplimit.Limit{
		httplimit.Pace(q, httplimit.Header("X-Client"), httplimit.Name("per-client")),
		httplimit.Bucket(st, 1, 0.01, httplimit.ClientIP(), httplimit.Name("per-ip-2")),
	})
	h = m.Wrap(ok)
	if w := serve(h, client("c")); w.Code != 200 {
		t.Fatalf("client c: %d", w.Code)
	}
	w = serve(h, client("d"))
	if w.Code != 429 || problemOf(t, w)["violated-policies"].([]any)[0] != "per-ip-2" {
		t.Fatalf("client d: %d; want 429 by per-ip-2", w.Code)
	}
	if ok, _ := q.Peek("d"); !ok {
		t.Fatal("client d's Pace event was kept although per-ip-2 refused the request")
	}
}
