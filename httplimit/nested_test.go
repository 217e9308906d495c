package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/httplimit"
	"github.com/ratepace/pace/memory"
)

// itemsOf parses the structured-field list of field in w and returns the
// items by name, failing the test on a parse error or a name twice.
func itemsOf(t *testing.T, w *httptest.ResponseRecorder, field string) map[string]sfItem {
	t.Helper()
	items, err := parseSFList(w.Header().Values(field))
	if err != nil {
		t.Fatalf("%s %q: %v", field, w.Header().Values(field), err)
	}
	m := map[string]sfItem{}
	for _, it := range items {
		name, _ := it.value.(string)
		if _, dup := m[name]; dup {
			t.Fatalf("%s %q names %q twice", field, w.Header().Values(field), name)
		}
		m[name] = it
	}
	return m
}

// TestNestedMiddlewaresCombineFields: a request through two nested
// Middlewares carries the RateLimit-Policy and RateLimit items of both (the
// inner one used to replace the outer one's); a refusal by the inner one
// gives back what the outer one took (all or nothing across the nesting)
// and reports the refusing item; Verified in the inner one keeps the outer
// one's items.
func TestNestedMiddlewaresCombineFields(t *testing.T) {
	clk := newClock()
	perIP, perClient := newPace(t, 5, clk), newPace(t, 4, clk)
	outer := mustNew(t, []httplimit.Limit{httplimit.Pace(perIP, httplimit.ClientIP(), httplimit.Name("per-ip"))})
	inner := mustNew(t, []httplimit.Limit{httplimit.Pace(perClient, httplimit.Header("X-Client"), httplimit.Name("per-client"))})
	h := outer.Wrap(inner.Wrap(ok))
	send := func() *httptest.ResponseRecorder {
		r := from("192.0.2.1")
		r.Header.Set("X-Client", "c")
		return serve(h, r)
	}
	w := send()
	pol := itemsOf(t, w, "RateLimit-Policy")
	if len(pol) != 2 || pol["per-ip"].intParam(t, "q") != 5 || pol["per-client"].intParam(t, "q") != 4 {
		t.Fatalf("RateLimit-Policy %q; want per-ip q=5 and per-client q=4", w.Header().Values("RateLimit-Policy"))
	}
	rl := itemsOf(t, w, "RateLimit")
	if len(rl) != 2 || rl["per-ip"].intParam(t, "r") != 4 || rl["per-client"].intParam(t, "r") != 3 {
		t.Fatalf("RateLimit %q; want per-ip r=4 and per-client r=3", w.Header().Values("RateLimit"))
	}
	for range 3 {
		send()
	}
	// per-client is empty, per-ip has 1 left: the refusal spends nothing of it.
	w = send()
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("fifth request: %d; want 429", w.Code)
	}
	if rl := itemsOf(t, w, "RateLimit"); len(rl) != 1 || rl["per-client"].value == nil || rl["per-client"].intParam(t, "r") != 0 {
		t.Fatalf("refusal's RateLimit %q; want the per-client item alone", w.Header().Values("RateLimit"))
	}
	r := from("192.0.2.1")
	r.Header.Set("X-Client", "other")
	if w := serve(h, r); w.Code != http.StatusOK || itemsOf(t, w, "RateLimit")["per-ip"].intParam(t, "r") != 0 {
		t.Fatalf("after the inner refusal: %d, RateLimit %q; want 200 and per-ip r=0 (its last event, given back by the refusal)", w.Code, w.Header().Values("RateLimit"))
	}
}

