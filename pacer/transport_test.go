package pacer_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratepace/pace/pacer"
)

func TestTransportObservesAndDoesNotRetry(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("X-RateLimit-Limit", "120")
		w.Header().Set("X-RateLimit-Used", "120")
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer srv.Close()

	c := newFakeClock(time.Now())
	p := newPacer(c)
	client := &http.Client{Transport: pacer.Transport(nil, p)}
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("status = %d; want the 429 handed back", resp.StatusCode)
	}
	if n := hits.Load(); n != 1 {
		t.Errorf("server saw %d requests; want 1 (no retry)", n)
	}
	if d := p.Reserve(); d < 30*time.Second {
		t.Errorf("Reserve() after a 429 with Retry-After 30 = %v; want >= 30s", d)
	}
}

func TestTransportFailsFastOnDeadline(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer srv.Close()
	c := newFakeClock(time.Now())
	p := newPacer(c)
	p.Observe(pacer.Signal{RetryAfter: time.Hour, Throttled: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	_, err := (&http.Client{Transport: pacer.Transport(nil, p)}).Do(req)
	if !errors.Is(err, pacer.ErrWouldExceedDeadline) {
		t.Fatalf("Do() under a 1h Retry-After with a 1m deadline = %v; want ErrWouldExceedDeadline", err)
	}
	if hits.Load() != 0 {
		t.Fatal("the request was sent; want it refused before sending")
	}
}

func TestGroupTransportPacesPerKey(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/search" {
			w.Header().Set("Retry-After", "60")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer srv.Close()
	c := newFakeClock(time.Now())
	g := pacer.MustNewGroup(pacer.WithClock(c), pacer.WithSeed(1))
	rt := pacer.GroupTransport(nil, g, func(r *http.Request) string { return r.URL.Path })
	client := &http.Client{Transport: rt}
	for _, path := range []string{"/search", "/core"} {
		resp, err := client.Get(srv.URL + path)
		if err != nil {
			t.Fatalf("Get %s: %v", path, err)
		}
		resp.Body.Close()
	}
	if d := g.Get("/search").Reserve(); d < time.Minute {
		t.Errorf("search Reserve() = %v; want >= 1m", d)
	}
	if d := g.Get("/core").Reserve(); d != 0 {
		t.Errorf("core Reserve() = %v; want 0", d)
	}
}
