package httplimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/driver"
	"github.com/ratepace/pace/httplimit"
)

// headerCost is a CostFunc reading the estimate from the X-Cost header.
func headerCost(r *http.Request) (int, error) { return strconv.Atoi(r.Header.Get("X-Cost")) }

// costly returns a request from addr whose X-Cost is n.
func costly(addr string, n int) *http.Request {
	r := from(addr)
	r.Header.Set("X-Cost", strconv.Itoa(n))
	return r
}

// settling is a handler that settles at used (none when used < 0) before
// writing "ok", and records Settle's error in errp, if given.
func settling(used int, errp *error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if used >= 0 {
			err := httplimit.Settle(r, used)
			if errp != nil {
				*errp = err
			}
		}
		w.Write([]byte("ok"))
	})
}

// want checks a response's status and RateLimit field (and Retry-After,
// when retry is not "").
func want(t *testing.T, what string, w *httptest.ResponseRecorder, code int, rateLimit, retry string) {
	t.Helper()
	if w.Code != code || w.Header().Get("RateLimit") != rateLimit || w.Header().Get("Retry-After") != retry {
		t.Fatalf("%s: %d, RateLimit %q, Retry-After %q; want %d, %q, %q", what, w.Code,
			w.Header().Values("RateLimit"), w.Header().Get("Retry-After"), code, rateLimit, retry)
	}
}

// TestCostReservesEstimate: a Pace limit with a Cost reserves the estimate
// of each request, and refuses one whose estimate no longer fits, with the
// Retry-After at which it does.
func TestCostReservesEstimate(t *testing.T) {
	clk := newClock()
	m := mustNew(t, []httplimit.Limit{httplimit.Pace(newPace(t, 100, clk), httplimit.ClientIP(), httplimit.Name("tokens"), httplimit.Cost(headerCost))})
	h := m.Wrap(ok)
	for i, r := range []string{"70", "40", "10"} {
		want(t, "request "+strconv.Itoa(i), serve(h, costly("192.0.2.1", 30)), 200, `"tokens";r=`+r+`;t=1`, "")
	}
	// 10 left: 30 fit in 200 ms.
	want(t, "fourth", serve(h, costly("192.0.2.1", 30)), 429, `"tokens";r=0;t=1`, "1")
	clk.Advance(200 * time.Millisecond)
	want(t, "after 200 ms", serve(h, costly("192.0.2.1", 30)), 200, `"tokens";r=0;t=1`, "")
}

// TestSettleBelowGivesBack: settled below the estimate, the rest is given
// back at once, so that a second request of the same estimate fits, which
// it would not without the settlement.
func TestSettleBelowGivesBack(t *testing.T) {
	for _, tc := range []struct {
		used int
		code int
	}{{-1, 429}, {60, 429}, {10, 200}} {
		clk := newClock()
		m := mustNew(t, []httplimit.Limit{httplimit.Pace(newPace(t, 100, clk), httplimit.ClientIP(), httplimit.Name("tokens"), httplimit.Cost(headerCost))})
		h := m.Wrap(settling(tc.used, nil))
		serve(h, costly("192.0.2.1", 60))
		if w := serve(h, costly("192.0.2.1", 60)); w.Code != tc.code {
			t.Fatalf("settled at %d: second request %d; want %d", tc.used, w.Code, tc.code)
		}
	}
}

