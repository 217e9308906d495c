package grpclimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/grpclimit"
	"github.com/ratepace/pace/memory"
)

// costReq is a unary request message carrying its estimate.
type costReq struct{ n int }

// reqCost is a CostFunc reading the estimate from a costReq; a stream
// (no request) costs 7.
func reqCost(_ context.Context, _ string, req any) (int, error) {
	if r, ok := req.(*costReq); ok {
		return r.n, nil
	}
	return 7, nil
}

// unary runs one unary call of estimate n from client through ic, whose
// handler runs body (nothing when nil), and returns the call's error.
func unary(ic *grpclimit.Interceptor, client string, n int, body func(ctx context.Context)) error {
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("client-id", client))
	_, err := ic.Unary(ctx, &costReq{n}, &grpc.UnaryServerInfo{FullMethod: "/llm.Chat/Complete"}, func(ctx context.Context, _ any) (any, error) {
		if body != nil {
			body(ctx)
		}
		return "ok", nil
	})
	return err
}

// settleAt returns a handler body that settles at used.
func settleAt(t *testing.T, used int) func(context.Context) {
	return func(ctx context.Context) {
		if err := grpclimit.Settle(ctx, used); err != nil {
			t.Error(err)
		}
	}
}

// newCosted returns an Interceptor of one Pace limit of perSecond on clk,
// keyed by the client-id metadata, with reqCost.
func newCosted(t *testing.T, perSecond float64, clk interface{ Now() time.Time }) *grpclimit.Interceptor {
	t.Helper()
	p, err := pace.New(perSecond, pace.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	return mustNew(t, []grpclimit.Limit{grpclimit.Pace(p, grpclimit.Metadata("client-id"), grpclimit.Name("tokens"), grpclimit.Cost(reqCost))})
}

// TestCostReservesEstimate: the estimate of each unary call is reserved;
// one that no longer fits is refused with the exact delay at which it does.
func TestCostReservesEstimate(t *testing.T) {
	clk := newClock()
	ic := newCosted(t, 100, clk)
	for i := range 3 {
		if err := unary(ic, "a", 30, nil); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	err := unary(ic, "a", 30, nil)
	if d := refusal(t, err, "tokens"); d != 200*time.Millisecond {
		t.Fatalf("retry delay %v; want 200ms (20 more of 30 at 100/s)", d)
	}
}

// TestSettleBelowAbove: settled below, the rest comes back (a second call
// of the same estimate fits, which it would not otherwise); settled above,
// the key is in debt and the next call's retry delay covers it.
func TestSettleBelowAbove(t *testing.T) {
	for _, tc := range []struct {
		used int
		code codes.Code
	}{{-1, codes.ResourceExhausted}, {10, codes.OK}} {
		clk := newClock()
		ic := newCosted(t, 100, clk)
		var body func(context.Context)
		if tc.used >= 0 {
			body = settleAt(t, tc.used)
		}
		unary(ic, "a", 60, body)
		wantCode(t, unary(ic, "a", 60, nil), tc.code, "the second call")
	}

	clk := newClock()
	ic := newCosted(t, 10, clk)
	if err := unary(ic, "a", 5, settleAt(t, 30)); err != nil {
		t.Fatal(err)
	}
	// 30 spent of a bucket of 10 at 10/s: 5 more fit after 2.5 s.
	if d := refusal(t, unary(ic, "a", 5, nil), "tokens"); d != 2500*time.Millisecond {
		t.Fatalf("after the debt: retry delay %v; want 2.5s", d)
	}
	clk.Advance(2500 * time.Millisecond)
	if err := unary(ic, "a", 5, nil); err != nil {
		t.Fatalf("after the delay: %v", err)
	}
}

// TestCostAllOrNothing: when the second limit refuses a call's estimate,
// the first is given its estimate back.
func TestCostAllOrNothing(t *testing.T) {
	clk := newClock()
	wide, narrow := newPace(t, 100, clk), newPace(t, 10, clk)
	ic := mustNew(t, []grpclimit.Limit{
		grpclimit.Pace(wide, grpclimit.FullMethod(), grpclimit.Name("per-method"), grpclimit.Cost(reqCost)),
		grpclimit.Pace(narrow, grpclimit.Metadata("client-id"), grpclimit.Name("per-client"), grpclimit.Cost(reqCost)),
	})
	if err := unary(ic, "a", 8, nil); err != nil {
		t.Fatal(err)
	}
	refusal(t, unary(ic, "a", 8, nil), "per-client")
	// per-method has 92 left, not 84: 92 fit.
	r := wide.ReserveN("/llm.Chat/Complete", 92)
	if !r.OK() {
		t.Fatal("the refused call kept its estimate of per-method")
	}
}

// TestSettleZeroSpendsNothing: a call settled at 0 (credentials found
// wrong) spends nothing, as Return.
func TestSettleZeroSpendsNothing(t *testing.T) {
	clk := newClock()
	ic := newCosted(t, 100, clk)
	for range 5 {
		unary(ic, "a", 90, settleAt(t, 0))
	}
	unary(ic, "a", 90, func(ctx context.Context) { grpclimit.Return(ctx) })
	if err := unary(ic, "a", 90, nil); err != nil {
		t.Fatalf("after forgers: %v", err)
	}
}

// TestCostErrors: a CostFunc that fails, or an estimate out of range, fails
// the call with InvalidArgument (or the *KeyError's code) before the
// handler, taking nothing.
func TestCostErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		cost grpclimit.CostFunc
		code codes.Code
	}{
		{"error", func(context.Context, string, any) (int, error) { return 0, errors.New("bad") }, codes.InvalidArgument},
		{"KeyError", func(context.Context, string, any) (int, error) {
			return 0, &grpclimit.KeyError{Code: codes.FailedPrecondition, Reason: "no credit"}
		}, codes.FailedPrecondition},
		{"zero", func(context.Context, string, any) (int, error) { return 0, nil }, codes.InvalidArgument},
		{"above burst", func(context.Context, string, any) (int, error) { return 101, nil }, codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock()
			first := newPace(t, 10, clk)
			ic := mustNew(t, []grpclimit.Limit{
				grpclimit.Pace(first, grpclimit.Metadata("client-id"), grpclimit.Name("calls")),
				grpclimit.Pace(newPace(t, 100, clk), grpclimit.Metadata("client-id"), grpclimit.Name("tokens"), grpclimit.Cost(tc.cost)),
			})
			err := unary(ic, "a", 1, func(context.Context) { t.Error("handler reached") })
			wantCode(t, err, tc.code, tc.name)
			if first.Len() != 0 {
				t.Fatal("the first limit kept its event")
			}
		})
	}
}

