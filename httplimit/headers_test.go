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

// limitOf returns the RateLimit item and the RateLimit-Policy item named
// name in w's headers, parsed by the independent parser.
func limitOf(t *testing.T, w *httptest.ResponseRecorder, name string) (rl, policy *sfItem) {
	t.Helper()
	find := func(field string) *sfItem {
		lines := w.Header().Values(field)
		if len(lines) == 0 {
			return nil
		}
		items, err := parseSFList(lines)
		if err != nil {
			t.Fatalf("%s %q: %v", field, lines, err)
		}
		for i := range items {
			if s, ok := items[i].value.(string); !ok {
				t.Fatalf("%s item %#v is not a String", field, items[i].value)
			} else if s == name {
				return &items[i]
			}
		}
		return nil
	}
	return find("RateLimit"), find("RateLimit-Policy")
}

// TestHeadersAgreeWithDecisions: the RateLimit-Policy and RateLimit
// fields, read by an independent parser, say what the middleware decides,
// and waiting Retry-After seconds admits (one second less does not).
func TestHeadersAgreeWithDecisions(t *testing.T) {
	for _, c := range []struct {
		perSecond float64
		q, w      int64
	}{
		{5, 5, 1},
		{3, 3, 1},
		{2.5, 2, 1},
		{1, 1, 1},
		{0.3, 1, 4}, // one event every 3.34 s
		{0.2, 1, 5},
		{100, 100, 1},
		{1000, 1000, 1}, // above the precomputed fields
		{3000, 3000, 1}, // r cached near full and near empty, made between
	} {
		clk := newClock()
		p := newPace(t, c.perSecond, clk)
		m := mustNew(t, []httplimit.Limit{httplimit.Pace(p, httplimit.ClientIP(), httplimit.Name("per-ip"))})
		h := m.Wrap(ok)
		admitted := 0
		for round := range 3 {
			// Drain the bucket, reading r at every admission.
			var w *httptest.ResponseRecorder
			for {
				w = serve(h, from("192.0.2.1"))
				rl, policy := limitOf(t, w, "per-ip")
				if policy == nil || policy.intParam(t, "q") != c.q || policy.intParam(t, "w") != c.w {
					t.Fatalf("%v/s: RateLimit-Policy %q; want q=%d;w=%d", c.perSecond, w.Header().Values("RateLimit-Policy"), c.q, c.w)
				}
				if rl == nil {
					t.Fatalf("%v/s: no RateLimit item in %q", c.perSecond, w.Header().Values("RateLimit"))
				}
				r, tt := rl.intParam(t, "r"), rl.intParam(t, "t")
				if w.Code != 200 {
					break
				}
				admitted++
				if r < 0 || r >= c.q || tt < 1 || tt > c.w {
					t.Fatalf("%v/s: admitted with r=%d t=%d; want 0 <= r < %d, 1 <= t <= %d", c.perSecond, r, tt, c.q, c.w)
				}
				// r is what is left: exactly r more fit now.
				if round == 0 && int64(admitted) != c.q-r {
					t.Fatalf("%v/s: admission %d says r=%d; want %d", c.perSecond, admitted, r, c.q-int64(admitted))
				}
			}
			if w.Code != http.StatusTooManyRequests {
				t.Fatalf("%v/s: %d", c.perSecond, w.Code)
			}
			retry, err := strconv.Atoi(w.Header().Get("Retry-After"))
			if err != nil || retry < 1 {
				t.Fatalf("%v/s: Retry-After %q", c.perSecond, w.Header().Get("Retry-After"))
			}
			rl, _ := limitOf(t, w, "per-ip")
			if rl.intParam(t, "r") != 0 || rl.intParam(t, "t") != int64(retry) {
				t.Fatalf("%v/s: refused with RateLimit %q, Retry-After %d; want r=0;t=%d", c.perSecond, w.Header().Values("RateLimit"), retry, retry)
			}
			if p := problemOf(t, w); p["violated-policies"].([]any)[0] != "per-ip" || p["type"] != "https://iana.org/assignments/http-problem-types#quota-exceeded" {
				t.Fatalf("problem details %v", p)
			}
			// One second short of Retry-After is too early when the wait is
			// over a second; Retry-After itself admits.
			if retry > 1 {
				clk.Advance(time.Duration(retry-1) * time.Second)
				if w := serve(h, from("192.0.2.1")); w.Code != 429 {
					t.Fatalf("%v/s: admitted %d s into a Retry-After of %d", c.perSecond, retry-1, retry)
				}
				clk.Advance(time.Second)
			} else {
				clk.Advance(time.Second)
			}
		}
	}
}

