package httplimit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/driver"
	"github.com/ratepace/pace/httplimit"
	"github.com/ratepace/pace/memory"
)

func TestNewRejects(t *testing.T) {
	clk := newClock()
	p := newPace(t, 5, clk)
	s := memory.New()
	ip := httplimit.ClientIP()
	for _, c := range []struct {
		name   string
		limits []httplimit.Limit
		opts   []httplimit.Option
	}{
		{"no limits", nil, nil},
		{"zero Limit", []httplimit.Limit{{}}, nil},
		{"nil key", []httplimit.Limit{httplimit.Pace(p, nil)}, nil},
		{"nil pace", []httplimit.Limit{httplimit.Pace(nil, ip)}, nil},
		{"nil store", []httplimit.Limit{httplimit.Bucket(nil, 10, 1, ip)}, nil},
		{"bucket capacity below one", []httplimit.Limit{httplimit.Bucket(s, 0.5, 1, ip)}, nil},
		{"bucket NaN refill", []httplimit.Limit{httplimit.Bucket(s, 10, nanF(), ip)}, nil},
		{"ReturnOn on Slots", []httplimit.Limit{httplimit.Slots(s, 2, time.Minute, ip, httplimit.ReturnOn(401))}, nil},
		{"ReturnOn 600", []httplimit.Limit{httplimit.Pace(p, ip, httplimit.ReturnOn(600))}, nil},
		{"ReturnOn 99", []httplimit.Limit{httplimit.Pace(p, ip, httplimit.ReturnOn(99))}, nil},
		{"DecideAfterVerify on a Bucket", []httplimit.Limit{httplimit.Bucket(s, 10, 1, ip, httplimit.DecideAfterVerify())}, nil},
		{"slots limit 0", []httplimit.Limit{httplimit.Slots(s, 0, time.Minute, ip)}, nil},
		{"slots ttl 0", []httplimit.Limit{httplimit.Slots(s, 1, 0, ip)}, nil},
		{"slots ttl below 1 ms", []httplimit.Limit{httplimit.Slots(s, 1, time.Millisecond-1, ip)}, nil}, // refreshed every ttl/3: 0 at 2 ns
		{"nil store slots", []httplimit.Limit{httplimit.Slots(nil, 1, time.Minute, ip)}, nil},
		{"empty name", []httplimit.Limit{httplimit.Pace(p, ip, httplimit.Name(""))}, nil},
		{"long name", []httplimit.Limit{httplimit.Pace(p, ip, httplimit.Name(strings.Repeat("n", 65)))}, nil},
		{"non-ASCII name", []httplimit.Limit{httplimit.Pace(p, ip, httplimit.Name("pâce"))}, nil},
		{"duplicate names", []httplimit.Limit{httplimit.Pace(p, ip, httplimit.Name("a")), httplimit.Pace(p, ip, httplimit.Name("a"))}, nil},
		{"default name taken", []httplimit.Limit{httplimit.Pace(p, ip), httplimit.Pace(p, ip, httplimit.Name("pace-0"))}, nil},
	} {
		if m, err := httplimit.New(c.limits, c.opts...); !errors.Is(err, pace.ErrInvalidArgument) || m != nil {
			t.Errorf("%s: New = %v, %v; want nil and ErrInvalidArgument", c.name, m, err)
		} else if !strings.HasPrefix(err.Error(), "httplimit: ") {
			t.Errorf("%s: error %q does not name the package", c.name, err)
		}
	}
	errObs := errors.New("observer: no")
	_, err := httplimit.New([]httplimit.Limit{httplimit.Pace(p, ip)}, httplimit.WithObserver(func([]string) (httplimit.Observer, error) { return nil, errObs }))
	if !errors.Is(err, errObs) {
		t.Errorf("New with a failing observer: %v; want its error", err)
	}
	mustNew(t, []httplimit.Limit{httplimit.Slots(s, 1, time.Millisecond, ip)}) // the shortest ttl
	m := mustNew(t, []httplimit.Limit{httplimit.Pace(p, ip), httplimit.Bucket(s, 10, 1, ip), httplimit.Slots(s, 1, time.Minute, ip, httplimit.Name("conns"))})
	if got := strings.Join(m.Names(), ","); got != "pace-0,bucket-1,conns" {
		t.Errorf("Names = %s", got)
	}
}

func nanF() float64 { var z float64; return z / z }

