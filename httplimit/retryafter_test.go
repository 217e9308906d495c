package httplimit_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/httplimit"
	"github.com/ratepace/pace/memory"
)

// kindOf builds a limit of the named kind ("pace", "shared", "bucket") of
// perSecond events a second with a burst of one, keyed by header, on st
// and clk.
func kindOf(t *testing.T, kind string, perSecond float64, st *memory.Store, clk interface{ Now() time.Time }, name, header string, opts ...httplimit.LimitOption) httplimit.Limit {
	t.Helper()
	opts = append(opts, httplimit.Name(name))
	switch kind {
	case "pace":
		p, err := pace.New(perSecond, pace.WithClock(clk.Now))
		if err != nil {
			t.Fatal(err)
		}
		return httplimit.Pace(p, httplimit.Header(header), opts...)
	case "shared":
		p, err := pace.NewShared(st, perSecond, pace.WithClock(clk.Now))
		if err != nil {
			t.Fatal(err)
		}
		return httplimit.Shared(p, httplimit.Header(header), opts...)
	case "bucket":
		return httplimit.Bucket(st, 1, perSecond, httplimit.Header(header), opts...)
	}
	t.Fatalf("kind %q", kind)
	return httplimit.Limit{}
}

// TestWaitingRetryAfterAdmits is the promise of docs/httplimit.md: a
// refusal's Retry-After is the wait after which every limit of the request
// admits, whichever kind refuses and whichever kind not reached would refuse
// longer; waiting exactly that long (a fake clock) admits, and one second
// less does not. The first limit refuses for 1 s, the second, which the
// decision does not reach, would refuse for 5 s.
func TestWaitingRetryAfterAdmits(t *testing.T) {
	kinds := []string{"pace", "shared", "bucket"}
	for _, first := range kinds {
		for _, second := range kinds {
			t.Run(first+"/"+second, func(t *testing.T) {
				clk := newClock()
				st := memory.New(memory.WithClock(clk.Now))
				m := mustNew(t, []httplimit.Limit{
					kindOf(t, first, 1, st, clk, "short", "X-A"),
					kindOf(t, second, 0.2, st, clk, "long", "X-B"),
				})
				h := m.Wrap(ok)
				send := func() *httpResponse {
					r := from("192.0.2.1")
					r.Header.Set("X-A", "a")
					r.Header.Set("X-B", "b")
					w := serve(h, r)
					return &httpResponse{w.Code, w.Header().Get("Retry-After")}
				}
				if got := send(); got.code != http.StatusOK {
					t.Fatalf("first request: %d", got.code)
				}
				got := send()
				if got.code != http.StatusTooManyRequests || got.retryAfter != "5" {
					t.Fatalf("second request: %d, Retry-After %q; want 429 and 5, the wait of the limit not reached", got.code, got.retryAfter)
				}
				secs, _ := strconv.Atoi(got.retryAfter)
				clk.Advance(time.Duration(secs-1) * time.Second)
				if got := send(); got.code != http.StatusTooManyRequests {
					t.Fatalf("after Retry-After less one second: %d; want 429", got.code)
				}
				clk.Advance(time.Second)
				if got := send(); got.code != http.StatusOK {
					t.Fatalf("after exactly Retry-After: %d (Retry-After %q); want 200", got.code, got.retryAfter)
				}
			})
		}
	}
}

type httpResponse struct {
	code       int
	retryAfter string
}

// TestVerifiedRetryAfterCoversEveryLimit: when Verified refuses, its
// Retry-After covers the DecideAfterVerify limits it did not reach: waiting
// it admits. The first limit to verify refuses for 1 s, the second would
// for 5 s.
func TestVerifiedRetryAfterCoversEveryLimit(t *testing.T) {
	clk := newClock()
	short, long := newPace(t, 1, clk), newPace(t, 0.2, clk)
	m := mustNew(t, []httplimit.Limit{
		httplimit.Pace(short, httplimit.Header("X-A"), httplimit.Name("short"), httplimit.DecideAfterVerify()),
		httplimit.Pace(long, httplimit.Header("X-B"), httplimit.Name("long"), httplimit.DecideAfterVerify()),
	})
	h := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Race") != "" { // others take both events while this one verifies
			short.Allow("a")
			long.Allow("b")
		}
		if httplimit.Verified(w, r) {
			w.Write([]byte("ok"))
		}
	}))
	send := func(race bool) (int, string) {
		r := from("192.0.2.1")
		r.Header.Set("X-A", "a")
		r.Header.Set("X-B", "b")
		if race {
			r.Header.Set("X-Race", "1")
		}
		w := serve(h, r)
		return w.Code, w.Header().Get("Retry-After")
	}
	code, ra := send(true)
	if code != http.StatusTooManyRequests || ra != "5" {
		t.Fatalf("refused by Verified: %d, Retry-After %q; want 429 and 5", code, ra)
	}
	clk.Advance(5 * time.Second)
	if code, _ := send(false); code != http.StatusOK {
		t.Fatalf("after exactly Retry-After: %d; want 200", code)
	}
}

// TestRefusalCountsFullSlots: a Slots limit the decision did not reach,
// full, refuses for a second: the exact wait of the refusal (gRPC's retry
// delay) is then at least that.
func TestRefusalCountsFullSlots(t *testing.T) {
	clk := newClock()
	st := memory.New(memory.WithClock(clk.Now))
	l, err := httplimit.NewLimiter([]httplimit.Limit{
		httplimit.Pace(newPace(t, 4, clk), nil, httplimit.Name("fast")),
		httplimit.Slots(st, 1, time.Minute, nil, httplimit.Name("streams")),
	})
	if err != nil {
		t.Fatal(err)
	}
	keys := func(slot string) func(int) (string, error) {
		return func(i int) (string, error) {
			if i == 0 {
				return "f", nil
			}
			return slot, nil
		}
	}
	ctx := context.Background()
	var stream httplimit.Ticket
	if out := l.Decide(ctx, &stream, keys("s")); out != httplimit.Admitted {
		t.Fatal(out)
	}
	defer stream.Finish(200)
	for i := range 3 { // the rest of the pace's burst of 4, with other slots
		var tk httplimit.Ticket
		if out := l.Decide(ctx, &tk, keys("other"+strconv.Itoa(i))); out != httplimit.Admitted {
			t.Fatal(out)
		}
		tk.Finish(200)
	}
	var tk httplimit.Ticket
	if out := l.Decide(ctx, &tk, keys("s")); out != httplimit.Refused {
		t.Fatalf("%v; want refused", out)
	}
	if _, name, wait := tk.Refusal(); wait < time.Second || name != "streams" {
		t.Fatalf("refusal by %q, wait %v; want streams and at least 1s (the pace refuses for 250ms, the slot is full)", name, wait)
	}
}
