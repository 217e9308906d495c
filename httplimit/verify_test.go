package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	"github.com/ratepace/pace/httplimit"
)

// TestVerifiedRefusesWhenTakenMeanwhile: two requests of one client look
// at its last event together; the first to be verified takes it, and
// Verified refuses the second, writing the 429 itself.
func TestVerifiedRefusesWhenTakenMeanwhile(t *testing.T) {
	clk := newClock()
	p := newPace(t, 1, clk)
	var c counter
	m := mustNew(t, []httplimit.Limit{
		httplimit.Pace(p, httplimit.ClientID(), httplimit.Name("per-client"), httplimit.DecideAfterVerify()),
	}, c.Option())
	entered := make(chan struct{})
	gates := map[string]chan struct{}{"a": make(chan struct{}), "b": make(chan struct{})}
	var verifiedTwice bool
	h := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		entered <- struct{}{}
		<-gates[r.PostForm.Get("client_secret")]
		if !httplimit.Verified(w, r) {
			return
		}
		verifiedTwice = httplimit.Verified(w, r)
		w.Write([]byte("token"))
	}))
	var wg sync.WaitGroup
	res := map[string]*httptest.ResponseRecorder{}
	for _, secret := range []string{"a", "b"} {
		res[secret] = httptest.NewRecorder()
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.ServeHTTP(res[secret], tokenRequest("192.0.2.1", "app-1", secret))
		}()
		<-entered // both looked at the one event, and hold nothing
	}
	if p.Len() != 0 {
		t.Fatalf("looking took something: %d rows", p.Len())
	}
	close(gates["a"])
	close(gates["b"])
	wg.Wait()
	codes := []int{res["a"].Code, res["b"].Code}
	if !(codes[0] == 200 && codes[1] == 429 || codes[0] == 429 && codes[1] == 200) {
		t.Fatalf("codes %v; want one 200 and one 429", codes)
	}
	for _, w := range res {
		if w.Code == 429 {
			if ra, err := strconv.Atoi(w.Header().Get("Retry-After")); err != nil || ra != 1 {
				t.Fatalf("Verified's refusal: Retry-After %q", w.Header().Get("Retry-After"))
			}
			problemOf(t, w)
		} else {
			rl, _ := limitOf(t, w, "per-client")
			if rl == nil || rl.intParam(t, "r") != 0 {
				t.Fatalf("Verified's admission: RateLimit %q", w.Header().Values("RateLimit"))
			}
		}
	}
	if !verifiedTwice {
		t.Fatal("a second Verified reported false")
	}
	if c.Get("per-client", httplimit.Admitted) != 1 || c.Get("per-client", httplimit.Refused) != 1 {
		t.Fatalf("counts %v", &c)
	}
}

// TestVerifiedNeverCalled: a handler that never calls Verified spends the
// event when it answers a success, and nothing when it answers an error or
// a ReturnOn status, or calls Return.
func TestVerifiedNeverCalled(t *testing.T) {
	for _, c := range []struct {
		name   string
		status int
		ret    bool
		spent  bool
	}{
		{"200", 200, false, true},
		{"302", 302, false, true},
		{"401", 401, false, false},
		{"500", 500, false, false},
		{"304 in ReturnOn", 304, false, false},
		{"Return", 200, true, false},
	} {
		clk := newClock()
		p := newPace(t, 2, clk)
		m := mustNew(t, []httplimit.Limit{httplimit.Pace(p, httplimit.ClientIP(), httplimit.DecideAfterVerify(), httplimit.ReturnOn(304))})
		h := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if c.ret {
				httplimit.Return(r)
			}
			w.WriteHeader(c.status)
		}))
		for range 3 {
			serve(h, from("192.0.2.1"))
		}
		// Spent: two fit, the third was looked at with none left and refused.
		w := serve(h, from("192.0.2.1"))
		if c.spent != (w.Code == 429) {
			t.Errorf("%s: fourth request answered %d; spent %v", c.name, w.Code, c.spent)
		}
		if !c.spent && p.Len() != 0 {
			t.Errorf("%s: %d rows", c.name, p.Len())
		}
	}
}