// TestSettleNoOp: a second Settle, Settle after Return, without an
// Interceptor or after the handler returned, does nothing.
func TestSettleNoOp(t *testing.T) {
	if err := grpclimit.Settle(context.Background(), 5); err != nil {
		t.Fatal(err)
	}
	clk := newClock()
	ic := newCosted(t, 100, clk)
	unary(ic, "a", 50, func(ctx context.Context) {
		grpclimit.Settle(ctx, 10)
		grpclimit.Settle(ctx, 100) // ignored
		grpclimit.Return(ctx)      // settled: nothing to give back
	})
	if err := unary(ic, "a", 90, nil); err != nil { // 90 left
		t.Fatalf("after settling at 10: %v", err)
	}
	clk.Advance(time.Second)
	unary(ic, "a", 50, func(ctx context.Context) {
		grpclimit.Return(ctx)
		grpclimit.Settle(ctx, 100) // given back: nothing to settle
	})
	var kept context.Context
	unary(ic, "a", 50, func(ctx context.Context) { kept = ctx })
	grpclimit.Settle(kept, 0) // over: nothing given back
	if err := unary(ic, "a", 50, nil); err != nil {
		t.Fatalf("50 left: %v", err)
	}
	refusal(t, unary(ic, "a", 1, nil), "tokens")
}

// costStream is a ServerStream whose context is ctx.
type costStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *costStream) Context() context.Context { return s.ctx }

// TestStreamCost: a stream is estimated once, when it opens, without a
// request message, and settled from its context.
func TestStreamCost(t *testing.T) {
	clk := newClock()
	ic := newCosted(t, 10, clk)
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("client-id", "a"))
	stream := func(used int) error {
		return ic.Stream(nil, &costStream{ctx: ctx}, &grpc.StreamServerInfo{FullMethod: "/llm.Chat/Stream"}, func(_ any, ss grpc.ServerStream) error {
			return grpclimit.Settle(ss.Context(), used)
		})
	}
	if err := stream(2); err != nil { // 7 reserved, 2 spent: 8 left
		t.Fatal(err)
	}
	if err := stream(7); err != nil { // 7 of 8: 1 left
		t.Fatal(err)
	}
	refusal(t, stream(7), "tokens")
}

// TestSharedCost: a Shared limit with a Cost reserves and settles at the
// store.
func TestSharedCost(t *testing.T) {
	clk := newClock()
	st := memory.New(memory.WithClock(clk.Now))
	defer st.Close(context.Background())
	p, err := pace.NewShared(st, 100, pace.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	ic := mustNew(t, []grpclimit.Limit{grpclimit.Shared(p, grpclimit.Metadata("client-id"), grpclimit.Name("tokens"), grpclimit.Cost(reqCost))})
	if err := unary(ic, "a", 60, settleAt(t, 10)); err != nil {
		t.Fatal(err)
	}
	if err := unary(ic, "a", 60, nil); err != nil {
		t.Fatalf("after settling at 10: %v", err)
	}
	refusal(t, unary(ic, "a", 60, nil), "tokens")
}

// TestCostRejected: Cost on a Bucket or Slots limit, or a nil CostFunc, is
// an error wrapping pace.ErrInvalidArgument.
func TestCostRejected(t *testing.T) {
	clk := newClock()
	st := memory.New(memory.WithClock(clk.Now))
	defer st.Close(context.Background())
	key := grpclimit.Metadata("client-id")
	for name, lim := range map[string]grpclimit.Limit{
		"Bucket": grpclimit.Bucket(st, 10, 1, key, grpclimit.Cost(reqCost)),
		"Slots":  grpclimit.Slots(st, 10, time.Second, key, grpclimit.Cost(reqCost)),
		"nil":    grpclimit.Pace(newPace(t, 10, clk), key, grpclimit.Cost(nil)),
	} {
		if _, err := grpclimit.New([]grpclimit.Limit{lim}); !errors.Is(err, pace.ErrInvalidArgument) {
			t.Errorf("%s: %v; want an error wrapping pace.ErrInvalidArgument", name, err)
		}
	}
}
