package redisstore

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ratepace/pace"
	"github.com/redis/go-redis/v9"
)

// Outage test targets (issue 19, points 13 and 14): with the server killed,
// a request costs at most maxAdded more than with it up (medians), at most
// maxSlowFraction of a quiet replica's decisions take over slowAt, and
// limits hold again within backWithin of the server's return. The client
// is the one a README user writes: redis.NewClient(&redis.Options{Addr:
// addr}), nothing tuned (go-redis's 5 dial attempts 100 ms apart, 3 retries,
// 3 s reads).
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

// untuned returns the client of the README, closed when the test ends.
func untuned(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestOutageCostsCallersNothing: a Bucket and a Slots limit (TokenBucket,
// AcquireSlot, ReleaseSlot per request) on a Store behind
// WithFailurePolicy(FailOpen, 50 ms), on a redis-server of the test's own
// that it kills and restarts. While the server is down a request costs at
// most 1 ms more than while it is up (medians; it used to wait out the
// timeout on acquire and on release: 200 ms), and once it is back the
// bucket refuses again within 3 s.
func TestOutageCostsCallersNothing(t *testing.T) {
	srv := startServer(t)
	rs := mustNew(t, untuned(t, srv.addr()))
	s, err := pace.WithFailurePolicy(rs, pace.FailOpen, 50*time.Millisecond)
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
	srv.kill()
	down := quietly(outageRequests, time.Millisecond, request)
	t.Logf("failure policy, server up: %v", up)
	t.Logf("failure policy, server killed: %v", down)
	if added := down.median() - up.median(); added > maxAdded {
		t.Errorf("the killed server added %v to the median request (up %v, down %v); want at most %v", added, up.median(), down.median(), maxAdded)
	}
	srv.start()
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

// TestSharedOutageCostsCallersNothing: a quiet replica (a decision every
// 10 ms) with WithFallback(100 ms) on a redis-server of the test's own that
// it kills and restarts. While the server is down at most 2% of decisions
// take over 5 ms (each probe used to make one caller wait, up to the
// timeout: 40 of 200 took over 5 ms), and once it is back decisions go to
// the store again within 3 s.
func TestSharedOutageCostsCallersNothing(t *testing.T) {
	srv := startServer(t)
	rs := mustNew(t, untuned(t, srv.addr()))
	fb, err := pace.New(500)
	if err != nil {
		t.Fatal(err)
	}
	p, err := pace.NewShared(rs, 1000, pace.WithFallback(fb, 100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var paths [4]int
	decide := func() {
		r, err := p.Reserve(ctx, "quiet")
		if err != nil {
			t.Errorf("Reserve = %v; want a decision", err)
			return
		}
		paths[r.Path()]++
	}
	up := quietly(outageRequests/4, 10*time.Millisecond, decide)
	srv.kill()
	paths = [4]int{}
	down := quietly(outageRequests, 10*time.Millisecond, decide)
	t.Logf("Shared, server up: %v", up)
	t.Logf("Shared, server killed: %v; %d by the fallback, %d by the store", down, paths[pace.PathFallback], paths[pace.PathStore])
	if f := down.over(slowAt); f > maxSlowFraction {
		t.Errorf("%.1f%% of the decisions took over %v with the server killed; want at most %.0f%%", 100*f, slowAt, 100*maxSlowFraction)
	}
	if added := down.median() - up.median(); added > maxAdded {
		t.Errorf("the killed server added %v to the median decision; want at most %v", added, maxAdded)
	}
	srv.start()
	back := time.Now()
	for {
		r, err := p.Reserve(ctx, "quiet")
		if err == nil && r.Path() == pace.PathStore {
			break
		}
		if time.Since(back) > backWithin {
			t.Fatalf("decisions not back at the store %v after its return; want within %v", time.Since(back), backWithin)
		}
		time.Sleep(time.Millisecond) // a caller's pace, not a synchronisation
	}
	t.Logf("Shared: decisions back at the store %v after the server's return", time.Since(back))
}