// TestAllOrNothing: a request refused by a later limit spends nothing of the
// earlier ones.
func TestAllOrNothing(t *testing.T) {
	clk := newClock()
	perIP, perClient := newPace(t, 3, clk), newPace(t, 1, clk)
	var c counter
	m := mustNew(t, []httplimit.Limit{
		httplimit.Pace(perIP, httplimit.ClientIP(), httplimit.Name("per-ip")),
		httplimit.Pace(perClient, httplimit.Header("X-Client"), httplimit.Name("per-client")),
	}, c.Option())
	h := m.Wrap(ok)
	send := func(client string) *httptest.ResponseRecorder {
		r := from("192.0.2.1")
		r.Header.Set("X-Client", client)
		return serve(h, r)
	}
	if w := send("a"); w.Code != 200 {
		t.Fatalf("first request: %d", w.Code)
	}
	for range 10 {
		if w := send("a"); w.Code != http.StatusTooManyRequests {
			t.Fatalf("client a over its pace: %d; want 429", w.Code)
		}
	}
	// Had the ten refusals spent the per-IP pace (3), b would be refused.
	w := send("b")
	if w.Code != 200 {
		t.Fatalf("client b from the same address: %d; want 200 (the refusals spent the per-IP pace)", w.Code)
	}
	items, err := parseSFList(w.Header().Values("RateLimit"))
	if err != nil {
		t.Fatal(err)
	}
	if items[0].value != "per-ip" || items[0].intParam(t, "r") != 1 {
		t.Fatalf("RateLimit %q: want per-ip with r=1 (two taken of three)", w.Header().Values("RateLimit"))
	}
	if got, want := c.Get("per-ip", httplimit.Admitted)-c.Get("per-ip", httplimit.Returned), 2; got != want {
		t.Errorf("per-ip spent %d; want %d", got, want)
	}
	if got := c.Get("per-client", httplimit.Refused); got != 10 {
		t.Errorf("per-client refused %d; want 10", got)
	}
}

// TestReturnOn: with ReturnOn(401), a forger presenting a client's id with
// wrong secrets spends nothing of its pace; without it, it spends it all.
func TestReturnOn(t *testing.T) {
	for _, returnOn := range []bool{true, false} {
		clk := newClock()
		p := newPace(t, 2, clk)
		var opts []httplimit.Option
		if returnOn {
			opts = append(opts, httplimit.ReturnOn(http.StatusUnauthorized))
		}
		var c counter
		m := mustNew(t, []httplimit.Limit{httplimit.Pace(p, httplimit.ClientID(), opts...)}, c.Option())
		h := m.Wrap(tokenHandler(nil, false))
		for range 20 {
			w := serve(h, tokenRequest("198.51.100.9", "app-1", "wrong"))
			if returnOn && w.Code != 401 {
				t.Fatalf("forged with ReturnOn: %d; want 401 every time", w.Code)
			}
		}
		w := serve(h, tokenRequest("192.0.2.1", "app-1", "right"))
		if returnOn != (w.Code == 200) {
			t.Fatalf("ReturnOn %v: the honest client got %d", returnOn, w.Code)
		}
		if returnOn && (c.Get("pace-0", httplimit.Returned) != 20 || p.Len() != 1) {
			t.Errorf("returned %d, rows %d; want 20 and 1", c.Get("pace-0", httplimit.Returned), p.Len())
		}
	}
}

// TestReturn: Return gives back from inside the handler, with or without
// ReturnOn, through nested middlewares, and only once.
func TestReturn(t *testing.T) {
	clk := newClock()
	outer, inner := newPace(t, 1, clk), newPace(t, 1, clk)
	var c counter
	mo := mustNew(t, []httplimit.Limit{httplimit.Pace(outer, httplimit.ClientIP(), httplimit.Name("outer"))}, c.Option())
	mi := mustNew(t, []httplimit.Limit{httplimit.Pace(inner, httplimit.ClientIP(), httplimit.Name("inner"))})
	h := mo.Wrap(mi.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		httplimit.Return(r)
		httplimit.Return(r)
		w.WriteHeader(http.StatusNoContent)
	})))
	for i := range 5 {
		if w := serve(h, from("192.0.2.1")); w.Code != http.StatusNoContent {
			t.Fatalf("request %d: %d; want 204 (each one returned)", i, w.Code)
		}
	}
	if outer.Len() != 0 || inner.Len() != 0 {
		t.Fatalf("rows %d and %d; want none", outer.Len(), inner.Len())
	}
	if got := c.Get("outer", httplimit.Returned); got != 5 {
		t.Fatalf("outer returned %d; want 5", got)
	}
	httplimit.Return(from("192.0.2.1")) // outside a middleware: nothing to do
}

