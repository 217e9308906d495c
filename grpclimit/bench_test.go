package grpclimit_test

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"

	"github.com/ratepace/pace/grpclimit"
)

// BenchmarkUnary measures what the unary interceptor adds to a call, in
// process (no network): one Pace limit keyed by ClientIP, beside the bare
// handler, admitted and refused.
func BenchmarkUnary(b *testing.B) {
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 40000}})
	info := &grpc.UnaryServerInfo{FullMethod: "/grpc.health.v1.Health/Check"}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	b.Run("bare", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := handler(ctx, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, bc := range []struct {
		name  string
		rate  float64
		admit bool
	}{{"admitted", 1e9, true}, {"refused", 1e-3, false}} {
		b.Run(bc.name, func(b *testing.B) {
			clk := newClock() // stands still: a burst of 1e9 admits, 1e-3/s refuses
			ic := mustNew(b, []grpclimit.Limit{grpclimit.Pace(newPace(b, bc.rate, clk), grpclimit.ClientIP())})
			if !bc.admit {
				if _, err := ic.Unary(ctx, nil, info, handler); err != nil { // spend the one event
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ic.Unary(ctx, nil, info, handler); (err == nil) != bc.admit {
					b.Fatalf("admitted %v; want %v", err == nil, bc.admit)
				}
			}
		})
	}
}
