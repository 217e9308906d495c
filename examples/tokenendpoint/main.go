// Command tokenendpoint shows httplimit guarding an OAuth2-style token
// endpoint.
//
// It starts a client-credentials token endpoint on 127.0.0.1 (a random
// port) behind two limits: a pace per source address, spent by every
// request, and a pace per client id with ReturnOn(401), so that only
// accepted presentations spend a client's pace. Then, for a few seconds, it
// drives the endpoint itself:
//
//   - an honest client asks at twice its pace, with the right secret;
//   - a forger names the honest client's id with wrong secrets, far faster;
//   - a flood of made-up client ids, each asked once.
//
// Every second it prints what the honest client got (accepted, paced with
// 429, rejected), the forger's attempts, the live rows of the per-client
// pace and the heap. The honest client gets its whole pace despite the
// forger, and the rows and the heap stay flat despite the flood. The three
// come from three loopback addresses (127.0.0.2 to .4, where the system
// allows it), so the flood also meets the per-address limit. It exits by
// itself.
//
//	go run ./examples/tokenendpoint
//
// Reserve-then-return (ReturnOn alone) holds the client's event while its
// secret is checked. That is fine for a fast check; with a slow one (a
// password hash), the forger's requests in flight hold the client's whole
// bucket. Make the check take 50 ms and see the honest client starve:
//
//	go run ./examples/tokenendpoint -check 50ms
//
// then decide after verification instead (DecideAfterVerify: look at the
// pace before the check, take the event only once the secret is verified),
// and see it get its pace back:
//
//	go run ./examples/tokenendpoint -check 50ms -after
package main

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
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
	"github.com/ratepace/pace/httplimit"
)

const (
	pacePerSecond = 5 // exchanges per second per client id
	seconds       = 5
	honestID      = "app-1"
	honestSecret  = "s3cr3t-app-1"
)

var (
	check = flag.Duration("check", 0, "how long checking a secret takes (a password hash takes tens of milliseconds)")
	after = flag.Bool("after", false, "decide after verification (DecideAfterVerify) instead of reserve-then-return")
)

// token is the endpoint's handler; httplimit has already decided both
// limits by the time it runs.
func token(secrets map[string]string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
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
		time.Sleep(*check) // the cost of checking the secret
		want, known := secrets[id]
		if !known || subtle.ConstantTimeCompare([]byte(secret), []byte(want)) != 1 {
			// 401: ReturnOn gives the client's event back (or, deciding
			// after verification, none was taken).
			http.Error(w, `{"error":"invalid_client"}`, http.StatusUnauthorized)
			return
		}
		if !httplimit.Verified(w, r) { // takes the event in -after mode; true otherwise
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"access_token": "t-" + id, "token_type": "Bearer", "expires_in": 3600})
	}
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

// clientFrom returns an HTTP client whose connections come from the
// loopback address ip, or from the default one when the system does not
// allow binding it (ok false).
func clientFrom(ip string) (c *http.Client, ok bool) {
	local := &net.TCPAddr{IP: net.ParseIP(ip)}
	if ln, err := net.ListenTCP("tcp", local); err == nil {
		ln.Close()
		ok = true
	} else {
		local = nil
	}
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	if local != nil {
		dialer.LocalAddr = local
	}
	return &http.Client{
		Transport: &http.Transport{DialContext: dialer.DialContext, MaxIdleConnsPerHost: 64},
		Timeout:   5 * time.Second,
	}, ok
}