// TestStoreErrors: a store error answers 503 without revealing it; under
// pace.WithFailurePolicy the policy decides instead.
func TestStoreErrors(t *testing.T) {
	var c counter
	m := mustNew(t, []httplimit.Limit{httplimit.Bucket(downStore{}, 10, 1, httplimit.ClientIP(), httplimit.Name("b"))}, c.Option())
	w := serve(m.Wrap(ok), from("192.0.2.1"))
	if w.Code != http.StatusServiceUnavailable || strings.Contains(w.Body.String(), "refused") {
		t.Fatalf("dead store: %d %q; want 503 without the error", w.Code, w.Body)
	}
	problemOf(t, w)
	if c.Get("b", httplimit.StoreFailed) != 1 {
		t.Fatal("store error not counted")
	}

	open, err := pace.WithFailurePolicy(downStore{}, pace.FailOpen, 0)
	if err != nil {
		t.Fatal(err)
	}
	closed, err := pace.WithFailurePolicy(downStore{}, pace.FailClosed, 0, pace.ProbeInterval(2500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if w := serve(mustNew(t, []httplimit.Limit{httplimit.Bucket(open.(driver.Taker), 10, 1, httplimit.ClientIP())}).Wrap(ok), from("192.0.2.1")); w.Code != 200 {
		t.Fatalf("fail-open: %d", w.Code)
	}
	w = serve(mustNew(t, []httplimit.Limit{httplimit.Slots(closed, 2, time.Minute, httplimit.ClientIP())}).Wrap(ok), from("192.0.2.1"))
	if w.Code != 429 || w.Header().Get("Retry-After") != "1" {
		t.Fatalf("fail-closed slots: %d, Retry-After %q", w.Code, w.Header().Get("Retry-After"))
	}
	w = serve(mustNew(t, []httplimit.Limit{httplimit.Bucket(closed.(driver.Taker), 10, 1, httplimit.ClientIP())}).Wrap(ok), from("192.0.2.1"))
	if w.Code != 429 || w.Header().Get("Retry-After") != "3" {
		t.Fatalf("fail-closed bucket: %d, Retry-After %q; want 429, 3", w.Code, w.Header().Get("Retry-After"))
	}

	// A store error on a later limit gives back the earlier ones.
	clk := newClock()
	p := newPace(t, 1, clk)
	m = mustNew(t, []httplimit.Limit{httplimit.Pace(p, httplimit.ClientIP()), httplimit.Slots(downStore{}, 1, time.Minute, httplimit.ClientIP())})
	for range 3 {
		if w := serve(m.Wrap(ok), from("192.0.2.1")); w.Code != 503 {
			t.Fatalf("dead slots store: %d", w.Code)
		}
	}
	if p.Len() != 0 {
		t.Fatalf("the pace kept %d rows after store errors", p.Len())
	}
}

// TestBadInputs: every bad input gets a clear error, and spends nothing of
// any key, its own or others'.
func TestBadInputs(t *testing.T) {
	clk := newClock()
	perIP, perClient := newPace(t, 5, clk), newPace(t, 5, clk)
	trusted, err := httplimit.ClientIPWith(httplimit.TrustProxies(proxies...))
	if err != nil {
		t.Fatal(err)
	}
	var c counter
	m := mustNew(t, []httplimit.Limit{
		httplimit.Pace(perIP, trusted, httplimit.Name("per-ip")),
		httplimit.Pace(perClient, httplimit.ClientID(), httplimit.Name("per-client")),
	}, c.Option())
	h := m.Wrap(tokenHandler(nil, false))
	viaProxy := func(r *http.Request, lines ...string) *http.Request {
		r.RemoteAddr = "10.0.0.1:80"
		for _, l := range lines {
			name, value, _ := strings.Cut(l, ": ")
			r.Header.Add(name, value)
		}
		return r
	}
	for _, c := range []struct {
		name   string
		r      *http.Request
		status int
	}{
		{"empty client id", tokenRequest("192.0.2.1", "", "right"), 400},
		{"1 MB client id", tokenRequest("192.0.2.1", strings.Repeat("a", 1<<20), "right"), 413},
		{"1 MB forwarding header", viaProxy(tokenRequest("0.0.0.0", "app-1", "right"), "X-Forwarded-For: "+strings.Repeat("1.1.1.1,", 1<<17)+realClient), 400},
		{"malformed Forwarded", viaProxy(tokenRequest("0.0.0.0", "app-1", "right"), `Forwarded: for="`+realClient), 400},
		{"unknown Forwarded", viaProxy(tokenRequest("0.0.0.0", "app-1", "right"), `Forwarded: for=unknown`), 400},
		{"body over the bound", tokenRequest("192.0.2.1", "app-1&pad="+strings.Repeat("p", 70<<10), "right"), 413},
		{"no body", from("192.0.2.1"), 400},
	} {
		w := serve(h, c.r)
		if w.Code != c.status {
			t.Errorf("%s: %d; want %d", c.name, w.Code, c.status)
			continue
		}
		p := problemOf(t, w)
		if d, _ := p["detail"].(string); !strings.HasPrefix(d, "httplimit: ") || strings.Contains(d, "aaaa") || strings.Contains(d, realClient) {
			t.Errorf("%s: detail %q; want the package's own words", c.name, d)
		}
		if perIP.Len() != 0 || perClient.Len() != 0 {
			t.Fatalf("%s: rows %d and %d left behind; want none", c.name, perIP.Len(), perClient.Len())
		}
	}
	if got := c.Get("per-client", httplimit.KeyFailed) + c.Get("per-ip", httplimit.KeyFailed); got != 7 {
		t.Errorf("key errors counted: %d; want 7", got)
	}
	// Other keys have their whole pace.
	w := serve(h, tokenRequest("192.0.2.1", "app-1", "right"))
	items, err := parseSFList(w.Header().Values("RateLimit"))
	if err != nil || w.Code != 200 || len(items) != 2 || items[0].intParam(t, "r") != 4 || items[1].intParam(t, "r") != 4 {
		t.Fatalf("a good request after the bad ones: %d %q %v", w.Code, w.Header().Values("RateLimit"), err)
	}
}

// TestKeyErrorHandler: OnKeyError replaces the answer; a KeyError of a
// KeyFunc of one's own chooses the default status, and a foreign error's
// text is never echoed.
func TestKeyErrorHandler(t *testing.T) {
	p := newPace(t, 5, newClock())
	secret := errors.New("key store says: token abc123 expired")
	own := func(r *http.Request) (string, error) {
		if r.URL.Query().Get("teapot") != "" {
			return "", &httplimit.KeyError{Status: http.StatusTeapot, Reason: "teapot"}
		}
		return "", secret
	}
	m := mustNew(t, []httplimit.Limit{httplimit.Pace(p, own)})
	w := serve(m.Wrap(ok), from("192.0.2.1"))
	if w.Code != 400 || strings.Contains(w.Body.String(), "abc123") {
		t.Fatalf("foreign key error: %d %q", w.Code, w.Body)
	}
	r := httptest.NewRequest(http.MethodGet, "/?teapot=1", nil)
	if w := serve(m.Wrap(ok), r); w.Code != http.StatusTeapot {
		t.Fatalf("KeyError status: %d", w.Code)
	}
	var got error
	m = mustNew(t, []httplimit.Limit{httplimit.Pace(p, own)}, httplimit.OnKeyError(func(w http.ResponseWriter, r *http.Request, err error) {
		got = err
		w.WriteHeader(http.StatusForbidden)
	}))
	if w := serve(m.Wrap(ok), from("192.0.2.1")); w.Code != 403 || !errors.Is(got, secret) {
		t.Fatalf("OnKeyError: %d, %v", w.Code, got)
	}
}

// TestDryRun: nothing is refused, everything is counted and the headers
// are sent.
func TestDryRun(t *testing.T) {
	clk := newClock()
	p := newPace(t, 1, clk)
	var c counter
	m := mustNew(t, []httplimit.Limit{httplimit.Pace(p, httplimit.Header("X-Client"), httplimit.Name("p"))}, httplimit.DryRun(), c.Option())
	h := m.Wrap(ok)
	for i := range 5 {
		r := from("192.0.2.1")
		r.Header.Set("X-Client", "a")
		w := serve(h, r)
		if w.Code != 200 {
			t.Fatalf("request %d under DryRun: %d", i, w.Code)
		}
		items, err := parseSFList(w.Header().Values("RateLimit"))
		if err != nil || items[0].intParam(t, "r") != 0 {
			t.Fatalf("request %d: RateLimit %q, %v", i, w.Header().Values("RateLimit"), err)
		}
		if w.Header().Get("Retry-After") != "" {
			t.Fatalf("request %d: Retry-After on an admitted response", i)
		}
	}
	if w := serve(h, from("192.0.2.1")); w.Code != 200 {
		t.Fatalf("key error under DryRun: %d", w.Code)
	}
	if c.Get("p", httplimit.Admitted) != 1 || c.Get("p", httplimit.Refused) != 4 || c.Get("p", httplimit.KeyFailed) != 1 {
		t.Fatalf("counts %v", &c)
	}
}

// TestRefusalHandler: OnRefusal writes the answer, the headers already set.
func TestRefusalHandler(t *testing.T) {
	p := newPace(t, 1, newClock())
	var got httplimit.Refusal
	m := mustNew(t, []httplimit.Limit{httplimit.Pace(p, httplimit.ClientIP(), httplimit.Name("ip"))}, httplimit.OnRefusal(func(w http.ResponseWriter, r *http.Request, ref httplimit.Refusal) {
		got = ref
		if w.Header().Get("Retry-After") == "" || w.Header().Get("RateLimit") == "" {
			t.Error("headers not set before OnRefusal")
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	serve(m.Wrap(ok), from("192.0.2.1"))
	if w := serve(m.Wrap(ok), from("192.0.2.1")); w.Code != 503 || got.Limit != "ip" || got.RetryAfter != time.Second {
		t.Fatalf("OnRefusal: %d, %+v", w.Code, got)
	}
}

// TestPanicReleasesSlot: a handler that panics still releases its slot
// and is given back as a 500 for ReturnOn.
func TestPanicReleasesSlot(t *testing.T) {
	clk := newClock()
	s := memory.New(memory.WithClock(clk.Now))
	p := newPace(t, 1, clk)
	m := mustNew(t, []httplimit.Limit{
		httplimit.Slots(s, 1, time.Hour, httplimit.ClientIP()),
		httplimit.Pace(p, httplimit.ClientIP(), httplimit.ReturnOn(500)),
	})
	h := m.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }))
	for i := range 3 {
		func() {
			defer func() {
				if v := recover(); v != http.ErrAbortHandler {
					t.Fatalf("request %d: recovered %v; want the handler's panic", i, v)
				}
			}()
			serve(h, from("192.0.2.1"))
		}()
	}
	ok, cur, err := s.AcquireSlot(context.Background(), "httplimit:slots-0:192.0.2.1", 1, time.Hour)
	if !ok || cur != 1 || err != nil || p.Len() != 0 {
		t.Fatalf("after panics: slot %v %d %v, pace rows %d; want the slot free and the pace returned", ok, cur, err, p.Len())
	}
}

// TestSharedFieldsStayIntact: the middleware shares its header field lines
// between responses; a handler (or an outer middleware) that adds to them
// must not change what other responses carry.
func TestSharedFieldsStayIntact(t *testing.T) {
	p := newPace(t, 2, newClock())
	m := mustNew(t, []httplimit.Limit{httplimit.Pace(p, httplimit.ClientIP(), httplimit.Name("ip"))},
		httplimit.OnRefusal(func(w http.ResponseWriter, r *http.Request, ref httplimit.Refusal) {
			w.Header().Add("Retry-After", "junk")
			w.Header().Add("RateLimit", `"junk";r=9`)
			w.WriteHeader(http.StatusTooManyRequests)
		}))
	h := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("RateLimit-Policy", `"junk";q=1`)
		w.Header().Add("RateLimit", `"junk";r=9`)
	}))
	for i := range 6 {
		for _, addr := range []string{"192.0.2.1", "192.0.2.2"} {
			w := serve(h, from(addr))
			if got := w.Header().Values("RateLimit-Policy"); len(got) != 1+btoi(w.Code == 200) || got[0] != `"ip";q=2;w=1` {
				t.Fatalf("request %d from %s: RateLimit-Policy %q", i, addr, got)
			}
			if got := w.Header().Values("RateLimit"); len(got) != 2 || got[1] != `"junk";r=9` || strings.Contains(got[0], "junk") {
				t.Fatalf("request %d from %s: RateLimit %q", i, addr, got)
			}
			if w.Code == 429 {
				if got := w.Header().Values("Retry-After"); len(got) != 2 || got[0] != "1" {
					t.Fatalf("request %d from %s: Retry-After %q", i, addr, got)
				}
			}
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
