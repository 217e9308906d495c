package httplimit_test

import (
	"context"
	"errors"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/driver"
	"github.com/ratepace/pace/httplimit"
	"github.com/ratepace/pace/internal/fakeclock"
	"github.com/ratepace/pace/memory"
)

// hangingTake is a memory store whose Take and TakeMany hang until their
// context ends, as a backend that stopped answering does, while its other
// methods answer: state a failure must never consult.
type hangingTake struct{ *memory.Store }

func (h hangingTake) Take(ctx context.Context, _ string, _ []driver.Shape) (driver.Grant, error) {
	<-ctx.Done()
	return driver.Grant{}, ctx.Err()
}

func (h hangingTake) TakeMany(ctx context.Context, _ []string, _ []driver.Shape, _ []driver.Grant) error {
	<-ctx.Done()
	return ctx.Err()
}

// TestFailClosedBucketAdmitsNothing: 40 requests at one instant through a
// Bucket of capacity 5 on a store wrapped fail-closed with a tight timeout,
// whose Take hangs: the policy refuses every one, with its retry-after.
// Before, the middleware asked TokenBucket (another namespace, full) when
// Take failed, and admitted from it. Fail-open admits every one, and
// touches no other state: the TokenBucket namespace at the key is still
// full afterwards, and the ReturnOn refunds reach no backend.
func TestFailClosedBucketAdmitsNothing(t *testing.T) {
	for _, policy := range []pace.FailurePolicy{pace.FailClosed, pace.FailOpen} {
		t.Run(policy.String(), func(t *testing.T) {
			mem := memory.New()
			st, err := pace.WithFailurePolicy(hangingTake{mem}, policy, time.Millisecond, pace.ProbeInterval(3*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			var c counter
			m := mustNew(t, []httplimit.Limit{httplimit.Bucket(st.(driver.Taker), 5, 5, httplimit.ClientIP(), httplimit.Name("per-ip"), httplimit.ReturnOn(http.StatusTeapot))}, c.Option())
			h := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) }))
			var admitted atomic.Int64
			var wg sync.WaitGroup
			start := make(chan struct{})
			for range 40 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					w := serve(h, from("192.0.2.1"))
					switch {
					case w.Code == http.StatusTeapot:
						admitted.Add(1)
					case w.Code == http.StatusTooManyRequests && w.Header().Get("Retry-After") != "3":
						t.Errorf("refusal with Retry-After %q; want the policy's 3", w.Header().Get("Retry-After"))
					case w.Code != http.StatusTooManyRequests:
						t.Errorf("status %d", w.Code)
					}
				}()
			}
			close(start)
			wg.Wait()
			want := int64(0)
			if policy == pace.FailOpen {
				want = 40
			}
			if got := admitted.Load(); got != want {
				t.Fatalf("%d of 40 admitted; want %d", got, want)
			}
			if got := c.Get("per-ip", httplimit.Returned); got != 0 {
				t.Fatalf("%d returned; want 0: an admission the policy decided took nothing", got)
			}
			key := "httplimit:per-ip:192.0.2.1"
			if ok, _, err := mem.TokenBucket(context.Background(), key, 5, 5, 5); !ok || err != nil {
				t.Fatalf("the TokenBucket namespace at the key was spent (%v, %v): a failure consulted other state", ok, err)
			}
		})
	}
}

// flakySlots is a memory store whose AcquireSlot fails while down is set.
type flakySlots struct {
	*memory.Store
	down *atomic.Bool
}

func (f flakySlots) AcquireSlot(ctx context.Context, key string, limit int64, ttl time.Duration) (bool, int64, error) {
	if f.down.Load() {
		return false, 0, errDown
	}
	return f.Store.AcquireSlot(ctx, key, limit, ttl)
}

// TestFailOpenSlotReleasesNothing: a request a fail-open policy admitted
// while the store was down acquired no slot, so its end releases none.
// Before, its release decremented the counter the healthy store kept for
// the streams admitted since: a Slots limit of 2 then ran 3 streams.
func TestFailOpenSlotReleasesNothing(t *testing.T) {
	var down atomic.Bool
	clk := fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	st, err := pace.WithFailurePolicy(flakySlots{memory.New(), &down}, pace.FailOpen, time.Second, pace.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	l, err := httplimit.NewLimiter([]httplimit.Limit{httplimit.Slots(st, 2, time.Minute, nil, httplimit.Name("streams"))})
	if err != nil {
		t.Fatal(err)
	}
	key := func(int) (string, error) { return "k", nil }
	ctx := context.Background()
	var hiccup, s1, s2, s3 httplimit.Ticket
	down.Store(true)
	if out := l.Decide(ctx, &hiccup, key); out != httplimit.Admitted {
		t.Fatalf("during the outage: %v; want admitted (fail-open)", out)
	}
	down.Store(false)
	// The failure keeps the policy off the store for a probe interval (half
	// a second by default); then a probe in the background finds it back.
	clk.Advance(time.Second)
	for deadline := time.Now().Add(10 * time.Second); ; runtime.Gosched() {
		if _, err := st.Get(ctx, "probe"); errors.Is(err, pace.ErrNotFound) {
			break // the store answers again
		}
		if time.Now().After(deadline) {
			t.Fatal("the failure policy did not go back to the store within 10s of its return")
		}
	}
	if out := l.Decide(ctx, &s1, key); out != httplimit.Admitted {
		t.Fatalf("first stream: %v", out)
	}
	hiccup.Finish(200) // must release nothing
	if out := l.Decide(ctx, &s2, key); out != httplimit.Admitted {
		t.Fatalf("second stream: %v", out)
	}
	if out := l.Decide(ctx, &s3, key); out != httplimit.Refused {
		t.Fatalf("third stream: %v; want refused: a limit of 2 with 2 streams running", out)
	}
	s1.Finish(200)
	s2.Finish(200)
}
