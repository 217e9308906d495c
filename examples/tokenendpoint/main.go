// Command tokenendpoint shows a Pace guarding an OAuth2-style token endpoint.
//
// It starts a client-credentials token endpoint on 127.0.0.1 (a random port),
// paced per client id: each request reserves one exchange from the named
// client's pace before the secret is checked, and gives it back when the
// secret is wrong. Then, for a few seconds, it drives the endpoint itself:
//
//   - an honest client asks at twice its pace, with the right secret;
//   - a forger names the honest client's id with wrong secrets, far faster;
//   - a flood of made-up client ids, each asked once.
//
// Every second it prints what the honest client got (accepted, paced with
// 429, rejected), the forger's attempts, the live rows of the pace and the
// heap. The honest client gets its whole pace despite the forger, and the
// rows and the heap stay flat despite the flood. It exits by itself.
//
//	go run ./examples/tokenendpoint
package main

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratepace/pace"
)

const (
	pacePerSecond = 5 // exchanges per second per client id
	seconds       = 5
	honestID      = "app-1"
	honestSecret  = "s3cr3t-app-1"
)

// server is the token endpoint.
type server struct {
	pace    *pace.Pace
	secrets map[string]string
}

func (s *server) token(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, `{"error":"invalid_request"}`, http.StatusMethodNotAllowed)
		return
	}
	if err := r.ParseForm(); err != nil || r.PostForm.Get("grant_type") != "client_credentials" {
		http.Error(w, `{"error":"unsupported_grant_type"}`, http.StatusBadRequest)
		return
	}
	id, secret := r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")

	// Debit and decide in one step, before the (expensive) secret check.
	res := s.pace.Reserve(id)
	w.Header().Set("RateLimit-Policy", fmt.Sprintf(`"per-client";q=%d;w=1`, pacePerSecond))
	if !res.OK() {
		wait := int(math.Ceil(res.RetryAfter().Seconds()))
		w.Header().Set("Retry-After", strconv.Itoa(wait))
		w.Header().Set("RateLimit", fmt.Sprintf(`"per-client";r=0;t=%d`, wait))
		http.Error(w, `{"error":"slow_down"}`, http.StatusTooManyRequests)
		return
	}
	want, known := s.secrets[id]
	if !known || subtle.ConstantTimeCompare([]byte(secret), []byte(want)) != 1 {
		res.Return() // the exchange did not happen: it spends none of id's pace
		http.Error(w, `{"error":"invalid_client"}`, http.StatusUnauthorized)
		return
	}
	w.Header().Set("RateLimit", fmt.Sprintf(`"per-client";r=%d;t=1`, res.Remaining()))
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"access_token": "t-" + id, "token_type": "Bearer", "expires_in": 3600})
}

// tally counts outcomes by status code.
type tally struct{ ok, paced, rejected, other atomic.Int64 }

func (t *tally) add(code int) {
	switch code {
	case http.StatusOK:
		t.ok.Add(1)
	case http.StatusTooManyRequests:
		t.paced.Add(1)
	case http.StatusUnauthorized:
		t.rejected.Add(1)
	default:
		t.other.Add(1)
	}
}

func (t *tally) total() int64 {
	return t.ok.Load() + t.paced.Load() + t.rejected.Load() + t.other.Load()
}

func main() {
	log.SetFlags(0)
	p, err := pace.New(pacePerSecond)
	if err != nil {
		log.Fatal(err)
	}
	srv := &server{pace: p, secrets: map[string]string{honestID: honestSecret}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(srv.token), ReadHeaderTimeout: 5 * time.Second}
	go hs.Serve(ln)
	endpoint := "http://" + ln.Addr().String() + "/token"
	fmt.Printf("token endpoint on %s, paced at %d exchanges per second per client id\n\n", endpoint, pacePerSecond)

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 5 * time.Second}
	post := func(ctx context.Context, id, secret string) int {
		form := url.Values{"grant_type": {"client_credentials"}, "client_id": {id}, "client_secret": {secret}}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(form.Encode()))
		if err != nil {
			return 0
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := client.Do(req)
		if err != nil {
			return 0
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}

	ctx, cancel := context.WithTimeout(context.Background(), seconds*time.Second)
	defer cancel()
	var honest, forger, flood tally
	var made atomic.Int64
	var wg sync.WaitGroup
	// every sends do on a fixed schedule, open loop (a slow answer does not
	// delay the next request), with at most 32 requests in flight.
	every := func(interval time.Duration, do func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			inflight := make(chan struct{}, 32)
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				select {
				case inflight <- struct{}{}:
				default:
					continue // the machine is saturated: skip this tick
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					do()
					<-inflight
				}()
			}
		}()
	}
	var guesses atomic.Int64
	every(time.Second/(2*pacePerSecond), func() { honest.add(post(ctx, honestID, honestSecret)) })
	every(time.Second/300, func() { forger.add(post(ctx, honestID, "guess-"+strconv.FormatInt(guesses.Add(1), 10))) })
	every(time.Second/600, func() { flood.add(post(ctx, "made-up-"+strconv.FormatInt(made.Add(1), 36), "x")) })

	fmt.Printf("%6s  %-28s  %9s  %9s  %9s  %8s\n", "", "honest client", "forger", "flood", "", "")
	fmt.Printf("%6s  %8s %8s %10s  %9s  %9s  %9s  %8s\n", "second", "accepted", "paced", "rejected", "attempts", "attempts", "live rows", "heap")
	var last struct{ ok, paced, rejected, forged, flooded int64 }
	begin := time.Now()
	for sec := 1; sec <= seconds; sec++ {
		time.Sleep(time.Until(begin.Add(time.Duration(sec) * time.Second)))
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		ok, paced, rejected := honest.ok.Load(), honest.paced.Load(), honest.rejected.Load()
		forged, flooded := forger.total(), flood.total()
		fmt.Printf("%6d  %8d %8d %10d  %9d  %9d  %9d  %6.1f MiB\n", sec,
			ok-last.ok, paced-last.paced, rejected-last.rejected, forged-last.forged, flooded-last.flooded,
			p.Len(), float64(m.HeapAlloc)/(1<<20))
		last.ok, last.paced, last.rejected, last.forged, last.flooded = ok, paced, rejected, forged, flooded
	}
	cancel()
	wg.Wait()
	hs.Shutdown(context.Background())

	fmt.Printf("\nhonest client: %d accepted of %d asked; its pace allows %d over %d s (%d/s plus a burst of %d)\n",
		honest.ok.Load(), honest.total(), pacePerSecond*(seconds+1), seconds, pacePerSecond, pacePerSecond)
	fmt.Printf("forger: %d attempts, none accepted: %d rejected as invalid_client, %d paced while the bucket was empty\n",
		forger.total(), forger.rejected.Load(), forger.paced.Load())
	fmt.Printf("flood: %d made-up ids asked once each, %d rows left behind\n", flood.total(), p.Len())
	if forger.ok.Load() != 0 || honest.rejected.Load() != 0 {
		os.Exit(1) // cannot happen: a wrong secret is never accepted, the right one never rejected
	}
}
