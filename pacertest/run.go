package pacertest

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"time"
)

// Client builds the transport of client id of a run (seed distinguishes
// runs): the pacer under test around base.
type Client func(id int, seed uint64, base http.RoundTripper) http.RoundTripper

// Result is what one run reached.
type Result struct {
	Accepted, Refused int
	// Utilisation is the accepted calls over what the server allows in
	// the run.
	Utilisation float64
	// RejectRatio is Refused / (Accepted + Refused).
	RejectRatio float64
	// Jain is Jain's index of the clients' accepted calls after the first
	// window (NaN for one client).
	Jain float64
	// Early counts calls that came before a Retry-After their client had
	// been sent; LateRefused the refusals after the first window.
	Early, LateRefused int
}

// recorder is the outermost handler: it sees each call's client (the
// X-Client header) and the library's decision, and keeps its own account,
// independent of the pacer.
type recorder struct {
	mu        sync.Mutex
	start     time.Time
	window    time.Duration
	next      http.Handler
	notBefore map[string]time.Time
	late      map[string]int // accepted after the first window
	res       Result
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	client := req.Header.Get("X-Client")
	arrived := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	r.mu.Lock() // one decision at a time, so that the account is in order
	defer r.mu.Unlock()
	if arrived.Before(r.notBefore[client]) {
		r.res.Early++
	}
	r.next.ServeHTTP(sw, req)
	firstWindow := arrived.Sub(r.start) < r.window
	if sw.status == http.StatusTooManyRequests {
		r.res.Refused++
		if !firstWindow {
			r.res.LateRefused++
		}
		if at, ok := retryAfterAt(w.Header().Get("Retry-After"), arrived); ok {
			r.notBefore[client] = at
		}
		return
	}
	r.res.Accepted++
	if !firstWindow {
		r.late[client]++
	}
}

// retryAfterAt reads a Retry-After as the libraries write it: whole
// seconds, or an HTTP date (go-limiter writes RFC 1123 with UTC). A date
// is truncated to the second, so the client may call from that second on.
func retryAfterAt(v string, now time.Time) (time.Time, bool) {
	if v == "" {
		return time.Time{}, false
	}
	if n, err := strconv.Atoi(v); err == nil {
		return now.Add(time.Duration(n) * time.Second), true
	}
	for _, layout := range []string{http.TimeFormat, time.RFC1123} {
		if t, err := time.Parse(layout, v); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

// Run runs clients greedy clients, each with its own transport from
// newClient, against lib allowing limit calls per window, for duration,
// and reports what they reached.
func Run(lib Lib, limit int, window time.Duration, clients int, duration time.Duration, seed uint64, newClient Client) (Result, error) {
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	h, stop, err := lib.Wrap(limit, window, ok)
	if err != nil {
		return Result{}, err
	}
	defer stop()
	rec := &recorder{window: window, next: h, notBefore: map[string]time.Time{}, late: map[string]int{}}
	ts := httptest.NewServer(rec)
	defer ts.Close()
	rec.start = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), duration)
	defer cancel()
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			base := &http.Transport{}
			defer base.CloseIdleConnections()
			hc := &http.Client{Transport: newClient(c, seed, base)}
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL, nil)
				req.Header.Set("X-Client", strconv.Itoa(c))
				if resp, err := hc.Do(req); err == nil {
					resp.Body.Close()
				}
			}
		}()
	}
	wg.Wait()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	res := rec.res
	allowed := float64(limit) * duration.Seconds() / window.Seconds()
	if lib.Burst {
		allowed += float64(limit)
	}
	res.Utilisation = float64(res.Accepted) / allowed
	res.RejectRatio = float64(res.Refused) / math.Max(1, float64(res.Accepted+res.Refused))
	res.Jain = math.NaN()
	if clients > 1 {
		var s, s2 float64
		for c := range clients {
			x := float64(rec.late[strconv.Itoa(c)])
			s, s2 = s+x, s2+x*x
		}
		res.Jain = 1
		if s2 > 0 {
			res.Jain = s * s / (float64(clients) * s2)
		}
	}
	return res, nil
}