func main() {
	flag.Parse()
	log.SetFlags(0)
	honestClient, distinct := clientFrom("127.0.0.2")
	forgerClient, _ := clientFrom("127.0.0.3")
	floodClient, _ := clientFrom("127.0.0.4")
	perIPRate := 400.0 // the flood (600/s) meets it; the forger (300/s) does not
	if !distinct {
		perIPRate = 2000 // all three share 127.0.0.1: a per-address limit would pace them together
	}

	perIP, err := pace.New(perIPRate)
	if err != nil {
		log.Fatal(err)
	}
	perClient, err := pace.New(pacePerSecond)
	if err != nil {
		log.Fatal(err)
	}
	clientOpts := []httplimit.Option{httplimit.Name("per-client"), httplimit.ReturnOn(http.StatusUnauthorized)}
	mode := "reserve-then-return"
	if *after {
		clientOpts = append(clientOpts, httplimit.DecideAfterVerify())
		mode = "decide after verification"
	}
	m, err := httplimit.New([]httplimit.Limit{
		httplimit.Pace(perIP, httplimit.ClientIP(), httplimit.Name("per-ip")), // cheap: before the body is read
		httplimit.Pace(perClient, httplimit.ClientID(), clientOpts...),
	})
	if err != nil {
		log.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	hs := &http.Server{Handler: m.Wrap(token(map[string]string{honestID: honestSecret})), ReadHeaderTimeout: 5 * time.Second}
	go hs.Serve(ln)
	endpoint := "http://" + ln.Addr().String() + "/token"
	fmt.Printf("token endpoint on %s, paced at %d exchanges per second per client id (%s, %v secret check)\n", endpoint, pacePerSecond, mode, *check)
	fmt.Printf("and at %v per second per source address\n\n", perIPRate)

	post := func(ctx context.Context, c *http.Client, id, secret string) int {
		form := url.Values{"grant_type": {"client_credentials"}, "client_id": {id}, "client_secret": {secret}}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(form.Encode()))
		if err != nil {
			return 0
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := c.Do(req)
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
	every(time.Second/(2*pacePerSecond), func() { honest.add(post(ctx, honestClient, honestID, honestSecret)) })
	every(time.Second/300, func() {
		forger.add(post(ctx, forgerClient, honestID, "guess-"+strconv.FormatInt(guesses.Add(1), 10)))
	})
	every(time.Second/600, func() { flood.add(post(ctx, floodClient, "made-up-"+strconv.FormatInt(made.Add(1), 36), "x")) })

	fmt.Printf("%6s  %-28s  %9s  %9s  %9s  %8s\n", "", "honest client", "forger", "flood", "", "")
	fmt.Printf("%6s  %8s %8s %10s  %9s  %9s  %9s  %8s\n", "second", "accepted", "paced", "rejected", "attempts", "attempts", "live rows", "heap")
	var last struct{ ok, paced, rejected, forged, flooded int64 }
	begin := time.Now()
	for sec := 1; sec <= seconds; sec++ {
		time.Sleep(time.Until(begin.Add(time.Duration(sec) * time.Second)))
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		ok, paced, rejected := honest.ok.Load(), honest.paced.Load(), honest.rejected.Load()
		forged, flooded := forger.total(), flood.total()
		fmt.Printf("%6d  %8d %8d %10d  %9d  %9d  %9d  %6.1f MiB\n", sec,
			ok-last.ok, paced-last.paced, rejected-last.rejected, forged-last.forged, flooded-last.flooded,
			perClient.Len(), float64(ms.HeapAlloc)/(1<<20))
		last.ok, last.paced, last.rejected, last.forged, last.flooded = ok, paced, rejected, forged, flooded
	}
	cancel()
	wg.Wait()
	hs.Shutdown(context.Background())

	fmt.Printf("\nhonest client: %d accepted of %d asked; its pace allows %d over %d s (%d/s plus a burst of %d)\n",
		honest.ok.Load(), honest.total(), pacePerSecond*(seconds+1), seconds, pacePerSecond, pacePerSecond)
	fmt.Printf("forger: %d attempts, none accepted: %d rejected as invalid_client, %d paced while the bucket was empty\n",
		forger.total(), forger.rejected.Load(), forger.paced.Load())
	fmt.Printf("flood: %d made-up ids asked once each, %d paced by the per-address limit, %d rows left behind\n",
		flood.total(), flood.paced.Load(), perClient.Len())
	if !distinct {
		fmt.Println("(the clients shared 127.0.0.1: this system does not let them bind 127.0.0.2 to .4)")
	}
	if forger.ok.Load() != 0 || honest.rejected.Load() != 0 {
		os.Exit(1) // cannot happen: a wrong secret is never accepted, the right one never rejected
	}
}
