package grpclimit_test

// Regression tests for defects an adversarial review found at the edge:
// each names the promise it pins.

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/ratepace/pace/grpclimit"
	"github.com/ratepace/pace/memory"
)

// TestChainInnerErrorGivesBackOuter breaks docs/grpclimit.md's "In every
// case, what the earlier limits took is given back: ... a call refused by
// an inner one of chained Interceptors spends nothing of the outer ones"
// for the cases it lists just before (a store error, Unavailable; a key
// error, InvalidArgument): decide calls Return(ctx) on Refused only, so an
// inner Interceptor's store outage, or a call missing the inner key,
// spends the outer per-peer pace, where one Interceptor of both limits
// gives it back.
func TestChainInnerErrorGivesBackOuter(t *testing.T) {
	closed := memory.New()
	if err := closed.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		inner grpclimit.Limit
		code  codes.Code
	}{
		{"store error", grpclimit.Bucket(closed, 5, 5, grpclimit.Metadata("api-key"), grpclimit.Name("inner")), codes.Unavailable},
		{"key error", grpclimit.Pace(newPace(t, 5, newClock()), grpclimit.Metadata("absent"), grpclimit.Name("inner")), codes.InvalidArgument},
	} {
		t.Run(c.name, func(t *testing.T) {
			perPeer := newPace(t, 1, newClock())
			outer := mustNew(t, []grpclimit.Limit{grpclimit.Pace(perPeer, grpclimit.Metadata("peer"), grpclimit.Name("per-peer"))})
			inner := mustNew(t, []grpclimit.Limit{c.inner})
			_, err := outer.Unary(callCtx("peer", "p1", "api-key", "k1"), nil, unaryInfo, func(ctx context.Context, req any) (any, error) {
				return inner.Unary(ctx, req, unaryInfo, func(context.Context, any) (any, error) { return nil, nil })
			})
			wantCode(t, err, c.code, c.name)
			if ok, _ := perPeer.Peek("p1"); !ok {
				t.Fatalf("the outer Interceptor kept its event after the inner one failed the call with %v", c.code)
			}
		})
	}
}
