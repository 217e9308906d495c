// Package outagetest checks that an outage of a Store's backend costs its
// callers nothing: the scenarios that redisstore and pgstore run on a
// server of their own, which they kill and restart.
package outagetest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/driver"
)

// The targets: with the server killed, a request costs at most maxAdded
// more than with it up (medians), at most maxSlowFraction of a quiet
// replica's decisions take over slowAt, and limits hold again within
// backWithin of the server's return.
const (
	maxAdded        = time.Millisecond
	slowAt          = 5 * time.Millisecond
	maxSlowFraction = 0.02
	backWithin      = 3 * time.Second
	outageRequests  = 200
)

// latencies keeps the durations of a phase's requests.
type latencies []time.Duration

func (l latencies) median() time.Duration {
	s := slices.Clone(l)
	slices.Sort(s)
	return s[len(s)/2]
}

// over returns the fraction of the requests that took longer than d.
func (l latencies) over(d time.Duration) float64 {
	n := 0
	for _, x := range l {
		if x > d {
			n++
		}
	}
	return float64(n) / float64(len(l))
}

func (l latencies) String() string {
	return fmt.Sprintf("median %v, %.1f%% over %v (%d requests)", l.median(), 100*l.over(slowAt), slowAt, len(l))
}

// quietly runs request n times, one every gap (a quiet replica), and
// returns how long each took.
func quietly(n int, gap time.Duration, request func()) latencies {
	l := make(latencies, 0, n)
	tick := time.NewTicker(gap) // the pace of the load, not a synchronisation
	defer tick.Stop()
	for range n {
		<-tick.C
		start := time.Now()
		request()
		l = append(l, time.Since(start))
	}
	return l
}

// FailurePolicy runs a Bucket and a Slots limit (TokenBucket, AcquireSlot,
// ReleaseSlot per request, one every millisecond) on s behind
// WithFailurePolicy(FailOpen, 50 ms), while s's server is up, after kill,
// and after restart: while the server is down a request must cost at most
// 1 ms more than while it is up (medians), and once it is back the bucket
// must refuse again within 3 s. The figures are logged.
func FailurePolicy(t *testing.T, store pace.Store, kill, restart func()) {
	t.Helper()
	s, err := pace.WithFailurePolicy(store, pace.FailOpen, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	ctx := context.Background()
	i := 0
	request := func() {
		i++
		key := fmt.Sprint("req", i)
		s.TokenBucket(ctx, key, 10, 10, 1)
		if ok, _, _ := s.AcquireSlot(ctx, key, 2, time.Minute); ok {
			s.ReleaseSlot(ctx, key)
		}
	}
	up := quietly(outageRequests, time.Millisecond, request)
	kill()
	down := quietly(outageRequests, time.Millisecond, request)
	t.Logf("failure policy, server up: %v", up)
	t.Logf("failure policy, server killed: %v", down)
	if added := down.median() - up.median(); added > maxAdded {
		t.Errorf("the killed server added %v to the median request (up %v, down %v); want at most %v", added, up.median(), down.median(), maxAdded)
	}
	restart()
	back := time.Now()
	for {
		// A bucket of one on a fresh key admits once, then refuses: a
		// refusal is the store deciding again (fail-open never refuses).
		i++
		key := fmt.Sprint("back", i)
		s.TokenBucket(ctx, key, 1, 1e-3, 1)
		if ok, _, err := s.TokenBucket(ctx, key, 1, 1e-3, 1); !ok && err == nil {
			break
		}
		if time.Since(back) > backWithin {
			t.Fatalf("limits not enforced %v after the server's return; want within %v", time.Since(back), backWithin)
		}
		time.Sleep(time.Millisecond) // a caller's pace, not a synchronisation
	}
	t.Logf("failure policy: limits enforced again %v after the server's return", time.Since(back))
}

// Shared runs a quiet replica (a decision every 10 ms) of a Shared on s
// with WithFallback(100 ms), while s's server is up, after kill and after
// restart: while the server is down at most 2% of decisions may take over
// 5 ms, and once it is back decisions must go to the store again within
// 3 s. The figures are logged.
func Shared(t *testing.T, s driver.Taker, kill, restart func()) {
	t.Helper()
	fb, err := pace.New(500)
	if err != nil {
		t.Fatal(err)
	}
	p, err := pace.NewShared(s, 1000, pace.WithFallback(fb, 100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var paths [5]int
	decide := func() {
		r, err := p.Reserve(ctx, "quiet")
		if err != nil {
			t.Errorf("Reserve = %v; want a decision", err)
			return
		}
		paths[r.Source()]++
	}
	up := quietly(outageRequests/4, 10*time.Millisecond, decide)
	kill()
	paths = [5]int{}
	down := quietly(outageRequests, 10*time.Millisecond, decide)
	t.Logf("Shared, server up: %v", up)
	t.Logf("Shared, server killed: %v; %d by the fallback, %d by the store", down, paths[pace.SourceFallback], paths[pace.SourceStore])
	if f := down.over(slowAt); f > maxSlowFraction {
		t.Errorf("%.1f%% of the decisions took over %v with the server killed; want at most %.0f%%", 100*f, slowAt, 100*maxSlowFraction)
	}
	if added := down.median() - up.median(); added > maxAdded {
		t.Errorf("the killed server added %v to the median decision; want at most %v", added, maxAdded)
	}
	restart()
	back := time.Now()
	for {
		r, err := p.Reserve(ctx, "quiet")
		if err == nil && r.Source() == pace.SourceStore {
			break
		}
		if time.Since(back) > backWithin {
			t.Fatalf("decisions not back at the store %v after its return; want within %v", time.Since(back), backWithin)
		}
		time.Sleep(time.Millisecond) // a caller's pace, not a synchronisation
	}
	t.Logf("Shared: decisions back at the store %v after the server's return", time.Since(back))
}
