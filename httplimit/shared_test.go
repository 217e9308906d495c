package httplimit_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/driver"
	"github.com/ratepace/pace/httplimit"
	"github.com/ratepace/pace/internal/fakeclock"
	"github.com/ratepace/pace/memory"
)

// newShared returns a Shared of perSecond on s, its local tier on clk.
func newShared(t testing.TB, s pace.Store, perSecond float64, clk *fakeclock.Clock, opts ...pace.Option) *pace.Shared {
	t.Helper()
	p, err := pace.NewShared(s.(driver.Taker), perSecond, append([]pace.Option{pace.WithClock(clk.Now)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// newMemory returns a memory store on clk.
func newMemory(t testing.TB, clk *fakeclock.Clock) pace.Store {
	t.Helper()
	s := memory.New(memory.WithClock(clk.Now))
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// TestSharedLimit: a Shared limit admits and refuses as a Pace limit does,
// with the same RateLimit-Policy, RateLimit and Retry-After fields, across
// two replicas of one store.
func TestSharedLimit(t *testing.T) {
	clk := newClock()
	s := newMemory(t, clk)
	a := mustNew(t, []httplimit.Limit{httplimit.Shared(newShared(t, s, 5, clk), httplimit.ClientIP(), httplimit.Name("per-ip"))})
	b := mustNew(t, []httplimit.Limit{httplimit.Shared(newShared(t, s, 5, clk), httplimit.ClientIP(), httplimit.Name("per-ip"))})
	replicas := []http.Handler{a.Wrap(ok), b.Wrap(ok)}
	for i := range 5 {
		w := serve(replicas[i%2], from("192.0.2.1"))
		if w.Code != 200 {
			t.Fatalf("request %d: %d; want 200", i, w.Code)
		}
		if got, want := w.Header().Get("RateLimit-Policy"), `"per-ip";q=5;w=1`; got != want {
			t.Fatalf("RateLimit-Policy %q; want %q", got, want)
		}
		if got, want := w.Header().Get("RateLimit"), `"per-ip";r=`+string(rune('4'-i))+`;t=1`; got != want {
			t.Fatalf("request %d: RateLimit %q; want %q", i, got, want)
		}
	}
	for _, h := range replicas {
		w := serve(h, from("192.0.2.1"))
		if w.Code != 429 || w.Header().Get("Retry-After") != "1" || w.Header().Get("RateLimit") != `"per-ip";r=0;t=1` {
			t.Fatalf("sixth request: %d, Retry-After %q, RateLimit %q; want 429, 1, r=0", w.Code, w.Header().Get("Retry-After"), w.Header().Get("RateLimit"))
		}
	}
	clk.Advance(200 * time.Millisecond)
	if w := serve(replicas[1], from("192.0.2.1")); w.Code != 200 {
		t.Fatalf("after 200 ms: %d; want 200", w.Code)
	}
}

// TestSharedReturnOn: with ReturnOn(401) a forger presenting a client's id
// with wrong secrets on one replica spends nothing of the client's shared
// pace on another; without it, it spends it all.
func TestSharedReturnOn(t *testing.T) {
	for _, returnOn := range []bool{true, false} {
		clk := newClock()
		s := newMemory(t, clk)
		var opts []httplimit.LimitOption
		if returnOn {
			opts = append(opts, httplimit.ReturnOn(http.StatusUnauthorized))
		}
		var c counter
		forger := mustNew(t, []httplimit.Limit{httplimit.Shared(newShared(t, s, 2, clk), httplimit.ClientID(), opts...)}, c.Option())
		honest := mustNew(t, []httplimit.Limit{httplimit.Shared(newShared(t, s, 2, clk), httplimit.ClientID(), opts...)})
		for range 20 {
			w := serve(forger.Wrap(tokenHandler(nil, false)), tokenRequest("198.51.100.9", "app-1", "wrong"))
			if returnOn && w.Code != 401 {
				t.Fatalf("forged with ReturnOn: %d; want 401 every time", w.Code)
			}
		}
		w := serve(honest.Wrap(tokenHandler(nil, false)), tokenRequest("192.0.2.1", "app-1", "right"))
		if returnOn != (w.Code == 200) {
			t.Fatalf("ReturnOn %v: the honest client got %d", returnOn, w.Code)
		}
		if returnOn && c.Get("shared-0", httplimit.Returned) != 20 {
			t.Errorf("returned %d; want 20", c.Get("shared-0", httplimit.Returned))
		}
	}
}

// TestSharedLimitsDoNotShareKeys: two Shared limits on one store keep their
// keys apart, so a client naming as its id the address another limit keys
// by spends nothing of that address's pace.
func TestSharedLimitsDoNotShareKeys(t *testing.T) {
	clk := newClock()
	s := newMemory(t, clk)
	m := mustNew(t, []httplimit.Limit{
		httplimit.Shared(newShared(t, s, 1, clk), httplimit.ClientID(), httplimit.Name("per-client")),
		httplimit.Shared(newShared(t, s, 1, clk), httplimit.ClientIP(), httplimit.Name("per-ip")),
	})
	h := m.Wrap(tokenHandler(nil, false))
	if w := serve(h, tokenRequest("198.51.100.9", "192.0.2.1", "right")); w.Code != 200 {
		t.Fatalf("the attacker's request: %d", w.Code)
	}
	if w := serve(h, tokenRequest("192.0.2.1", "app-1", "right")); w.Code != 200 {
		t.Fatalf("the victim's request: %d; want 200 (the attacker's client id is not the victim's address)", w.Code)
	}
}

// TestSharedStoreError: a Shared limit on a dead store answers 503 and
// gives back what earlier limits took; with a fallback it answers from it.
func TestSharedStoreError(t *testing.T) {
	clk := newClock()
	p := newPace(t, 1, clk)
	var c counter
	m := mustNew(t, []httplimit.Limit{
		httplimit.Pace(p, httplimit.ClientIP(), httplimit.Name("local")),
		httplimit.Shared(newShared(t, downStore{}, 1, clk), httplimit.ClientIP(), httplimit.Name("shared")),
	}, c.Option())
	for range 3 {
		if w := serve(m.Wrap(ok), from("192.0.2.1")); w.Code != 503 {
			t.Fatalf("dead store: %d; want 503", w.Code)
		}
	}
	if p.Len() != 0 || c.Get("shared", httplimit.StoreFailed) != 3 {
		t.Fatalf("rows %d, store errors counted %d; want 0 and 3", p.Len(), c.Get("shared", httplimit.StoreFailed))
	}
	fb := newPace(t, 1, clk)
	m = mustNew(t, []httplimit.Limit{httplimit.Shared(newShared(t, downStore{}, 2, clk, pace.WithFallback(fb, time.Second)), httplimit.ClientIP())})
	codes := []int{serve(m.Wrap(ok), from("192.0.2.1")).Code, serve(m.Wrap(ok), from("192.0.2.1")).Code}
	if codes[0] != 200 || codes[1] != 429 {
		t.Fatalf("dead store with a fallback of 1/s: %v; want 200, 429", codes)
	}
}

// TestSharedLimitRejects: New rejects a nil Shared and DecideAfterVerify on
// a Shared limit.
func TestSharedLimitRejects(t *testing.T) {
	clk := newClock()
	p := newShared(t, newMemory(t, clk), 1, clk)
	for _, l := range []httplimit.Limit{
		httplimit.Shared(nil, httplimit.ClientIP()),
		httplimit.Shared(p, httplimit.ClientIP(), httplimit.DecideAfterVerify()),
		httplimit.Shared(p, nil),
	} {
		if _, err := httplimit.New([]httplimit.Limit{l}); err == nil {
			t.Errorf("New(%+v) = nil error", l)
		}
	}
}
