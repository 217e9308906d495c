package grpclimit_test

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/grpclimit"
	"github.com/ratepace/pace/memory"
)

// Adversarial tests of costs settled after the fact through the
// interceptors.

// rcSharedIC returns an Interceptor of one Shared limit (rate per second,
// a bucket of burst) with reqCost, on a memory store of clk's, and its
// Shared.
func rcSharedIC(t *testing.T, rate, burst float64, clk interface{ Now() time.Time }, opts ...grpclimit.Option) (*grpclimit.Interceptor, *pace.Shared) {
	t.Helper()
	st := memory.New(memory.WithClock(clk.Now))
	t.Cleanup(func() { st.Close(context.Background()) })
	p, err := pace.NewShared(st, rate, pace.WithClock(clk.Now), pace.WithBurst(burst))
	if err != nil {
		t.Fatal(err)
	}
	return mustNew(t, []grpclimit.Limit{grpclimit.Shared(p, grpclimit.Metadata("client-id"), append([]grpclimit.Option{grpclimit.Name("tokens"), grpclimit.Cost(reqCost)}, opts...)...)}), p
}

// TestReviewCostSharedRetryDelayAdmits: "waiting that long admits": the
// retry delay of a refusal of a Shared limit with a Cost, also when the
// local tier refused, admits the same call once waited.
func TestReviewCostSharedRetryDelayAdmits(t *testing.T) {
	clk := newClock()
	ic, _ := rcSharedIC(t, 1, 10, clk)
	if err := unary(ic, "a", 10, nil); err != nil {
		t.Fatal(err)
	}
	d := refusal(t, unary(ic, "a", 10, nil), "tokens")
	clk.Advance(d)
	if err := unary(ic, "a", 10, nil); err != nil {
		t.Fatalf("waited the retry delay %v: %v", d, err)
	}
}

// TestReviewCostSharedSettleMaxInt: a Shared limit settled at math.MaxInt
// puts the key in debt: the next call is refused.
func TestReviewCostSharedSettleMaxInt(t *testing.T) {
	clk := newClock()
	ic, _ := rcSharedIC(t, 1, 10, clk)
	if err := unary(ic, "a", 5, settleAt(t, math.MaxInt)); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute)
	wantCode(t, unary(ic, "a", 1, nil), codes.ResourceExhausted, "a minute after Settle(MaxInt)")
}

// TestReviewCostSettleThenReturnOnCode: settled, then the handler fails
// with a ReturnOn code or panics: nothing of the settlement comes back.
func TestReviewCostSettleThenReturnOnCode(t *testing.T) {
	clk := newClock()
	p := newPace(t, 100, clk)
	ic := mustNew(t, []grpclimit.Limit{grpclimit.Pace(p, grpclimit.Metadata("client-id"), grpclimit.Name("tokens"), grpclimit.Cost(reqCost), grpclimit.ReturnOn(codes.Unavailable, codes.Internal))})
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("client-id", "a"))
	info := &grpc.UnaryServerInfo{FullMethod: "/llm.Chat/Complete"}
	_, err := ic.Unary(ctx, &costReq{10}, info, func(ctx context.Context, _ any) (any, error) {
		grpclimit.Settle(ctx, 40)
		return nil, status.Error(codes.Unavailable, "down")
	})
	wantCode(t, err, codes.Unavailable, "settled then Unavailable")
	func() {
		defer func() { recover() }()
		ic.Unary(ctx, &costReq{10}, info, func(ctx context.Context, _ any) (any, error) {
			grpclimit.Settle(ctx, 40)
			panic("boom")
		})
	}()
	// 80 kept of 100: 21 must not fit.
	if r := p.ReserveN("a", 21); r.OK() {
		t.Fatal("21 fit after 80 settled: a ReturnOn code or the panic gave a settlement back")
	}
}

// TestReviewCostStreamConcurrentSettle: two goroutines settle one stream
// at once, at 0 and at 7: exactly one settlement counts, never both and
// never a double give-back.
func TestReviewCostStreamConcurrentSettle(t *testing.T) {
	clk := newClock()
	p := newPace(t, 10, clk)
	ic := mustNew(t, []grpclimit.Limit{grpclimit.Pace(p, grpclimit.Metadata("client-id"), grpclimit.Name("tokens"), grpclimit.Cost(reqCost))})
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("client-id", "a"))
	err := ic.Stream(nil, &costStream{ctx: ctx}, &grpc.StreamServerInfo{FullMethod: "/llm.Chat/Stream"}, func(_ any, ss grpc.ServerStream) error {
		var wg sync.WaitGroup
		for _, u := range []int{0, 7} {
			wg.Add(1)
			go func() { defer wg.Done(); grpclimit.Settle(ss.Context(), u) }()
		}
		wg.Wait()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	r := p.ReserveN("a", 10)
	if r.OK() {
		// settled at 0: all 10 left; then none.
		if x := p.ReserveN("a", 1); x.OK() {
			t.Fatal("above full after two concurrent settlements")
		}
		return
	}
	// settled at 7: 3 left.
	if x := p.ReserveN("a", 3); !x.OK() {
		t.Fatal("settled at 7: 3 must fit")
	}
	if x := p.ReserveN("a", 1); x.OK() {
		t.Fatal("settled at 7: a 4th fit")
	}
}
