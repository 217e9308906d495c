package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ratepace/pace/driver"
	"github.com/ratepace/pace/httplimit"
	"github.com/ratepace/pace/memory"
)

// bucketShape is the shape a Bucket limit of capacity and refill takes
// from its store.
func bucketShape(t testing.TB, capacity, refill float64) []driver.Shape {
	t.Helper()
	b, err := driver.NewShape(capacity, refill, 1)
	if err != nil {
		t.Fatal(err)
	}
	return []driver.Shape{b}
}

// storeFits reports whether one take of shapes fits at key in s now; it
// takes it when it does.
func storeFits(t testing.TB, s driver.Taker, key string, shapes []driver.Shape) bool {
	t.Helper()
	g, err := s.Take(context.Background(), key, shapes)
	if err != nil {
		t.Fatal(err)
	}
	return g.OK
}

// TestAttackLateCallersConcurrent: requests served from many goroutines
// at once, each handler keeping its request for callers that call Return
// (with the request and with one derived from it) and Verified after the
// handler has returned, several times, from other goroutines, while later
// requests reuse the recycled per-request state. A third of the handlers
// hand their request over before returning, so that those callers race
// with the request's end (and may give its own back, or not). Every request
// has keys of its own, so a caller that reached another request's state
// would give back that request's token or event: of the others, exactly
// the requests whose handler called Return have theirs back, and a late
// Verified reports false and writes nothing. Under -race it also catches a
// state reset under a caller that is using it.
func TestAttackLateCallersConcurrent(t *testing.T) {
	clk := newClock()
	st := memory.New(memory.WithClock(clk.Now))
	p := newPace(t, 0.001, clk) // one event per client, for the whole test
	var c counter
	m := mustNew(t, []httplimit.Limit{
		httplimit.Bucket(st, 1, 0.001, httplimit.Header("X-Client"), httplimit.Name("b")),
		httplimit.Pace(p, httplimit.Header("X-Client"), httplimit.Name("p")),
	}, c.Option())
	type idKey struct{}
	type keptKey struct{}
	type handed struct {
		r      *http.Request
		picked chan struct{} // closed once a caller has it, for a racing one
	}
	late := make(chan handed, 1024)
	h := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, _ := strconv.Atoi(r.Header.Get("X-Client"))
		if id%3 == 0 {
			httplimit.Return(r)
		}
		if id%3 == 1 {
			picked := make(chan struct{})
			late <- handed{r, picked} // the handler returns as the caller starts: racing with the request's end
			<-picked
		} else {
			*r.Context().Value(keptKey{}).(**http.Request) = r // handed over once the handler returned
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	const workers, each = 8, 60
	var lateWG sync.WaitGroup
	var lateErr sync.Once
	var lateFail string
	for range 4 {
		lateWG.Add(1)
		go func() {
			defer lateWG.Done()
			for hd := range late {
				r := hd.r
				if hd.picked != nil {
					close(hd.picked)
				}
				for range 3 {
					httplimit.Return(r)
					httplimit.Return(r.WithContext(context.WithValue(r.Context(), idKey{}, "derived")))
					w := httptest.NewRecorder()
					racing := r.Header.Get("X-Client")
					if id, _ := strconv.Atoi(racing); id%3 == 1 {
						httplimit.Verified(w, r)
						continue
					}
					if httplimit.Verified(w, r) || len(w.Header()) != 0 || w.Body.Len() != 0 {
						lateErr.Do(func() {
							lateFail = fmt.Sprintf("late Verified for %s: true or wrote %v", r.Header.Get("X-Client"), w.Header())
						})
					}
				}
			}
		}()
	}
	var wg sync.WaitGroup
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				id := strconv.Itoa(g*each + i)
				var kept *http.Request
				r := from("192.0.2.1")
				r = r.WithContext(context.WithValue(r.Context(), keptKey{}, &kept))
				r.Header.Set("X-Client", id)
				if w := serve(h, r); w.Code != http.StatusNoContent {
					t.Errorf("client %s: %d", id, w.Code)
				}
				if kept != nil {
					late <- handed{r: kept}
				}
			}
		}()
	}
	wg.Wait()
	close(late)
	lateWG.Wait()
	if lateFail != "" {
		t.Fatal(lateFail)
	}
	shapes := bucketShape(t, 1, 0.001)
	for i := range workers * each {
		if i%3 == 1 {
			continue // its own callers raced with its end
		}
		id := strconv.Itoa(i)
		want := i%3 == 0 // given back by its own handler, and only then
		if ok, _ := p.Peek(id); ok != want {
			t.Errorf("client %s: Pace event back %v; want %v", id, ok, want)
		}
		if ok := storeFits(t, st, "httplimit:b:"+id, shapes); ok != want {
			t.Errorf("client %s: Bucket token back %v; want %v", id, ok, want)
		}
	}
	for _, name := range []string{"b", "p"} {
		if got, least := c.Get(name, httplimit.Returned), (workers*each+2)/3; got < least || got > 2*least {
			t.Errorf("%s: %d returns counted; want %d, plus at most one per racing request", name, got, least)
		}
	}
}

