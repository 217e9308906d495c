package httplimit_test

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"testing"

	"github.com/ratepace/pace/httplimit"
)

// TestLateReturn: a handler may keep its request after it returns, and call
// Return with it later, from another goroutine, while other requests go
// through the middleware (whose per-request state is recycled): the late
// Return gives back nothing, neither the old request's event nor a later
// request's, and the kept request's context is still its own. Run under
// -race, it also shows that a late caller never shares memory with a
// request in flight unsynchronised.
func TestLateReturn(t *testing.T) {
	clk := newClock()
	p := newPace(t, 0.01, clk) // one event per client, for the whole test
	m := mustNew(t, []httplimit.Limit{httplimit.Pace(p, httplimit.Header("X-Client"), httplimit.ReturnOn(http.StatusTeapot))})
	type idKey struct{}
	var kept *http.Request
	inner := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		kept = r
		w.WriteHeader(http.StatusNoContent)
	}))
	late := make(chan *http.Request, 64)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the late callers
		defer wg.Done()
		for r := range late {
			httplimit.Return(r)
			httplimit.Return(r.WithContext(context.WithValue(r.Context(), idKey{}, "derived")))
		}
	}()
	const n = 2000
	for i := range n {
		id := strconv.Itoa(i)
		r := from("192.0.2.1").WithContext(context.WithValue(context.Background(), idKey{}, id))
		r.Header.Set("X-Client", id)
		if w := serve(inner, r); w.Code != http.StatusNoContent {
			t.Fatalf("request %d: %d", i, w.Code)
		}
		if got := kept.Context().Value(idKey{}); got != id {
			t.Fatalf("request %d: the kept request's context has %v", i, got)
		}
		late <- kept // Returned while the next requests are served
	}
	close(late)
	wg.Wait()
	for i := range n {
		if ok, _ := p.Peek(strconv.Itoa(i)); ok {
			t.Fatalf("client %d has its event back: a Return after its request was over gave it back", i)
		}
	}
}

// TestReturnInsideAfterRecycle: a handler that calls Return with a request
// kept from an earlier request, which is over, gives back nothing of its own
// request's (whose state may be the recycled one), and Verified with it
// reports false and writes nothing; Return with its own request, or one
// derived from it, still gives back its own.
func TestReturnInsideAfterRecycle(t *testing.T) {
	clk := newClock()
	p := newPace(t, 0.01, clk)
	m := mustNew(t, []httplimit.Limit{httplimit.Pace(p, httplimit.Header("X-Client"))})
	var prev *http.Request
	h := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("X-Client") {
		case "old":
			prev = r
		case "stale":
			httplimit.Return(prev) // the old request's: over, nothing to give back
			if httplimit.Verified(w, prev) {
				t.Error("Verified with a request that is over reported true")
			}
		case "own":
			type k struct{}
			httplimit.Return(r.WithContext(context.WithValue(r.Context(), k{}, 1)))
		}
	}))
	for _, id := range []string{"old", "stale", "own"} {
		r := from("192.0.2.1")
		r.Header.Set("X-Client", id)
		if w := serve(h, r); w.Code != 200 {
			t.Fatalf("%s: %d", id, w.Code)
		}
	}
	for id, want := range map[string]bool{"old": false, "stale": false, "own": true} {
		if ok, _ := p.Peek(id); ok != want {
			t.Errorf("client %q can take an event: %v; want %v", id, ok, want)
		}
	}
}
