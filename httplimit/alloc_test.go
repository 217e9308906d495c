package httplimit_test

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/httplimit"
)

// TestAdmitAllocatesOnce: a request admitted by a Pace limit, which the
// handler could give back (Return), allocates once: the request copy that
// carries its state, with that state in the same allocation. Its RateLimit
// line is a cached one also when the quota is far above the cache (10⁹
// a second here), as the first request of an idle client shows r=q-1. It
// made three allocations: the copy, the state apart, and the line.
func TestAdmitAllocatesOnce(t *testing.T) {
	p, err := pace.New(1e9)
	if err != nil {
		t.Fatal(err)
	}
	m := mustNew(t, []httplimit.Limit{httplimit.Pace(p, httplimit.ClientIP())})
	h := m.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	reqs := make([]*http.Request, 100)
	for i := range reqs {
		reqs[i] = from("10.0.0." + strconv.Itoa(i))
	}
	w := &discard{h: http.Header{}}
	i := 0
	got := testing.AllocsPerRun(1000, func() {
		h.ServeHTTP(w, reqs[i%len(reqs)])
		i++
	})
	// Under -race sync.Pool drops a share of what is put back on purpose,
	// so the recycled state is sometimes made again.
	if want := 1 + float64(poolSlack); got > want {
		t.Fatalf("%v allocations a request; want at most %v", got, want)
	}
	if w.h.Get("RateLimit") != `"pace-0";r=999999999;t=1` {
		t.Fatalf("RateLimit %q", w.h.Values("RateLimit"))
	}
}

// TestRefuseAllocatesNothing: a refused request, answered with its 429,
// problem body, Retry-After and RateLimit fields, allocates nothing: the
// handler never runs, so nothing can be given back and no request copy is
// made. It made two allocations (the copy and its call), as an admission.
func TestRefuseAllocatesNothing(t *testing.T) {
	p, err := pace.New(0.001)
	if err != nil {
		t.Fatal(err)
	}
	m := mustNew(t, []httplimit.Limit{httplimit.Pace(p, httplimit.ClientIP())})
	h := m.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { t.Error("handler reached") }))
	reqs := make([]*http.Request, 100)
	for i := range reqs {
		reqs[i] = from("10.0.0." + strconv.Itoa(i))
		p.Reserve("10.0.0." + strconv.Itoa(i)) // spent
	}
	w := &discard{h: http.Header{}}
	i := 0
	got := testing.AllocsPerRun(1000, func() {
		h.ServeHTTP(w, reqs[i%len(reqs)])
		i++
	})
	if want := float64(poolSlack); got > want {
		t.Fatalf("%v allocations a refused request; want at most %v", got, want)
	}
	if w.h.Get("Retry-After") != "1000" || w.h.Get("RateLimit") != `"pace-0";r=0;t=1000` {
		t.Fatalf("Retry-After %q, RateLimit %q", w.h.Values("Retry-After"), w.h.Values("RateLimit"))
	}
}
