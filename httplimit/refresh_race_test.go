package httplimit_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/ratepace/pace/httplimit"
	"github.com/ratepace/pace/memory"
)

// firedTimers is a time.AfterFunc whose timers have always fired already:
// stop reports false and stops nothing, and the test runs the functions
// when it likes, as a refresh does that fired and waited for a lock while
// Finish ran.
type firedTimers struct {
	mu  sync.Mutex
	fns []func()
}

func (ft *firedTimers) afterFunc(_ time.Duration, f func()) func() bool {
	ft.mu.Lock()
	ft.fns = append(ft.fns, f)
	ft.mu.Unlock()
	return func() bool { return false }
}

func (ft *firedTimers) take() []func() {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	fns := ft.fns
	ft.fns = nil
	return fns
}

// TestRefreshAfterRecycle: a slot refresh that fired before Finish and runs
// after it (its request over, its state recycled and reused by the next
// request) touches nothing: no crash, and the next request's slot is
// released when that request ends, not refreshed by the old timer.
func TestRefreshAfterRecycle(t *testing.T) {
	s := memory.New()
	var ft firedTimers
	m := mustNew(t, []httplimit.Limit{httplimit.Slots(s, 1, time.Minute, httplimit.ClientIP(), httplimit.Name("streams"))},
		httplimit.WithAfterFunc(ft.afterFunc))
	h := m.Wrap(ok)
	for i := range 3 {
		if w := serve(h, from("192.0.2.1")); w.Code != http.StatusOK {
			t.Fatalf("request %d: %d", i, w.Code)
		}
		for _, f := range ft.take() {
			f() // a refresh of a request that is over
		}
	}
	if w := serve(h, from("192.0.2.1")); w.Code != http.StatusOK {
		t.Fatalf("after the late refreshes: %d; want 200 (the slot is free)", w.Code)
	}
}

// TestRefreshAfterTicketReuse: the same for a Limiter caller that reuses
// its Ticket: a refresh of the ticket's earlier use, run after Finish and
// the next Decide, does nothing to the new decision (it arms no timer of
// its own on it).
func TestRefreshAfterTicketReuse(t *testing.T) {
	s := memory.New()
	var ft firedTimers
	l, err := httplimit.NewLimiter([]httplimit.Limit{httplimit.Slots(s, 1, time.Minute, nil, httplimit.Name("streams"))},
		httplimit.WithAfterFunc(ft.afterFunc))
	if err != nil {
		t.Fatal(err)
	}
	var tk httplimit.Ticket
	key := func(int) (string, error) { return "k", nil }
	for i := range 3 {
		if out := l.Decide(context.Background(), &tk, key); out != httplimit.Admitted {
			t.Fatalf("decision %d: %v", i, out)
		}
		old := ft.take()
		tk.Finish(200)
		if out := l.Decide(context.Background(), &tk, key); out != httplimit.Admitted {
			t.Fatalf("decision %d after reuse: %v", i, out)
		}
		for _, f := range old {
			f()
		}
		if n := len(ft.take()); n != 1 {
			t.Fatalf("decision %d: %d refresh timers armed; want 1, the new decision's: the old refresh re-armed itself on the reused ticket", i, n)
		}
		tk.Finish(200)
	}
}

// TestRefreshRacesRecycleRealTimers is the reproduction of the crash: one
// Slots limit on the memory store, ttl 3 ms and 30 ms, handlers that stream
// for about one refresh period, real timers, under -race: refreshes fire
// while requests finish and their states are recycled.
func TestRefreshRacesRecycleRealTimers(t *testing.T) {
	for _, ttl := range []time.Duration{3 * time.Millisecond, 30 * time.Millisecond} {
		t.Run(ttl.String(), func(t *testing.T) {
			s := memory.New()
			m := mustNew(t, []httplimit.Limit{httplimit.Slots(s, 1000, ttl, httplimit.Header("X-Client"), httplimit.Name("streams"))})
			h := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				time.Sleep(ttl / 3) // a stream of about one refresh period: the workload, not a synchronisation
				w.Write([]byte("data"))
			}))
			deadline := time.Now().Add(300 * time.Millisecond)
			var wg sync.WaitGroup
			for g := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for time.Now().Before(deadline) {
						r := from("192.0.2.1")
						r.Header.Set("X-Client", string(rune('a'+g)))
						if w := serve(h, r); w.Code != http.StatusOK {
							t.Errorf("%d", w.Code)
							return
						}
					}
				}()
			}
			wg.Wait()
		})
	}
}