// TestNestedVerifiedKeepsOuterItems: Verified in an inner Middleware adds
// its items to those of the outer one instead of replacing them.
func TestNestedVerifiedKeepsOuterItems(t *testing.T) {
	clk := newClock()
	outer := mustNew(t, []httplimit.Limit{httplimit.Pace(newPace(t, 5, clk), httplimit.ClientIP(), httplimit.Name("per-ip"))})
	inner := mustNew(t, []httplimit.Limit{httplimit.Pace(newPace(t, 4, clk), httplimit.Header("X-Client"), httplimit.Name("per-client"), httplimit.DecideAfterVerify())})
	h := outer.Wrap(inner.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if httplimit.Verified(w, r) {
			w.Write([]byte("ok"))
		}
	})))
	r := from("192.0.2.1")
	r.Header.Set("X-Client", "c")
	w := serve(h, r)
	if rl := itemsOf(t, w, "RateLimit"); w.Code != 200 || len(rl) != 2 || rl["per-ip"].intParam(t, "r") != 4 || rl["per-client"].intParam(t, "r") != 3 {
		t.Fatalf("%d, RateLimit %q; want per-ip r=4 and per-client r=3", w.Code, w.Header().Values("RateLimit"))
	}
}

// TestSharedPolicyHasItsQuotas: the RateLimit-Policy of a Shared limit
// includes the limits of pace.WithLimit, so a client sees the hourly quota,
// named after the limit and its position; a limit name that clashes with
// one is refused.
func TestSharedPolicyHasItsQuotas(t *testing.T) {
	st := memory.New()
	p, err := pace.NewShared(st, 20, pace.WithQuota(1000, time.Hour), pace.WithQuota(5000, 24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	m := mustNew(t, []httplimit.Limit{httplimit.Shared(p, httplimit.ClientIP(), httplimit.Name("api"))})
	w := serve(m.Wrap(ok), from("192.0.2.1"))
	pol := itemsOf(t, w, "RateLimit-Policy")
	for name, qw := range map[string][2]int64{"api": {20, 1}, "api/1": {1000, 3600}, "api/2": {5000, 86400}} {
		it, ok := pol[name]
		if !ok || it.intParam(t, "q") != qw[0] || it.intParam(t, "w") != qw[1] {
			t.Errorf("RateLimit-Policy %q: %s want q=%d;w=%d", w.Header().Values("RateLimit-Policy"), name, qw[0], qw[1])
		}
	}
	if _, err := httplimit.New([]httplimit.Limit{
		httplimit.Shared(p, httplimit.ClientIP(), httplimit.Name("api")),
		httplimit.Pace(newPace(t, 1, newClock()), httplimit.ClientIP(), httplimit.Name("api/1")),
	}); err == nil {
		t.Error("New accepted a limit named as a quota of a Shared limit")
	}
}

// TestGivenBackReportsNextRequest: a response whose event was given back
// (ReturnOn 401, or Return in the handler) reports in RateLimit what the
// next request will see, the event given back included, for every kind
// that can give back.
func TestGivenBackReportsNextRequest(t *testing.T) {
	for _, kind := range []string{"pace", "shared", "bucket"} {
		t.Run(kind, func(t *testing.T) {
			clk := newClock()
			st := memory.New(memory.WithClock(clk.Now))
			lim := kindOf(t, kind, 3, st, clk, "per-client", "X-Client", httplimit.ReturnOn(http.StatusUnauthorized))
			if kind == "bucket" {
				lim = httplimit.Bucket(st, 3, 3, httplimit.Header("X-Client"), httplimit.Name("per-client"), httplimit.ReturnOn(http.StatusUnauthorized))
			}
			m := mustNew(t, []httplimit.Limit{lim})
			h := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch r.URL.Path {
				case "/bad":
					w.WriteHeader(http.StatusUnauthorized)
				case "/return":
					httplimit.Return(r)
					w.Write([]byte("not counted"))
				default:
					w.Write([]byte("ok"))
				}
			}))
			send := func(path string) int64 {
				r := httptest.NewRequest(http.MethodGet, path, nil)
				r.Header.Set("X-Client", "c")
				w := serve(h, r)
				return itemsOf(t, w, "RateLimit")["per-client"].intParam(t, "r")
			}
			for _, step := range []struct {
				path string
				want int64
			}{{"/", 2}, {"/bad", 2}, {"/return", 2}, {"/", 1}, {"/bad", 1}} {
				if got := send(step.path); got != step.want {
					t.Fatalf("%s: r=%d; want %d, what the next request sees", step.path, got, step.want)
				}
			}
		})
	}
}