// TestAttackBucketOwnPartOnce: a Bucket token is given back once and only
// as much of it as has not refilled, however it is asked: eight goroutines
// calling Return twice each at once, then a ReturnOn status, then a Return
// after the handler returned. Request A takes from a full bucket (2 tokens,
// 1 a second) at 0; B takes at 0.7 s; A gives back at 0.7 s the 0.3 s of its
// token that had not refilled, which leaves the bucket's arrival time at
// 1.7 s: a take then fits with the bucket full again 2 s later, and the next
// waits exactly 1 s. Giving back a whole token (or twice) would leave less.
func TestAttackBucketOwnPartOnce(t *testing.T) {
	clk := newClock()
	st := memory.New(memory.WithClock(clk.Now))
	var c counter
	m := mustNew(t, []httplimit.Limit{
		httplimit.Bucket(st, 2, 1, httplimit.Header("X-Client"), httplimit.Name("b"), httplimit.ReturnOn(http.StatusUnauthorized)),
	}, c.Option())
	started, release := make(chan struct{}), make(chan struct{})
	var kept *http.Request
	h := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/a" {
			return
		}
		kept = r
		close(started)
		<-release
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				httplimit.Return(r)
				httplimit.Return(r)
			}()
		}
		wg.Wait()
		w.WriteHeader(http.StatusUnauthorized)
	}))
	req := func(path string) *http.Request {
		r := httptest.NewRequest(http.MethodGet, path, nil)
		r.Header.Set("X-Client", "k")
		return r
	}
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- serve(h, req("/a")) }()
	<-started
	clk.Advance(700 * time.Millisecond)
	if w := serve(h, req("/b")); w.Code != 200 {
		t.Fatalf("B: %d", w.Code)
	}
	close(release)
	if w := <-done; w.Code != http.StatusUnauthorized {
		t.Fatalf("A: %d", w.Code)
	}
	httplimit.Return(kept) // after the handler: nothing
	shapes := bucketShape(t, 2, 1)
	g, err := st.Take(context.Background(), "httplimit:b:k", shapes)
	if err != nil || !g.OK || g.Remaining != 0 || g.Reset != 2*time.Second {
		t.Fatalf("take after A's return: %+v, %v; want OK, 0 left, full in 2s (A gave back its 0.3 s, once)", g, err)
	}
	g, err = st.Take(context.Background(), "httplimit:b:k", shapes)
	if err != nil || g.OK || g.RetryAfter != time.Second {
		t.Fatalf("next take: %+v, %v; want refused for exactly 1s", g, err)
	}
	if got := c.Get("b", httplimit.Returned); got != 1 {
		t.Fatalf("%d returns counted; want 1", got)
	}
}

// failKey is a KeyFunc that always fails.
func failKey(*http.Request) (string, error) { return "", errors.New("test: no key") }

