package pacer_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ratepace/pace/internal/pacersim"
	"github.com/ratepace/pace/pacer"
)

// e2eServer puts the simulation's server rules (a sliding window, refused
// calls not counted, Retry-After in whole seconds) behind real HTTP, with
// time compressed: the window is 2 s instead of a minute.
type e2eServer struct {
	mu     sync.Mutex
	start  time.Time
	limit  int
	window *pacersim.Server
}

func (s *e2eServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	d := s.window.Decide(time.Since(s.start), s.limit)
	s.mu.Unlock()
	h := w.Header()
	h.Set("X-Ratelimit-Limit", strconv.Itoa(d.Limit))
	h.Set("X-Ratelimit-Used", strconv.Itoa(d.Used))
	h.Set("X-Ratelimit-Remaining", strconv.Itoa(max(0, d.Limit-d.Used)))
	h.Set("RateLimit-Policy", fmt.Sprintf(`"default";q=%d;w=%d`, d.Limit, int(s.window.Window/time.Second)))
	if !d.Accepted {
		h.Set("Retry-After", strconv.Itoa(int(d.RetryAfter/time.Second)))
		w.WriteHeader(http.StatusTooManyRequests)
	}
}

// TestEndToEnd runs greedy clients, each with its own Pacer and Transport
// (separate processes in spirit), against one key of a real HTTP server on
// 127.0.0.1, and checks the 429 ratio and the fairness.
func TestEndToEnd(t *testing.T) {
	const (
		clients  = 4
		limit    = 60 // calls per 2 s window
		duration = 18 * time.Second
	)
	srv := &e2eServer{limit: limit, window: &pacersim.Server{Window: 2 * time.Second}}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	srv.start = time.Now()

	ctx, cancel := context.WithTimeout(context.Background(), duration)
	defer cancel()
	// late counts the calls accepted after four windows, when the start
	// is over: the fairness is measured on those.
	type tally struct{ ok, refused, late int }
	tallies := make([]tally, clients)
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			// Each client learns the window from RateLimit-Policy; its
			// default of a minute would be wrong by a factor of 30.
			p := pacer.MustNew(pacer.WithSeed(uint64(i) + 1))
			base := &http.Transport{}
			defer base.CloseIdleConnections()
			client := &http.Client{Transport: pacer.Transport(base, p)}
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL, nil)
				resp, err := client.Do(req)
				if err != nil {
					continue // the context ended during the wait or the call
				}
				resp.Body.Close()
				late := time.Since(srv.start) > 8*time.Second // after four windows
				switch {
				case resp.StatusCode == http.StatusTooManyRequests:
					tallies[i].refused++
				case late:
					tallies[i].late++
					tallies[i].ok++
				default:
					tallies[i].ok++
				}
			}
		}(i)
	}
	wg.Wait()

	var ok, refused int
	var late []float64
	for _, x := range tallies {
		ok += x.ok
		refused += x.refused
		late = append(late, float64(x.late))
	}
	ratio := float64(refused) / float64(ok+refused)
	j := pacersim.Jain(late)
	capacity := limit * duration.Seconds() / 2
	t.Logf("accepted %d (utilisation %.2f of %v), refused %d (429 ratio %.4f), per client after four windows %v (J %.3f)",
		ok, float64(ok)/capacity, capacity, refused, ratio, late, j)
	if ratio > e2eMaxRatio {
		t.Errorf("429 ratio = %.4f; want <= %.3f", ratio, e2eMaxRatio)
	}
	if j < e2eMinJain || math.IsNaN(j) {
		t.Errorf("Jain's index after four windows = %.3f; want >= %.2f", j, e2eMinJain)
	}
	if float64(ok) < 0.5*capacity {
		t.Errorf("accepted %d calls; want at least half the capacity (%v): a pacer that denies all would pass the other checks", ok, capacity)
	}
}

// Margins chosen from measurement on a 2-core machine, 12 runs of which 8
// ran at once: the 429 ratio was 0.87%–0.89% and Jain's index 0.88–0.97
// (TestEndToEndControl shows unpaced clients far above the ratio bound).
// J >= 0.78 fails when one client is starved while three share the rest
// (J = 0.75), with a margin of 0.1 below the worst run measured.
const (
	e2eMaxRatio = 0.03
	e2eMinJain  = 0.78
)

// TestEndToEndControl runs the same server with unpaced clients, to show
// that the 429 bound of TestEndToEnd discriminates.
func TestEndToEndControl(t *testing.T) {
	srv := &e2eServer{limit: 60, window: &pacersim.Server{Window: 2 * time.Second}}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	srv.start = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var mu sync.Mutex
	var ok, refused int
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			base := &http.Transport{}
			defer base.CloseIdleConnections()
			client := &http.Client{Transport: base}
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL, nil)
				resp, err := client.Do(req)
				if err != nil {
					continue
				}
				resp.Body.Close()
				mu.Lock()
				if resp.StatusCode == http.StatusTooManyRequests {
					refused++
				} else {
					ok++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	ratio := float64(refused) / float64(ok+refused)
	t.Logf("unpaced: accepted %d, refused %d (429 ratio %.3f)", ok, refused, ratio)
	if ratio <= e2eMaxRatio {
		t.Fatalf("unpaced clients got a 429 ratio of %.3f, within the bound %.3f the pacer is held to: the bound tests nothing", ratio, e2eMaxRatio)
	}
}
