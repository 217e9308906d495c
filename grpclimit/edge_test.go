package grpclimit_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/grpclimit"
	"github.com/ratepace/pace/memory"
)

// callCtx is the incoming context of a call carrying the metadata pairs md.
func callCtx(md ...string) context.Context {
	return metadata.NewIncomingContext(context.Background(), metadata.Pairs(md...))
}

var unaryInfo = &grpc.UnaryServerInfo{FullMethod: "/test.Service/Method"}

// TestVerifiedAfterHandlerReturned: Verified called with the context of a
// call whose handler has returned (a goroutine the handler left behind)
// answers nil, as there is nothing to take, and never panics: gRPC does not
// recover handler goroutines, so a panic there kills the server.
func TestVerifiedAfterHandlerReturned(t *testing.T) {
	clk := newClock()
	ic := mustNew(t, []grpclimit.Limit{
		grpclimit.Pace(newPace(t, 1, clk), grpclimit.Metadata("client-id"), grpclimit.Name("per-client"), grpclimit.DecideAfterVerify()),
	})
	var kept context.Context
	_, err := ic.Unary(callCtx("client-id", "c1"), nil, unaryInfo, func(ctx context.Context, _ any) (any, error) {
		kept = ctx
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := grpclimit.Verified(kept); err != nil {
		t.Fatalf("Verified after the handler returned: %v; want nil", err)
	}
}

// TestVerifiedAllOrNothingAcrossChain: when an outer Interceptor's
// DecideAfterVerify limit refuses in Verified after an inner one took its
// event, the inner one gives its event back too, as within one
// Interceptor: the refused call spends nothing anywhere.
func TestVerifiedAllOrNothingAcrossChain(t *testing.T) {
	clk := newClock()
	perClient := newPace(t, 1, clk)
	perKey := newPace(t, 1, clk)
	outer := mustNew(t, []grpclimit.Limit{
		grpclimit.Pace(perClient, grpclimit.Metadata("client-id"), grpclimit.Name("per-client"), grpclimit.DecideAfterVerify()),
	})
	inner := mustNew(t, []grpclimit.Limit{grpclimit.Pace(perKey, grpclimit.Metadata("api-key"), grpclimit.Name("per-key"))})
	var verr error
	handler := func(ctx context.Context, _ any) (any, error) {
		perClient.Allow("c1") // another call takes the client's event while this one verifies
		verr = grpclimit.Verified(ctx)
		return nil, verr
	}
	_, err := outer.Unary(callCtx("client-id", "c1", "api-key", "k1"), nil, unaryInfo, func(ctx context.Context, req any) (any, error) {
		return inner.Unary(ctx, req, unaryInfo, handler)
	})
	refusal(t, verr, "per-client")
	refusal(t, err, "per-client")
	if ok, _ := perKey.Peek("k1"); !ok {
		t.Fatal("the inner Interceptor kept its event after the outer one refused in Verified")
	}
}

// TestClientIPNAT64: a peer seen through NAT64's well-known prefix
// 64:ff9b::/96 (RFC 6052) is keyed by its IPv4 address, as an IPv4-mapped
// one is, not grouped with every other translated client under one /64.
func TestClientIPNAT64(t *testing.T) {
	for addr, want := range map[string]string{
		"64:ff9b::c000:201": "192.0.2.1",
		"64:ff9b::c000:202": "192.0.2.2",
		"::ffff:192.0.2.1":  "192.0.2.1",
		"2001:db8::1":       "2001:db8::/64",
	} {
		ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP(addr), Port: 443}})
		got, err := grpclimit.ClientIP()(ctx, "/m")
		if err != nil || got != want {
			t.Errorf("ClientIP of peer %s = %q, %v; want %q", addr, got, err, want)
		}
	}
}

