package httplimit_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratepace/pace/httplimit"
	"github.com/ratepace/pace/memory"
)

// TestForgerCostsNothing: a forger presenting the honest client's id with
// wrong secrets at 300 requests per second, over HTTP through the
// middleware, spends nothing of the client's pace: the honest client asking
// at 4/s under a pace of 5/s has every request accepted, alone and under
// attack. Time is simulated: ten seconds in steps of 1/300 s. The limit is
// a Pace, and then a Bucket of 5 tokens refilled at 5/s in the memory Store,
// given back through Store.Refund.
func TestForgerCostsNothing(t *testing.T) {
	for _, kind := range []string{"pace", "bucket"} {
		t.Run(kind, func(t *testing.T) { forgerRun(t, kind) })
	}
}

func forgerRun(t *testing.T, kind string) {
	for _, attack := range []bool{false, true} {
		clk := newClock()
		opts := []httplimit.Option{httplimit.Name("per-client"), httplimit.ReturnOn(http.StatusUnauthorized)}
		lim := httplimit.Pace(newPace(t, 5, clk), httplimit.ClientID(), opts...)
		if kind == "bucket" {
			lim = httplimit.Bucket(memory.New(memory.WithClock(clk.Now)), 5, 5, httplimit.ClientID(), opts...)
		}
		m := mustNew(t, []httplimit.Limit{lim})
		srv := httptest.NewServer(m.Wrap(tokenHandler(nil, false)))
		post := func(secret string) int {
			form := url.Values{"grant_type": {"client_credentials"}, "client_id": {"app-1"}, "client_secret": {secret}}
			resp, err := srv.Client().Post(srv.URL, "application/x-www-form-urlencoded", strings.NewReader(form.Encode()))
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode
		}
		const steps = 10 * 300 // ten seconds of 1/300 s
		honest, accepted, forged := 0, 0, map[int]int{}
		for step := range steps {
			if attack {
				forged[post("guess-"+strconv.Itoa(step))]++
			}
			if step%75 == 0 { // every 250 ms: 4 per second
				honest++
				if code := post("right"); code == 200 {
					accepted++
				} else {
					t.Errorf("attack %v, %v: honest request answered %d", attack, time.Duration(step)*time.Second/300, code)
				}
			}
			clk.Advance(time.Second / 300)
		}
		srv.Close()
		if accepted != honest || honest != 40 {
			t.Fatalf("attack %v: honest client accepted %d of %d", attack, accepted, honest)
		}
		if attack && forged[http.StatusUnauthorized] != steps {
			t.Fatalf("forger's answers %v; want %d 401s", forged, steps)
		}
	}
}

// TestSlowCheckForgersInFlight: with a 50 ms check (a password hash) and
// 50 forged requests always in flight, reserve-then-return lets the
// forgers hold the honest client's whole bucket, and decide-after-
// verification does not: the honest client, asking at half its pace of
// 5/s, has at least 9 of 10 requests admitted.
//
// Time is simulated in steps of 1 ms: every step a new forged request
// arrives (1000/s, so 50 are inside their 50 ms check at any time), and the
// forged requests that arrived 50 ms before finish their check, the test
// waiting for each to enter or leave the handler before moving on.
func TestSlowCheckForgersInFlight(t *testing.T) {
	for _, after := range []bool{false, true} {
		got := slowCheckRun(t, after)
		t.Logf("decide after verification %v: honest client admitted %d of 10", after, got)
		if after && got < 9 {
			t.Fatalf("decide after verification: honest client admitted %d of 10; want at least 9", got)
		}
		if !after && got >= 9 {
			t.Fatalf("reserve-then-return: honest client admitted %d of 10; the attack is not reproduced, so the test shows nothing", got)
		}
	}
}

// forged is one forged request of slowCheckRun.
type forged struct {
	start   int
	entered chan struct{} // the handler began the check
	gate    chan struct{} // closed when the check is over
	done    chan struct{} // the middleware returned
}

func slowCheckRun(t *testing.T, after bool) int {
	clk := newClock()
	p := newPace(t, 5, clk)
	opts := []httplimit.Option{httplimit.ReturnOn(http.StatusUnauthorized)}
	if after {
		opts = append(opts, httplimit.DecideAfterVerify())
	}
	m := mustNew(t, []httplimit.Limit{httplimit.Pace(p, httplimit.ClientID(), opts...)})
	var mu sync.Mutex
	byID := map[string]*forged{}
	check := func(r *http.Request) {
		if r.PostForm.Get("client_secret") == "right" {
			return // the honest client's check: its time does not matter here
		}
		mu.Lock()
		f := byID[r.PostForm.Get("client_secret")]
		mu.Unlock()
		f.entered <- struct{}{}
		<-f.gate
	}
	h := m.Wrap(tokenHandler(check, after))
	var inflight []*forged
	admitted := 0
	for ms := 0; ms < 5000; ms++ {
		clk.Advance(time.Millisecond)
		// Forged requests whose 50 ms check is over fail it.
		for len(inflight) > 0 && inflight[0].start <= ms-50 {
			f := inflight[0]
			inflight = inflight[1:]
			close(f.gate)
			<-f.done
		}
		// A new forged request arrives, and is in the check or refused.
		f := &forged{start: ms, entered: make(chan struct{}), gate: make(chan struct{}), done: make(chan struct{})}
		secret := "guess-" + strconv.Itoa(ms)
		mu.Lock()
		byID[secret] = f
		mu.Unlock()
		go func() {
			serve(h, tokenRequest("198.51.100.9", "app-1", secret))
			close(f.done)
		}()
		select {
		case <-f.entered:
			inflight = append(inflight, f)
		case <-f.done:
		}
		// The honest client, at half its pace, once the attack is under way.
		if ms >= 1000 && (ms-1000)%400 == 0 && ms < 5000 {
			if w := serve(h, tokenRequest("192.0.2.1", "app-1", "right")); w.Code == 200 {
				admitted++
			}
		}
	}
	for _, f := range inflight {
		close(f.gate)
		<-f.done
	}
	if after && len(inflight) != 50 {
		t.Fatalf("%d forged requests in flight at the end; want 50", len(inflight))
	}
	return admitted
}
