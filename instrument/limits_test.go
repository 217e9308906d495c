package instrument_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/driver"
	"github.com/ratepace/pace/httplimit"
	"github.com/ratepace/pace/instrument"
	"github.com/ratepace/pace/internal/fakeclock"
)

// TestMiddleware counts every outcome of a Middleware's decisions, per limit
// name, with every series present from registration.
func TestMiddleware(t *testing.T) {
	reg := newCapture()
	clock := fakeclock.New(time.Unix(1_000_000, 0))
	perIP, err := pace.New(3, pace.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	perClient, err := pace.New(1, pace.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	m, err := httplimit.New([]httplimit.Limit{
		httplimit.Pace(perIP, httplimit.ClientIP(), httplimit.Name("per-ip")),
		httplimit.Pace(perClient, httplimit.Header("X-Client"), httplimit.Name("per-client"), httplimit.ReturnOn(http.StatusUnauthorized)),
		httplimit.Bucket(prefixedStore{}, 10, 1, httplimit.Header("X-Bucket"), httplimit.Name("bucket")),
	}, instrument.Middleware(reg))
	if err != nil {
		t.Fatal(err)
	}
	c := reg.one(t)
	zero := `
# HELP pace_limit_decisions_total Decisions of the rate limits of httplimit (or grpclimit), by limit name and outcome: admitted, refused, returned, key_error, store_error.
# TYPE pace_limit_decisions_total counter
`
	for _, name := range []string{"bucket", "per-client", "per-ip"} {
		for _, o := range []string{"admitted", "key_error", "refused", "returned", "store_error"} {
			zero += `pace_limit_decisions_total{limit="` + name + `",outcome="` + o + `"} 0` + "\n"
		}
	}
	if err := testutil.CollectAndCompare(c, strings.NewReader(zero)); err != nil {
		t.Fatalf("before any request: %v", err)
	}

	h := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Secret") != "right" {
			w.WriteHeader(http.StatusUnauthorized)
		}
	}))
	send := func(client, secret, bucket string) int {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "192.0.2.1:1"
		if client != "" {
			r.Header.Set("X-Client", client)
		}
		r.Header.Set("X-Secret", secret)
		r.Header.Set("X-Bucket", bucket)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	for _, step := range []struct {
		client, secret, bucket string
		want                   int
	}{
		{"a", "right", "ok", 200},   // all three admitted
		{"a", "right", "ok", 429},   // per-client refused: per-ip returned
		{"b", "wrong", "ok", 401},   // per-client returned by ReturnOn
		{"", "right", "ok", 400},    // per-client key error: per-ip returned
		{"c", "right", "fail", 503}, // bucket store error: per-ip, per-client returned
		{"d", "right", "reject", 429},
	} {
		if got := send(step.client, step.secret, step.bucket); got != step.want {
			t.Fatalf("%+v: %d", step, got)
		}
	}
	want := strings.NewReplacer(
		`{limit="per-ip",outcome="admitted"} 0`, `{limit="per-ip",outcome="admitted"} 6`,
		`{limit="per-ip",outcome="returned"} 0`, `{limit="per-ip",outcome="returned"} 4`,
		`{limit="per-client",outcome="admitted"} 0`, `{limit="per-client",outcome="admitted"} 4`,
		`{limit="per-client",outcome="refused"} 0`, `{limit="per-client",outcome="refused"} 1`,
		`{limit="per-client",outcome="returned"} 0`, `{limit="per-client",outcome="returned"} 3`,
		`{limit="per-client",outcome="key_error"} 0`, `{limit="per-client",outcome="key_error"} 1`,
		`{limit="bucket",outcome="admitted"} 0`, `{limit="bucket",outcome="admitted"} 2`,
		`{limit="bucket",outcome="store_error"} 0`, `{limit="bucket",outcome="store_error"} 1`,
		`{limit="bucket",outcome="refused"} 0`, `{limit="bucket",outcome="refused"} 1`,
	).Replace(zero)
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	lint(t, c)
	// No label holds a key or a client id.
	eachLabel(t, reg, func(metric, name, value string) {
		if value == "a" || value == "192.0.2.1" || strings.Contains(value, "ok") {
			t.Errorf("%s: label %s=%q holds a key", metric, name, value)
		}
	})
}