// TestSettleAboveDebts: settled above the estimate, the difference is
// debited into debt: the response says so (nothing left, and the debt's
// refill in t), the next request is refused with a Retry-After that covers
// the debt, and waiting it admits.
func TestSettleAboveDebts(t *testing.T) {
	clk := newClock()
	m := mustNew(t, []httplimit.Limit{httplimit.Pace(newPace(t, 10, clk), httplimit.ClientIP(), httplimit.Name("tokens"), httplimit.Cost(headerCost))})
	settle := m.Wrap(settling(30, nil)).ServeHTTP
	h := m.Wrap(ok)
	w := httptest.NewRecorder()
	settle(w, costly("192.0.2.1", 5))
	// 30 spent of a bucket of 10 at 10/s: 20 in debt, full in 3 s.
	want(t, "settled", w, 200, `"tokens";r=0;t=3`, "")
	// 5 fit once 3 s of the debt less 0.5 s have refilled.
	want(t, "next", serve(h, costly("192.0.2.1", 5)), 429, `"tokens";r=0;t=3`, "3")
	clk.Advance(2400 * time.Millisecond)
	if w := serve(h, costly("192.0.2.1", 5)); w.Code != 429 {
		t.Fatalf("after 2.4 s: %d; want 429", w.Code)
	}
	clk.Advance(100 * time.Millisecond)
	want(t, "after 2.5 s", serve(h, costly("192.0.2.1", 5)), 200, `"tokens";r=0;t=1`, "")
}

// TestCostAllOrNothing: two limits with costs; when the second refuses,
// the first is given back its estimate, so the refused request spent
// nothing of either.
func TestCostAllOrNothing(t *testing.T) {
	clk := newClock()
	m := mustNew(t, []httplimit.Limit{
		httplimit.Pace(newPace(t, 100, clk), httplimit.ClientIP(), httplimit.Name("per-ip"), httplimit.Cost(headerCost)),
		httplimit.Pace(newPace(t, 10, clk), httplimit.Header("X-Key"), httplimit.Name("per-key"), httplimit.Cost(headerCost)),
	})
	h := m.Wrap(ok)
	req := func(key string) *http.Request {
		r := costly("192.0.2.1", 8)
		r.Header.Set("X-Key", key)
		return r
	}
	want(t, "first", serve(h, req("a")), 200, `"per-ip";r=92;t=1`, "")
	w := serve(h, req("a"))
	if w.Code != 429 || w.Header().Get("RateLimit") != `"per-key";r=0;t=1` {
		t.Fatalf("second: %d %q; want 429 by per-key", w.Code, w.Header().Values("RateLimit"))
	}
	w = serve(h, req("b"))
	if got := w.Header().Values("RateLimit"); w.Code != 200 || len(got) != 2 || got[0] != `"per-ip";r=84;t=1` || got[1] != `"per-key";r=2;t=1` {
		t.Fatalf("third: %d %q; want 200, per-ip r=84 (the refused request spent nothing), per-key r=2", w.Code, got)
	}
}

// TestSettleZeroSpendsNothing: a request settled at 0 (a forger, found out
// after the decision) spends nothing of the estimate, as Return does; the
// response reports the bucket full again.
func TestSettleZeroSpendsNothing(t *testing.T) {
	for _, name := range []string{"Settle", "Return"} {
		clk := newClock()
		m := mustNew(t, []httplimit.Limit{httplimit.Pace(newPace(t, 100, clk), httplimit.ClientIP(), httplimit.Name("tokens"), httplimit.Cost(headerCost))})
		forger := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if name == "Settle" {
				httplimit.Settle(r, 0)
			} else {
				httplimit.Return(r)
			}
			http.Error(w, "no", http.StatusUnauthorized)
		}))
		for range 5 {
			want(t, name, serve(forger, costly("192.0.2.1", 90)), 401, `"tokens";r=100;t=0`, "")
		}
		want(t, name+" then", serve(m.Wrap(ok), costly("192.0.2.1", 90)), 200, `"tokens";r=10;t=1`, "")
	}
}

