//go:build pacerzoo

package pacer_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ratepace/pace/internal/pacersim"
	"github.com/ratepace/pace/pacer"
)

// zooServer puts one kind of the zoo behind real HTTP, on the real clock.
// It also checks, per client (the X-Client header), that no call comes
// before a Retry-After it sent that client.
type zooServer struct {
	mu        sync.Mutex
	start     time.Time
	kind      pacersim.Kind
	alg       pacersim.Algorithm
	notBefore map[string]time.Time
	early     int
	ok        map[string]int
	refused   int
}

func (s *zooServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	client := r.Header.Get("X-Client")
	if now.Before(s.notBefore[client]) {
		s.early++
	}
	d := s.alg.Decide(now.Sub(s.start), s.kind.Limit)
	status, h, _ := s.kind.Format.Render(d, s.kind.Window, now)
	for k, v := range h {
		w.Header()[k] = v
	}
	if d.Accepted {
		s.ok[client]++
	} else {
		s.refused++
		if at, ok := retryAfterAt(h.Get("Retry-After"), now); ok {
			s.notBefore[client] = at
		}
	}
	w.WriteHeader(status)
}

// retryAfterAt reads what the server wrote, independently of the pacer:
// whole seconds, or a date in the two forms the zoo writes.
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

// TestEndToEndZoo runs 4 pacers (pacer.MustNew(), each its own Transport)
// against every kind of the zoo scaled to a 1-3 s window behind httptest,
// all kinds at once, for 9 s, and checks that no call goes before a
// Retry-After and that each kind's 429 ratio and utilisation stay within
// the margins below. It takes about 10 s, hence the build tag:
//
//	go test -tags pacerzoo -run TestEndToEndZoo ./pacer
func TestEndToEndZoo(t *testing.T) {
	const duration = 9 * time.Second
	for i, k := range pacersim.Zoo {
		k.Window = min(max(k.Window, time.Second), 3*time.Second)
		k.Limit = int(20 * k.Window.Seconds())
		k.Name = strconv.Itoa(i) + " " + k.Name
		t.Run(k.String(), func(t *testing.T) {
			t.Parallel()
			srv := &zooServer{kind: k, alg: k.New(k.Window), notBefore: map[string]time.Time{}, ok: map[string]int{}}
			ts := httptest.NewServer(srv)
			defer ts.Close()
			srv.start = time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), duration)
			defer cancel()
			var wg sync.WaitGroup
			for c := 0; c < 4; c++ {
				wg.Add(1)
				go func(c int) {
					defer wg.Done()
					base := &http.Transport{}
					defer base.CloseIdleConnections()
					client := &http.Client{Transport: pacer.Transport(base, pacer.MustNew(pacer.WithSeed(uint64(c)+1)))}
					for ctx.Err() == nil {
						req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL, nil)
						req.Header.Set("X-Client", strconv.Itoa(c))
						resp, err := client.Do(req)
						if err != nil {
							continue
						}
						resp.Body.Close()
					}
				}(c)
			}
			wg.Wait()
			srv.mu.Lock()
			defer srv.mu.Unlock()
			var ok int
			var per []float64
			for c := 0; c < 4; c++ {
				ok += srv.ok[strconv.Itoa(c)]
				per = append(per, float64(srv.ok[strconv.Itoa(c)]))
			}
			capacity := float64(k.Limit) * duration.Seconds() / k.Window.Seconds()
			if k.Burst {
				capacity += float64(k.Limit)
			}
			ratio := float64(srv.refused) / float64(max(1, ok+srv.refused))
			t.Logf("%s: utilisation %.2f, 429 ratio %.4f, J %.3f, early %d", k.Name, float64(ok)/capacity, ratio, pacersim.Jain(per), srv.early)
			if srv.early > 0 {
				t.Errorf("%d calls came before a Retry-After their client had received", srv.early)
			}
			m := e2eZooMarginsFor(k)
			if ratio > m.maxRatio {
				t.Errorf("429 ratio %.4f; want <= %.2f", ratio, m.maxRatio)
			}
			if u := float64(ok) / capacity; u < m.minUtil {
				t.Errorf("utilisation %.2f; want >= %.2f", u, m.minUtil)
			}
			if j := pacersim.Jain(per); j < m.minJain {
				t.Errorf("J %.3f; want >= %.2f", j, m.minJain)
			}
		})
	}
}

// e2eZooMargins are what TestEndToEndZoo asserts for one kind: below the
// worst of repeated runs on a 2-core machine (go test -race -tags pacerzoo
// -parallel 16, every kind at once), by about a fifth; the simulation's
// goals test holds the tight figures. Measured over 18 such runs (and 20
// runs of the Retry-After-only kind alone): utilisation 0.69-1.01 (0.42-0.61
// without any reset, 0.29-0.61 on buckets), 429 ratio 0-4.3%, J 0.68-1.00
// (0.43-0.91 without any reset; 0.39-1.00 with Retry-After only, where one
// client's first burst can take a whole window; 0.29-1.00 on buckets), no
// early call.
type e2eZooMargins struct{ maxRatio, minUtil, minJain float64 }

func e2eZooMarginsFor(k pacersim.Kind) e2eZooMargins {
	m := e2eZooMargins{maxRatio: 0.08, minUtil: 0.55, minJain: 0.55}
	switch {
	case k.Format.Fields == pacersim.RetryOnly:
		// Nothing tells the limit: a client starved by another's
		// first burst grows back a call a window.
		m.minJain = 0.3
	case k.Format.Fields == pacersim.Legacy && k.Format.Reset == pacersim.NoReset:
		// Nothing says the window: the first client to see calls leave
		// the count learns it, and in 9 s (3 windows) the others,
		// whose first count held its burst, may not.
		m.minUtil, m.minJain = 0.35, 0.35
	case k.Burst:
		// A bucket kept nearly full reads no window until the count
		// rises (docs/pacer.md, shortfalls).
		m.minUtil, m.minJain = 0.2, 0.2
	}
	return m
}