// lint fails the test for every problem testutil.CollectAndLint finds in
// c's metrics.
func lint(t *testing.T, c prometheus.Collector) {
	t.Helper()
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, pr := range problems {
		t.Errorf("lint: %s: %s", pr.Metric, pr.Text)
	}
}

// eachLabel calls f with every label of every series g gathers.
func eachLabel(t *testing.T, g prometheus.Gatherer, f func(metric, name, value string)) {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				f(mf.GetName(), l.GetName(), l.GetValue())
			}
		}
	}
}

// prefixedStore is fakeStore reading the key httplimit prefixes ("fail",
// "reject") after the last colon.
type prefixedStore struct{ fakeStore }

func (s prefixedStore) TokenBucket(ctx context.Context, key string, capacity, refillPerSec, cost float64) (bool, time.Duration, error) {
	return s.fakeStore.TokenBucket(ctx, key[strings.LastIndexByte(key, ':')+1:], capacity, refillPerSec, cost)
}

func (s prefixedStore) Take(ctx context.Context, key string, shapes []driver.Shape) (driver.Grant, error) {
	return s.fakeStore.Take(ctx, key[strings.LastIndexByte(key, ':')+1:], shapes)
}

func (s prefixedStore) Refund(ctx context.Context, key string, shapes []driver.Shape, r driver.Receipt) error {
	return s.fakeStore.Refund(ctx, key[strings.LastIndexByte(key, ':')+1:], shapes, r)
}

func TestMiddlewareRegistration(t *testing.T) {
	p, err := pace.New(1)
	if err != nil {
		t.Fatal(err)
	}
	limits := []httplimit.Limit{httplimit.Pace(p, httplimit.ClientIP())}
	if m, err := httplimit.New(limits, instrument.Middleware(nil)); m != nil || !errors.Is(err, pace.ErrInvalidArgument) {
		t.Fatalf("nil registerer: %v, %v", m, err)
	}
	reg := prometheus.NewRegistry()
	route := func(name string) prometheus.Registerer {
		return prometheus.WrapRegistererWith(prometheus.Labels{"route": name}, reg)
	}
	if _, err := httplimit.New(limits, instrument.Middleware(route("token"))); err != nil {
		t.Fatal(err)
	}
	var already prometheus.AlreadyRegisteredError
	if m, err := httplimit.New(limits, instrument.Middleware(route("token"))); m != nil || !errors.As(err, &already) {
		t.Fatalf("second Middleware with the same labels: %v, %v; want AlreadyRegisteredError", m, err)
	}
	if _, err := httplimit.New(limits, instrument.Middleware(route("api"))); err != nil {
		t.Fatalf("with a distinguishing label: %v", err)
	}
	// An invalid configuration registers nothing.
	reg = prometheus.NewRegistry()
	if _, err := httplimit.New([]httplimit.Limit{httplimit.Pace(nil, httplimit.ClientIP())}, instrument.Middleware(reg)); err == nil {
		t.Fatal("nil pace accepted")
	}
	if mfs, _ := reg.Gather(); len(mfs) != 0 {
		t.Fatalf("a failed New registered %d metrics", len(mfs))
	}
}