// TestCostErrors: a cost function that fails, or an estimate below 1 or
// above the bucket, is a key error: the handler is not reached, nothing is
// taken of any limit, and the answer is 400 (or the *KeyError's status).
func TestCostErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		cost httplimit.CostFunc
		code int
	}{
		{"error", func(*http.Request) (int, error) { return 0, errors.New("bad json") }, 400},
		{"KeyError", func(*http.Request) (int, error) {
			return 0, &httplimit.KeyError{Status: http.StatusPaymentRequired, Reason: "no credit"}
		}, 402},
		{"zero", func(*http.Request) (int, error) { return 0, nil }, 400},
		{"negative", func(*http.Request) (int, error) { return -5, nil }, 400},
		{"above burst", func(*http.Request) (int, error) { return 101, nil }, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock()
			var c counter
			first := newPace(t, 10, clk)
			m := mustNew(t, []httplimit.Limit{
				httplimit.Pace(first, httplimit.ClientIP(), httplimit.Name("per-ip")),
				httplimit.Pace(newPace(t, 100, clk), httplimit.ClientIP(), httplimit.Name("tokens"), httplimit.Cost(tc.cost)),
			}, c.Option())
			w := serve(m.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { t.Error("handler reached") })), from("192.0.2.1"))
			if w.Code != tc.code {
				t.Fatalf("%d; want %d", w.Code, tc.code)
			}
			problemOf(t, w)
			if c.Get("tokens", httplimit.KeyFailed) != 1 || c.Get("per-ip", httplimit.Returned) != 1 {
				t.Fatalf("tokens key_error %d, per-ip returned %d; want 1, 1", c.Get("tokens", httplimit.KeyFailed), c.Get("per-ip", httplimit.Returned))
			}
			if first.Len() != 0 {
				t.Fatal("the first limit kept its event")
			}
		})
	}
}

// TestCostReadsBody: a cost function that reads the body (a JSON
// max_tokens) leaves it whole for the handler, read again by a second cost
// function too; one that reads past MaxCostBody makes the request a 413.
func TestCostReadsBody(t *testing.T) {
	maxTokens := func(r *http.Request) (int, error) {
		var req struct {
			MaxTokens int `json:"max_tokens"`
		}
		err := json.NewDecoder(r.Body).Decode(&req)
		return req.MaxTokens, err
	}
	readAll := func(r *http.Request) (int, error) {
		b, err := io.ReadAll(r.Body)
		return len(b), err
	}
	body := `{"max_tokens": 40, "prompt": "` + strings.Repeat("x", 5000) + `"}`
	var got atomic.Value
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			t.Error(err)
		}
		got.Store(string(b))
		w.Write([]byte("ok"))
	})
	post := func() *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/v1/chat", strings.NewReader(body))
		r.RemoteAddr = "192.0.2.1:1234"
		return r
	}
	clk := newClock()
	m := mustNew(t, []httplimit.Limit{
		httplimit.Pace(newPace(t, 100, clk), httplimit.ClientIP(), httplimit.Name("tokens"), httplimit.Cost(maxTokens)),
		httplimit.Pace(newPace(t, 10000, clk), httplimit.ClientIP(), httplimit.Name("bytes"), httplimit.Cost(readAll), httplimit.MaxCostBody(8000)),
	})
	w := serve(m.Wrap(echo), post())
	if rl := w.Header().Values("RateLimit"); w.Code != 200 || len(rl) != 2 || rl[0] != `"tokens";r=60;t=1` || rl[1] != `"bytes";r=`+strconv.Itoa(10000-len(body))+`;t=1` {
		t.Fatalf("%d %q", w.Code, rl)
	}
	if got.Load() != body {
		t.Fatalf("the handler read %d bytes; want the %d of the body", len(got.Load().(string)), len(body))
	}

	small := mustNew(t, []httplimit.Limit{
		httplimit.Pace(newPace(t, 100, clk), httplimit.ClientIP(), httplimit.Name("tokens"), httplimit.Cost(maxTokens), httplimit.MaxCostBody(1000)),
	})
	got.Store("")
	w = serve(small.Wrap(echo), post())
	if w.Code != http.StatusRequestEntityTooLarge || got.Load() != "" {
		t.Fatalf("a body beyond MaxCostBody: %d, handler read %d bytes; want 413, handler not reached", w.Code, len(got.Load().(string)))
	}
	problemOf(t, w)

	// Within the bound exactly: the end of the body is not beyond it.
	exact := mustNew(t, []httplimit.Limit{
		httplimit.Pace(newPace(t, 10000, clk), httplimit.ClientIP(), httplimit.Name("bytes"), httplimit.Cost(readAll), httplimit.MaxCostBody(int64(len(body)))),
	})
	if w := serve(exact.Wrap(echo), post()); w.Code != 200 || got.Load() != body {
		t.Fatalf("a body of MaxCostBody bytes: %d; want 200 and the body whole", w.Code)
	}
}

