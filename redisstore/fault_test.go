//go:build unix

package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/internal/progress"
	"github.com/redis/go-redis/v9"
)

// Fault test timing: every call gets opTimeout, and must return within
// opTimeout + slack whatever the server does; each phase must reach its
// count of outcomes within phaseLimit. The slack is generous because a
// loaded 2-core machine can hold a runnable goroutine off the CPU for a few
// hundred milliseconds; it still tells a call bounded by its context from
// one bounded by go-redis's own timeouts (3 s reads, 5 s dials) or by none.
const (
	opTimeout  = 250 * time.Millisecond
	slack      = time.Second
	phaseLimit = 20 * time.Second
	workers    = 8
	maxOps     = 200_000 // per worker: the load stops by itself
)

// loadStats counts the outcomes of the calls started since the last reset
// (so that a call answered just before a kill does not count as a success
// after it), and keeps the slowest call and the late ones of every call
// that ended since the last reset.
type loadStats struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	since      time.Time
	slowest    time.Duration
	slowErr    error
	late       []string // calls that outlived opTimeout + slack
}

func (l *loadStats) record(start time.Time, d time.Duration, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !start.Before(l.since) {
		if err == nil {
			l.ok.Add(1)
		} else {
			l.failed.Add(1)
		}
	}
	if d > l.slowest {
		l.slowest, l.slowErr = d, err
	}
	if d > opTimeout+slack && len(l.late) < 10 {
		l.late = append(l.late, fmt.Sprintf("%v (err %v)", d, err))
	}
}

func (l *loadStats) reset() (slowest time.Duration, late []string, slowErr error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	slowest, slowErr, late = l.slowest, l.slowErr, l.late
	l.slowest, l.slowErr, l.late = 0, nil, nil
	l.ok.Store(0)
	l.failed.Store(0)
	return slowest, late, slowErr
}

// TestFaults drives a load against a redis-server of the test's own, then
// freezes it (SIGSTOP), thaws it, kills it (SIGKILL) and restarts it on the
// same port, checking in every phase that each call returns within its
// context deadline (plus scheduling slack), that failures are errors (never
// a panic, a hang or an invalid-argument error), and that the same Store
// works again once the server is back, its script cache empty.
func TestFaults(t *testing.T) {
	srv := startServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	s := mustNew(t, c)

	var stats loadStats
	load := progress.New()
	for w := range workers {
		load.Go(func() {
			key := fmt.Sprintf("w%d", w)
			for i := 0; i < maxOps && !load.Stopping(); i++ {
				ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
				start := time.Now()
				var err error
				switch i % 4 {
				case 0:
					_, _, err = s.TokenBucket(ctx, key, 100, 1000, 1)
				case 1:
					_, _, err = s.AcquireSlotBurst(ctx, key, 4, 8, time.Second, time.Minute)
				case 2:
					err = s.ReleaseSlotBurst(ctx, key)
				default:
					err = s.Set(ctx, key, []byte("v"), time.Minute)
				}
				d := time.Since(start)
				cancel()
				if errors.Is(err, pace.ErrInvalidArgument) || errors.Is(err, pace.ErrClosed) {
					t.Errorf("worker %d: call %d failed with %v; want a backend error", w, i, err)
				}
				stats.record(start, d, err)
				load.Notify()
			}
		})
	}
	defer load.Stop()

	// waitFor blocks until cond holds, woken by the workers' calls.
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		load.WaitFor(t, phaseLimit, what, cond, func() string {
			return fmt.Sprintf("ok %d, failed %d", stats.ok.Load(), stats.failed.Load())
		})
	}
	phase := func(name string) {
		t.Helper()
		slowest, late, slowErr := stats.reset()
		t.Logf("%s: slowest call %v (err %v)", name, slowest, slowErr)
		if len(late) > 0 {
			t.Errorf("%s: calls outlived their %v deadline by more than %v: %v", name, opTimeout, slack, late)
		}
	}

	waitFor("healthy load", func() bool { return stats.ok.Load() >= 200 })
	phase("healthy")

	if err := srv.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stats.reset()
	waitFor("errors from a frozen server", func() bool { return stats.failed.Load() >= 2*workers })
	if err := srv.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	phase("frozen (SIGSTOP)")

	waitFor("load after SIGCONT", func() bool { return stats.ok.Load() >= 100 })
	phase("thawed (SIGCONT)")

	srv.kill()
	stats.reset()
	waitFor("errors from a killed server", func() bool { return stats.failed.Load() >= 100 })
	phase("killed (SIGKILL)")
	if n := stats.ok.Load(); n > 0 {
		t.Errorf("killed: %d calls succeeded with no server", n)
	}

	srv.start()
	stats.reset()
	waitFor("load after restart", func() bool { return stats.ok.Load() >= 200 })
	phase("restarted")

	// The restarted server has no state and no scripts: a fresh bucket
	// admits, through EVAL after NOSCRIPT.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if ok, _, err := s.TokenBucket(ctx, "fresh", 1, 1, 1); !ok || err != nil {
		t.Fatalf("TokenBucket on the restarted server = %v, %v; want true, nil", ok, err)
	}
}