// TestHeadersSeveralLimits: one item per quota limit in each field, in the
// order given; a Bucket's r is what the Store reports left; Slots send
// neither; a refusal reports the refusing limit.
func TestHeadersSeveralLimits(t *testing.T) {
	clk := newClock()
	s := memory.New(memory.WithClock(clk.Now))
	fast, slow := newPace(t, 10, clk), newPace(t, 2, clk)
	m := mustNew(t, []httplimit.Limit{
		httplimit.Bucket(s, 100, 10, httplimit.ClientIP(), httplimit.Name("per-ip")),
		httplimit.Pace(fast, httplimit.ClientIP(), httplimit.Name(`fast "q"`)),
		httplimit.Slots(s, 4, time.Minute, httplimit.ClientIP(), httplimit.Name("conns")),
		httplimit.Pace(slow, httplimit.Header("X-Client"), httplimit.Name("slow")),
	}, httplimit.LegacyHeaders())
	h := m.Wrap(ok)
	send := func() *httptest.ResponseRecorder {
		r := from("192.0.2.1")
		r.Header.Set("X-Client", "a")
		return serve(h, r)
	}
	w := send()
	policies, err := parseSFList(w.Header().Values("RateLimit-Policy"))
	if err != nil {
		t.Fatal(err)
	}
	if len(policies) != 3 || policies[0].value != "per-ip" || policies[1].value != `fast "q"` || policies[2].value != "slow" {
		t.Fatalf("RateLimit-Policy %q", w.Header().Values("RateLimit-Policy"))
	}
	if policies[0].intParam(t, "q") != 100 || policies[0].intParam(t, "w") != 10 {
		t.Fatalf("bucket policy %q; want q=100;w=10", w.Header().Values("RateLimit-Policy"))
	}
	rls, err := parseSFList(w.Header().Values("RateLimit"))
	if err != nil {
		t.Fatal(err)
	}
	if len(rls) != 3 || rls[0].value != "per-ip" || rls[0].intParam(t, "r") != 99 || rls[0].intParam(t, "t") != 1 ||
		rls[1].value != `fast "q"` || rls[1].intParam(t, "r") != 9 || rls[2].value != "slow" || rls[2].intParam(t, "r") != 1 {
		t.Fatalf("RateLimit %q", w.Header().Values("RateLimit"))
	}
	if w.Header().Get("X-RateLimit-Limit") != "2" || w.Header().Get("X-RateLimit-Remaining") != "1" || w.Header().Get("X-RateLimit-Reset") != "1" {
		t.Fatalf("legacy headers %v: want the slow limit's", w.Header())
	}
	send()
	w = send()
	if w.Code != 429 {
		t.Fatalf("third request: %d", w.Code)
	}
	rls, err = parseSFList(w.Header().Values("RateLimit"))
	if err != nil || len(rls) != 1 || rls[0].value != "slow" || rls[0].intParam(t, "r") != 0 {
		t.Fatalf("refusal's RateLimit %q, %v", w.Header().Values("RateLimit"), err)
	}
	if w.Header().Get("X-RateLimit-Remaining") != "0" || w.Header().Get("X-RateLimit-Reset") != w.Header().Get("Retry-After") {
		t.Fatalf("legacy headers on a refusal: %v", w.Header())
	}

	// Slots alone: no rate-limit fields at all.
	only := mustNew(t, []httplimit.Limit{httplimit.Slots(s, 4, time.Minute, httplimit.ClientIP())})
	if w := serve(only.Wrap(ok), from("192.0.2.9")); w.Header().Get("RateLimit-Policy") != "" || w.Header().Get("RateLimit") != "" {
		t.Fatalf("Slots sent %v", w.Header())
	}
}

// TestLegacyHeadersAfterVerified: the X-RateLimit-* fields of a
// DecideAfterVerify limit come with the event Verified takes.
func TestLegacyHeadersAfterVerified(t *testing.T) {
	p := newPace(t, 2, newClock())
	m := mustNew(t, []httplimit.Limit{
		httplimit.Pace(p, httplimit.ClientIP(), httplimit.Name("v"), httplimit.DecideAfterVerify()),
	}, httplimit.LegacyHeaders())
	w := serve(m.Wrap(tokenHandler(nil, true)), tokenRequest("192.0.2.1", "id", "right"))
	if w.Code != 200 {
		t.Fatalf("status %d; want 200", w.Code)
	}
	if w.Header().Get("X-RateLimit-Limit") != "2" || w.Header().Get("X-RateLimit-Remaining") != "1" || w.Header().Get("X-RateLimit-Reset") != "1" {
		t.Fatalf("legacy headers %v: want the verified limit's", w.Header())
	}
}