// TestSettleHeaders: the RateLimit fields of a response written after
// Settle report the settled state: a handler that settles lower sees more
// left than one that settles higher; LegacyHeaders agree.
func TestSettleHeaders(t *testing.T) {
	remaining := func(used int) (string, string) {
		clk := newClock()
		m := mustNew(t, []httplimit.Limit{httplimit.Pace(newPace(t, 100, clk), httplimit.ClientIP(), httplimit.Name("tokens"), httplimit.Cost(headerCost))}, httplimit.LegacyHeaders())
		w := serve(m.Wrap(settling(used, nil)), costly("192.0.2.1", 50))
		return w.Header().Get("RateLimit"), w.Header().Get("X-RateLimit-Remaining")
	}
	for _, tc := range []struct {
		used        int
		field, left string
	}{
		{-1, `"tokens";r=50;t=1`, "50"},
		{10, `"tokens";r=90;t=1`, "90"},
		{50, `"tokens";r=50;t=1`, "50"},
		{90, `"tokens";r=10;t=1`, "10"},
		{0, `"tokens";r=100;t=0`, "100"},
	} {
		if f, l := remaining(tc.used); f != tc.field || l != tc.left {
			t.Errorf("settled at %d: RateLimit %q, X-RateLimit-Remaining %q; want %q, %q", tc.used, f, l, tc.field, tc.left)
		}
	}
}

// TestSettleNoOp: Settle without a limit with a Cost, twice, after Return,
// without a Middleware or once the handler has returned does nothing.
func TestSettleNoOp(t *testing.T) {
	clk := newClock()
	if err := httplimit.Settle(from("192.0.2.1"), 5); err != nil {
		t.Fatalf("without a Middleware: %v", err)
	}
	plain := mustNew(t, []httplimit.Limit{httplimit.Pace(newPace(t, 100, clk), httplimit.ClientIP(), httplimit.Name("plain"))})
	want(t, "no Cost", serve(plain.Wrap(settling(50, nil)), from("192.0.2.1")), 200, `"plain";r=99;t=1`, "")
	want(t, "no Cost, next", serve(plain.Wrap(ok), from("192.0.2.1")), 200, `"plain";r=98;t=1`, "")

	p := newPace(t, 100, clk)
	m := mustNew(t, []httplimit.Limit{httplimit.Pace(p, httplimit.ClientIP(), httplimit.Name("tokens"), httplimit.Cost(headerCost))})
	twice := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		httplimit.Settle(r, 10)
		httplimit.Settle(r, 90)
		httplimit.Return(r) // settled: nothing to give back
	}))
	want(t, "twice", serve(twice, costly("192.0.2.1", 50)), 200, `"tokens";r=90;t=1`, "")
	want(t, "twice, next", serve(m.Wrap(ok), costly("192.0.2.1", 50)), 200, `"tokens";r=40;t=1`, "")

	clk.Advance(time.Second)
	afterReturn := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		httplimit.Return(r)
		httplimit.Settle(r, 90)
	}))
	want(t, "after Return", serve(afterReturn, costly("192.0.2.1", 50)), 200, `"tokens";r=100;t=0`, "")

	var kept *http.Request
	late := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { kept = r }))
	serve(late, costly("192.0.2.1", 50))
	if err := httplimit.Settle(kept, 0); err != nil {
		t.Fatal(err)
	}
	want(t, "after a late Settle", serve(m.Wrap(ok), costly("192.0.2.1", 50)), 200, `"tokens";r=0;t=1`, "")
}