// TestAttackAllOrNothing: whatever the order of a Pace, a Shared and a
// Bucket limit, a request that the last one refuses, cannot key, or cannot
// decide (its store down) leaves the earlier two unspent. Each limit has
// one event of its own per key, and the last limit's key is spent
// beforehand; the failing request is sent three times.
func TestAttackAllOrNothing(t *testing.T) {
	kinds := []string{"pace", "shared", "bucket"}
	orders := [][3]int{{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}}
	for _, ord := range orders {
		for _, mode := range []string{"refuse", "key", "store"} {
			last := kinds[ord[2]]
			if mode == "store" && last == "pace" {
				continue // a Pace has no store
			}
			name := fmt.Sprintf("%s-%s-%s/%s", kinds[ord[0]], kinds[ord[1]], last, mode)
			t.Run(name, func(t *testing.T) {
				clk := newClock()
				st := newMemory(t, clk)
				p := newPace(t, 0.001, clk)
				sh := newShared(t, st, 1, clk)
				shapes := bucketShape(t, 1, 0.001)
				ctx := context.Background()
				limit := func(kind string, failing bool) httplimit.Limit {
					key := httplimit.Header("X-" + kind)
					if failing && mode == "key" {
						key = failKey
					}
					switch kind {
					case "pace":
						return httplimit.Pace(p, key, httplimit.Name(kind))
					case "shared":
						if failing && mode == "store" {
							return httplimit.Shared(newShared(t, downStore{}, 1, clk), key, httplimit.Name(kind))
						}
						return httplimit.Shared(sh, key, httplimit.Name(kind))
					}
					if failing && mode == "store" {
						return httplimit.Bucket(downStore{}, 1, 0.001, key, httplimit.Name(kind))
					}
					return httplimit.Bucket(st, 1, 0.001, key, httplimit.Name(kind))
				}
				var limits []httplimit.Limit
				for j, k := range ord {
					limits = append(limits, limit(kinds[k], j == 2))
				}
				h := mustNew(t, limits).Wrap(ok)
				// fits reports whether kind's key has an event left: spend
				// takes it (Pace reserves rather than peeks); Shared and
				// Bucket can only be looked at by taking.
				fits := func(kind string, spend bool) bool {
					switch kind {
					case "pace":
						if spend {
							res := p.Reserve("k-pace")
							return res.OK()
						}
						ok, _ := p.Peek("k-pace")
						return ok
					case "shared":
						r, err := sh.Reserve(ctx, "httplimit:shared:k-shared")
						return err == nil && r.OK()
					default:
						return storeFits(t, st.(driver.Taker), "httplimit:bucket:k-bucket", shapes)
					}
				}
				if mode == "refuse" && !fits(last, true) { // spend the last limit's key
					t.Fatal("could not spend the last limit's key")
				}
				want := map[string]int{"refuse": 429, "key": 400, "store": 503}[mode]
				for range 3 {
					r := from("192.0.2.1")
					for _, k := range kinds {
						r.Header.Set("X-"+k, "k-"+k)
					}
					if w := serve(h, r); w.Code != want {
						t.Fatalf("%d; want %d", w.Code, want)
					}
				}
				for _, k := range ord[:2] {
					if !fits(kinds[k], false) {
						t.Errorf("%s: spent by a request that %s refused", kinds[k], last)
					}
				}
			})
		}
	}
}

// TestAttackPanicRecycles: a handler that panics, before and after
// writing its status, finishes its request (a ReturnOn(500) Bucket gives
// back only when the status is the panic's 500, the slot is released) and
// leaves later requests unaffected: each later request gets its own
// RateLimit field and its own token, and a Return with the panicking
// request's kept request does nothing.
func TestAttackPanicRecycles(t *testing.T) {
	clk := newClock()
	st := newMemory(t, clk)
	m := mustNew(t, []httplimit.Limit{
		httplimit.Bucket(st, 3, 0.001, httplimit.Header("X-Client"), httplimit.Name("b"), httplimit.ReturnOn(http.StatusInternalServerError)),
		httplimit.Slots(st, 1, time.Minute, httplimit.Header("X-Client"), httplimit.Name("s")),
	})
	var kept []*http.Request
	h := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		kept = append(kept, r)
		switch r.URL.Path {
		case "/panic":
			panic(http.ErrAbortHandler)
		case "/panic-after-200":
			w.WriteHeader(200)
			panic(http.ErrAbortHandler)
		}
	}))
	send := func(path, client string) (w *httptest.ResponseRecorder, panicked bool) {
		defer func() { panicked = recover() != nil }()
		r := httptest.NewRequest(http.MethodGet, path, nil)
		r.Header.Set("X-Client", client)
		return serve(h, r), false
	}
	for i := range 20 { // the 500 gives back: the bucket stays full
		if _, p := send("/panic", "a"); !p {
			t.Fatalf("panic %d did not reach the test", i)
		}
	}
	if _, p := send("/panic-after-200", "a"); !p {
		t.Fatal("the second panic did not reach the test")
	}
	for _, r := range kept {
		httplimit.Return(r) // over: gives back nothing (not the 200's token)
	}
	for i := range 2 { // the slot is free; the 200 spent one token
		w, p := send("/", "a")
		if r, _ := rateLimitOf(t, w, "b"); p || w.Code != 200 || r != int64(1-i) {
			t.Fatalf("request %d after the panics: %d, r=%d; want 200, r=%d", i, w.Code, r, 1-i)
		}
	}
	if w, _ := send("/", "a"); w.Code != 429 {
		t.Fatalf("fourth token: %d; want 429", w.Code)
	}
	w, _ := send("/", "b")
	if r, _ := rateLimitOf(t, w, "b"); w.Code != 200 || r != 2 {
		t.Fatalf("another client: %d, r=%d; want 200, 2", w.Code, r)
	}
}

// grantStore is a memory store that records the last Grant of Take.
type grantStore struct {
	*memory.Store
	mu   sync.Mutex
	last driver.Grant
}

func (s *grantStore) Take(ctx context.Context, key string, shapes []driver.Shape) (driver.Grant, error) {
	g, err := s.Store.Take(ctx, key, shapes)
	s.mu.Lock()
	s.last = g
	s.mu.Unlock()
	return g, err
}