// TestMiddlewareTwoMiddlewaresOneRegistry: two middlewares count on one
// registry, their limits told apart by name (the second
// registration failed with Prometheus's duplicate-collector error).
func TestMiddlewareTwoMiddlewaresOneRegistry(t *testing.T) {
	reg := newCapture()
	clock := fakeclock.New(time.Unix(1_000_000, 0))
	newMiddleware := func(name string) http.Handler {
		t.Helper()
		p, err := pace.New(1, pace.WithClock(clock.Now))
		if err != nil {
			t.Fatal(err)
		}
		m, err := httplimit.New([]httplimit.Limit{httplimit.Pace(p, httplimit.ClientIP(), httplimit.Name(name))}, instrument.Middleware(reg))
		if err != nil {
			t.Fatalf("middleware with limit %q on the shared registry: %v", name, err)
		}
		return m.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	}
	api, login := newMiddleware("api"), newMiddleware("login")
	serve := func(h http.Handler) {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "192.0.2.1:1234"
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	serve(api)
	serve(login)
	serve(login) // refused: one a second
	if len(reg.got) != 2 {
		t.Fatalf("%d collectors registered; want 2", len(reg.got))
	}
	series := func(name string, admitted, refused int) string {
		s := ""
		for _, o := range []struct {
			name string
			n    int
		}{{"admitted", admitted}, {"key_error", 0}, {"refused", refused}, {"returned", 0}, {"store_error", 0}} {
			s += fmt.Sprintf("pace_limit_decisions_total{limit=%q,outcome=%q} %d\n", name, o.name, o.n)
		}
		return s
	}
	header := `
# HELP pace_limit_decisions_total Decisions of the rate limits of httplimit (or grpclimit), by limit name and outcome: admitted, refused, returned, key_error, store_error.
# TYPE pace_limit_decisions_total counter
`
	for i, want := range []string{series("api", 1, 0), series("login", 1, 1)} {
		if err := testutil.CollectAndCompare(reg.got[i], strings.NewReader(header+want)); err != nil {
			t.Errorf("middleware %d: %v", i, err)
		}
		lint(t, reg.got[i])
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(header+series("api", 1, 0)+series("login", 1, 1))); err != nil {
		t.Errorf("the registry: %v", err)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint of the registry: %v, %v", problems, err)
	}
}

// TestMiddlewareSameNameTwice: a limit name counted twice on one registry (two
// middlewares with the default name "pace-0") is an error wrapping
// pace.ErrInvalidArgument that names the limit and says what to do, and
// the second middleware registers nothing.
func TestMiddlewareSameNameTwice(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	limits := func() []httplimit.Limit {
		p, err := pace.New(1)
		if err != nil {
			t.Fatal(err)
		}
		return []httplimit.Limit{httplimit.Pace(p, httplimit.ClientIP())}
	}
	if _, err := httplimit.New(limits(), instrument.Middleware(reg)); err != nil {
		t.Fatal(err)
	}
	m, err := httplimit.New(limits(), instrument.Middleware(reg))
	if m != nil || !errors.Is(err, pace.ErrInvalidArgument) || !errors.As(err, new(prometheus.AlreadyRegisteredError)) {
		t.Fatalf("second middleware with limit pace-0 = %v, %v; want nil, an error wrapping ErrInvalidArgument and AlreadyRegisteredError", m, err)
	}
	checkMessage(t, err, `"pace-0"`, "httplimit.Name", "WrapRegistererWith")
	if n, err := testutil.GatherAndCount(reg); n != 5 || err != nil {
		t.Errorf("after the failed registration: %d series, %v; want the first middleware's 5", n, err)
	}
	// A middleware counted under a label beside one counted without: the
	// registry refuses differing label names; the error says the same.
	labelled := prometheus.WrapRegistererWith(prometheus.Labels{"route": "token"}, reg)
	if m, err := httplimit.New(limits(), instrument.Middleware(labelled)); m != nil || !errors.Is(err, pace.ErrInvalidArgument) {
		t.Fatalf("a labelled middleware beside an unlabelled one = %v, %v; want nil, an error wrapping ErrInvalidArgument", m, err)
	} else {
		checkMessage(t, err, `"pace-0"`, "WrapRegistererWith")
	}
}

// checkMessage fails unless err's text starts with the package name, is
// ASCII and contains every one of wants.
func checkMessage(t *testing.T, err error, wants ...string) {
	t.Helper()
	msg := err.Error()
	if !strings.HasPrefix(msg, "instrument: ") {
		t.Errorf("error %q does not start with the package name", msg)
	}
	for _, r := range msg {
		if r > 127 {
			t.Errorf("error %q is not ASCII", msg)
			break
		}
	}
	for _, w := range wants {
		if !strings.Contains(msg, w) {
			t.Errorf("error %q does not say %s", msg, w)
		}
	}
}