// failingRefund is a store whose Refund and overdraft fail once broken is
// set, as a backend that goes down mid-request.
type failingRefund struct {
	driver.Taker
	broken atomic.Bool
}

func (s *failingRefund) Refund(ctx context.Context, key string, shapes []driver.Shape, r driver.Receipt) error {
	if s.broken.Load() {
		return errDown
	}
	return s.Taker.Refund(ctx, key, shapes, r)
}

func (s *failingRefund) Take(ctx context.Context, key string, shapes []driver.Shape) (driver.Grant, error) {
	if s.broken.Load() {
		return driver.Grant{}, errDown
	}
	return s.Taker.Take(ctx, key, shapes)
}

// TestSharedSettle: a Shared limit with a Cost reserves the estimate at the
// store and settles there, below (given back) and above (debt), with
// headers that report the settled state; a store error on settling is
// returned, counted, and leaves the estimate spent.
func TestSharedSettle(t *testing.T) {
	clk := newClock()
	store := &failingRefund{Taker: newMemory(t, clk).(driver.Taker)}
	p, err := pace.NewShared(store, 100, pace.WithClock(clk.Now), pace.WithQuota(1000, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	var c counter
	m := mustNew(t, []httplimit.Limit{httplimit.Shared(p, httplimit.ClientIP(), httplimit.Name("tokens"), httplimit.Cost(headerCost))}, c.Option())
	var settleErr error
	below := m.Wrap(settling(10, &settleErr))
	want(t, "below", serve(below, costly("192.0.2.1", 60)), 200, `"tokens";r=90;t=1`, "")
	want(t, "then", serve(m.Wrap(ok), costly("192.0.2.1", 60)), 200, `"tokens";r=30;t=1`, "")

	clk.Advance(time.Second)
	above := m.Wrap(settling(300, &settleErr))
	// 300 of a bucket of 100 at 100/s: full in 3 s.
	want(t, "above", serve(above, costly("192.0.2.2", 50)), 200, `"tokens";r=0;t=3`, "")
	if w := serve(m.Wrap(ok), costly("192.0.2.2", 50)); w.Code != 429 || w.Header().Get("Retry-After") != "3" {
		t.Fatalf("after the debt: %d, Retry-After %q; want 429, 3", w.Code, w.Header().Get("Retry-After"))
	}

	// The store goes down between the decision and the settlement.
	breaking := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		store.broken.Store(true)
		settleErr = httplimit.Settle(r, 10)
		w.Write([]byte("ok"))
	}))
	w := serve(breaking, costly("192.0.2.3", 60))
	if !errors.Is(settleErr, errDown) || c.Get("tokens", httplimit.StoreFailed) != 1 {
		t.Fatalf("Settle's error %v, store_error %d; want errDown, 1", settleErr, c.Get("tokens", httplimit.StoreFailed))
	}
	want(t, "failed settle", w, 200, `"tokens";r=40;t=1`, "")
	store.broken.Store(false)
	if w := serve(m.Wrap(ok), costly("192.0.2.3", 60)); w.Code != 429 {
		t.Fatalf("after the failed settle: %d; want 429 (the estimate stays spent)", w.Code)
	}
}