// TestNamesNeverShareStateGRPC: as httplimit's TestNamesNeverShareState,
// through an Interceptor: limit "api" keyed by metadata the client chooses
// cannot spend the bucket of limit "api:ip" for another peer.
func TestNamesNeverShareStateGRPC(t *testing.T) {
	clk := newClock()
	st := memory.New(memory.WithClock(clk.Now))
	ic := mustNew(t, []grpclimit.Limit{
		grpclimit.Bucket(st, 1, 0.001, grpclimit.Metadata("client"), grpclimit.Name("api")),
		grpclimit.Bucket(st, 1, 0.001, grpclimit.ClientIP(), grpclimit.Name("api:ip")),
	})
	call := func(addr, client string) error {
		ctx := peer.NewContext(callCtx("client", client), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP(addr), Port: 1}})
		_, err := ic.Unary(ctx, nil, unaryInfo, func(context.Context, any) (any, error) { return nil, nil })
		return err
	}
	if err := call("198.51.100.9", "ip:192.0.2.1"); err != nil {
		t.Fatalf("forger: %v", err)
	}
	if err := call("192.0.2.1", "v"); err != nil {
		t.Fatalf("victim at 192.0.2.1: %v; want admitted: limit \"api\" reached the bucket of \"api:ip\"", err)
	}
}

// TestRetryDelayCoversEveryLimit: a refusal's retry delay is the wait after
// which every limit of the call admits, the limits the decision did not
// reach included, whatever their kind: waiting exactly that long (a fake
// clock) admits, a nanosecond less does not.
func TestRetryDelayCoversEveryLimit(t *testing.T) {
	for _, second := range []string{"bucket", "shared"} {
		t.Run(second, func(t *testing.T) {
			clk := newClock()
			st := memory.New(memory.WithClock(clk.Now))
			long := grpclimit.Bucket(st, 1, 0.2, grpclimit.Metadata("b"), grpclimit.Name("long"))
			if second == "shared" {
				p, err := pace.NewShared(st, 0.2, pace.WithClock(clk.Now))
				if err != nil {
					t.Fatal(err)
				}
				long = grpclimit.Shared(p, grpclimit.Metadata("b"), grpclimit.Name("long"))
			}
			ic := mustNew(t, []grpclimit.Limit{grpclimit.Pace(newPace(t, 1, clk), grpclimit.Metadata("a"), grpclimit.Name("short")), long})
			call := func() error {
				_, err := ic.Unary(callCtx("a", "a", "b", "b"), nil, unaryInfo, func(context.Context, any) (any, error) { return nil, nil })
				return err
			}
			if err := call(); err != nil {
				t.Fatal(err)
			}
			delay := refusal(t, call(), "long")
			if delay != 5*time.Second {
				t.Fatalf("retry delay %v; want 5s, the wait of the limit not reached", delay)
			}
			clk.Advance(delay - time.Nanosecond)
			if err := call(); err == nil {
				t.Fatal("admitted a nanosecond before the retry delay")
			}
			clk.Advance(time.Nanosecond)
			if err := call(); err != nil {
				t.Fatalf("after exactly the retry delay: %v", err)
			}
		})
	}
}

// TestRefusalAllOrNothingAcrossChain: a call refused by an inner
// Interceptor spends nothing of the outer one's limits, as a refusal
// within one Interceptor gives back what the earlier limits took.
func TestRefusalAllOrNothingAcrossChain(t *testing.T) {
	clk := newClock()
	perPeer, perKey := newPace(t, 1, clk), newPace(t, 1, clk)
	outer := mustNew(t, []grpclimit.Limit{grpclimit.Pace(perPeer, grpclimit.Metadata("peer"), grpclimit.Name("per-peer"))})
	inner := mustNew(t, []grpclimit.Limit{grpclimit.Pace(perKey, grpclimit.Metadata("api-key"), grpclimit.Name("per-key"))})
	perKey.Allow("k1") // the key's pace is spent
	_, err := outer.Unary(callCtx("peer", "p1", "api-key", "k1"), nil, unaryInfo, func(ctx context.Context, req any) (any, error) {
		return inner.Unary(ctx, req, unaryInfo, func(context.Context, any) (any, error) { return nil, nil })
	})
	refusal(t, err, "per-key")
	if ok, _ := perPeer.Peek("p1"); !ok {
		t.Fatal("the outer Interceptor kept its event after the inner one refused the call")
	}
}