// TestAttackBucketFieldsAreTheStores: a Bucket's RateLimit item has the r
// the store reports left and the t in which the store reports the bucket
// full again, rounded up, including when the bucket holds part of a token
// (3 tokens, one per 10 s: a take at 0 and another at 9 s leave 1.9 tokens,
// full in 11 s); a refusal's Retry-After, honoured, admits.
func TestAttackBucketFieldsAreTheStores(t *testing.T) {
	clk := newClock()
	st := &grantStore{Store: memory.New(memory.WithClock(clk.Now))}
	m := mustNew(t, []httplimit.Limit{httplimit.Bucket(st, 3, 0.1, httplimit.ClientIP(), httplimit.Name("b"))})
	h := m.Wrap(ok)
	steps := []time.Duration{0, 9 * time.Second, 4 * time.Second, 0, 0}
	for i, d := range steps {
		clk.Advance(d)
		w := serve(h, from("192.0.2.1"))
		st.mu.Lock()
		g := st.last
		st.mu.Unlock()
		if w.Code == 429 {
			ra, _ := strconv.Atoi(w.Header().Get("Retry-After"))
			if want := int((g.RetryAfter + time.Second - 1) / time.Second); ra != want {
				t.Fatalf("step %d: Retry-After %d; want the store's %v rounded up", i, ra, g.RetryAfter)
			}
			clk.Advance(time.Duration(ra) * time.Second)
			if w := serve(h, from("192.0.2.1")); w.Code != 200 {
				t.Fatalf("step %d: after Retry-After %d s: %d", i, ra, w.Code)
			}
			return
		}
		r, secs := rateLimitOf(t, w, "b")
		if want := int64((g.Reset + time.Second - 1) / time.Second); r != int64(g.Remaining) || secs != want {
			t.Fatalf("step %d: r=%d t=%d; the store reports %d left, full in %v (t=%d)", i, r, secs, g.Remaining, g.Reset, want)
		}
	}
	t.Fatal("no refusal")
}

// TestAttackRetryAfterPassesLaterPace: a Bucket that refuses first, with a
// Pace after it that would refuse for longer: the Retry-After covers both,
// so waiting it admits.
func TestAttackRetryAfterPassesLaterPace(t *testing.T) {
	clk := newClock()
	st := newMemory(t, clk)
	p := newPace(t, 0.05, clk) // 1 per 20 s
	h := mustNew(t, []httplimit.Limit{
		httplimit.Bucket(st, 1, 0.5, httplimit.ClientIP(), httplimit.Name("b")), // 1 per 2 s
		httplimit.Pace(p, httplimit.ClientIP(), httplimit.Name("p")),
	}).Wrap(ok)
	if w := serve(h, from("192.0.2.1")); w.Code != 200 {
		t.Fatalf("first: %d", w.Code)
	}
	w := serve(h, from("192.0.2.1"))
	ra, _ := strconv.Atoi(w.Header().Get("Retry-After"))
	if w.Code != 429 || ra != 20 {
		t.Fatalf("second: %d, Retry-After %d; want 429 after 20 s (the Pace's wait)", w.Code, ra)
	}
	clk.Advance(time.Duration(ra) * time.Second)
	if w := serve(h, from("192.0.2.1")); w.Code != 200 {
		t.Fatalf("after Retry-After: %d", w.Code)
	}
}

// TestAttackHeldStateNotRecycled: a state that a caller is using when its
// request ends is not recycled under it: a ticket held across the end of its
// request (as a late Return holds it between finding it and giving back)
// never becomes a later request's, so giving it back inside each later
// request takes nothing from that request.
func TestAttackHeldStateNotRecycled(t *testing.T) {
	clk := newClock()
	p := newPace(t, 0.001, clk)
	m := mustNew(t, []httplimit.Limit{httplimit.Pace(p, httplimit.Header("X-Client"))})
	var held *httplimit.Ticket
	var release func()
	h := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if held == nil {
			if held, release = httplimit.HoldTicket(r); held == nil {
				t.Error("no ticket in the handler")
			}
			return
		}
		held.Return() // the old request's: over, whatever state this one got
	}))
	const n = 50
	for i := range n {
		r := from("192.0.2.1")
		r.Header.Set("X-Client", strconv.Itoa(i))
		if w := serve(h, r); w.Code != 200 {
			t.Fatalf("request %d: %d", i, w.Code)
		}
	}
	release()
	for i := range n {
		if ok, _ := p.Peek(strconv.Itoa(i)); ok {
			t.Fatalf("client %d has its event back: the held ticket was recycled into its request", i)
		}
	}
}