// TestCostOptionsRejected: Cost on a Bucket or Slots limit, with
// DecideAfterVerify, with a nil function; MaxCostBody without Cost or
// below 1 byte: each is an error wrapping pace.ErrInvalidArgument.
func TestCostOptionsRejected(t *testing.T) {
	clk := newClock()
	s := newMemory(t, clk)
	for name, lim := range map[string]httplimit.Limit{
		"Bucket":            httplimit.Bucket(s.(driver.Taker), 10, 1, httplimit.ClientIP(), httplimit.Cost(headerCost)),
		"Slots":             httplimit.Slots(s.(driver.Slots), 10, time.Second, httplimit.ClientIP(), httplimit.Cost(headerCost)),
		"DecideAfterVerify": httplimit.Pace(newPace(t, 10, clk), httplimit.ClientIP(), httplimit.Cost(headerCost), httplimit.DecideAfterVerify()),
		"nil":               httplimit.Pace(newPace(t, 10, clk), httplimit.ClientIP(), httplimit.Cost(nil)),
		"MaxCostBody alone": httplimit.Pace(newPace(t, 10, clk), httplimit.ClientIP(), httplimit.MaxCostBody(100)),
		"MaxCostBody 0":     httplimit.Pace(newPace(t, 10, clk), httplimit.ClientIP(), httplimit.Cost(headerCost), httplimit.MaxCostBody(0)),
	} {
		if _, err := httplimit.New([]httplimit.Limit{lim}); !errors.Is(err, pace.ErrInvalidArgument) {
			t.Errorf("%s: %v; want an error wrapping pace.ErrInvalidArgument", name, err)
		}
	}
	if _, err := httplimit.NewLimiter([]httplimit.Limit{httplimit.Pace(newPace(t, 10, clk), nil, httplimit.Cost(nil))}); err != nil {
		t.Errorf("NewLimiter with Cost(nil): %v; want nil (its costs come from DecideN)", err)
	}
}

// TestSettleNested: Settle settles the limits with a Cost of every
// Middleware the request went through, and the outer one's RateLimit
// field reports both settled.
func TestSettleNested(t *testing.T) {
	clk := newClock()
	outer := mustNew(t, []httplimit.Limit{httplimit.Pace(newPace(t, 100, clk), httplimit.ClientIP(), httplimit.Name("outer"), httplimit.Cost(headerCost))})
	inner := mustNew(t, []httplimit.Limit{httplimit.Pace(newPace(t, 1000, clk), httplimit.ClientIP(), httplimit.Name("inner"), httplimit.Cost(headerCost))})
	w := serve(outer.Wrap(inner.Wrap(settling(5, nil))), costly("192.0.2.1", 50))
	if got := w.Header().Values("RateLimit"); len(got) != 2 || got[0] != `"outer";r=95;t=1` || got[1] != `"inner";r=995;t=1` {
		t.Fatalf("RateLimit %q; want outer r=95, inner r=995", got)
	}
}

// TestCostRetryAfterCoversEstimate: when an earlier limit refuses, the
// Retry-After also covers a later limit's estimate, not one event of it:
// waiting it admits the request of that estimate.
func TestCostRetryAfterCoversEstimate(t *testing.T) {
	clk := newClock()
	tokens, err := pace.New(5, pace.WithBurst(10), pace.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	m := mustNew(t, []httplimit.Limit{
		httplimit.Pace(newPace(t, 1, clk), httplimit.ClientIP(), httplimit.Name("per-ip")),
		httplimit.Pace(tokens, httplimit.ClientIP(), httplimit.Name("tokens"), httplimit.Cost(headerCost)),
	})
	h := m.Wrap(ok)
	if w := serve(h, costly("192.0.2.1", 10)); w.Code != 200 {
		t.Fatalf("first: %d", w.Code)
	}
	// per-ip refuses for 1 s; tokens needs 10 at 5/s: 2 s.
	w := serve(h, costly("192.0.2.1", 10))
	if w.Code != 429 || w.Header().Get("Retry-After") != "2" {
		t.Fatalf("second: %d, Retry-After %q; want 429, 2", w.Code, w.Header().Get("Retry-After"))
	}
	clk.Advance(2 * time.Second)
	if w := serve(h, costly("192.0.2.1", 10)); w.Code != 200 {
		t.Fatalf("after Retry-After: %d; want 200", w.Code)
	}
}
