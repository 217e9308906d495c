package grpclimit_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/grpclimit"
)

// A gRPC server limited per peer address and per client id, where calls
// whose credentials are refused spend nothing of the client's pace. The
// client reads how long to wait from the refusal's RetryInfo.
func Example() {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := pace.WithClock(func() time.Time { return now }) // time stands still
	perPeer, _ := pace.New(50, clock)
	perClient, _ := pace.New(2, clock)
	ic, err := grpclimit.New([]grpclimit.Limit{
		grpclimit.Pace(perPeer, grpclimit.ClientIP(), grpclimit.Name("per-peer")),
		grpclimit.Pace(perClient, grpclimit.Metadata("client-id"), grpclimit.Name("per-client"),
			grpclimit.ReturnOn(codes.Unauthenticated)),
	})
	if err != nil {
		panic(err)
	}
	// The health service stands for yours; an authentication interceptor
	// placed after the limits would answer Unauthenticated to a forger.
	checkSecret := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
		if md, _ := metadata.FromIncomingContext(ctx); len(md["secret"]) != 1 || md["secret"][0] != "s3cr3t" {
			return nil, status.Error(codes.Unauthenticated, "wrong secret")
		}
		return next(ctx, req)
	}
	srv := grpc.NewServer(append(ic.ServerOptions(), grpc.ChainUnaryInterceptor(checkSecret))...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	try := func(secret string) {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "client-id", "app-1", "secret", secret)
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		if delay, ok := grpclimit.RetryDelay(err); ok {
			fmt.Println(status.Code(err), status.Convert(err).Message(), "- retry after", delay)
			return
		}
		fmt.Println(status.Code(err))
	}
	try("guess-1") // a forger: given back
	try("guess-2")
	try("s3cr3t")
	try("s3cr3t")
	try("s3cr3t") // over the client's pace of 2/s
	// Output:
	// Unauthenticated
	// Unauthenticated
	// OK
	// OK
	// ResourceExhausted grpclimit: limit "per-client": rate limit exceeded - retry after 500ms
}

// A unary method limited in tokens per client: each call reserves the
// estimate of its request message, and the handler settles at the tokens
// the call used. The interceptor is called in process here; install it with
// ServerOptions.
func ExampleCost() {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tokens, _ := pace.New(1000.0/60, pace.WithBurst(1000), pace.WithClock(func() time.Time { return now }))
	type completeRequest struct{ MaxTokens int }
	ic, err := grpclimit.New([]grpclimit.Limit{
		grpclimit.Pace(tokens, grpclimit.Metadata("client-id"), grpclimit.Name("tokens"),
			grpclimit.Cost(func(_ context.Context, _ string, req any) (int, error) {
				if r, ok := req.(*completeRequest); ok {
					return r.MaxTokens, nil
				}
				return 100, nil // a stream
			})),
	})
	if err != nil {
		panic(err)
	}
	complete := func(ctx context.Context, req any) (any, error) {
		if err := grpclimit.Settle(ctx, 40); err != nil { // the tokens the model used
			return nil, err
		}
		return "an answer", nil
	}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("client-id", "app-1"))
	info := &grpc.UnaryServerInfo{FullMethod: "/llm.Model/Complete"}
	// 600 reserved, 40 kept; 900, 40 kept; 920 left: 950 fit once 30 more
	// have refilled at 1000 a minute.
	for _, maxTokens := range []int{600, 900, 950} {
		_, err := ic.Unary(ctx, &completeRequest{maxTokens}, info, complete)
		if delay, ok := grpclimit.RetryDelay(err); ok {
			fmt.Println(maxTokens, status.Code(err), "- retry after", delay)
			continue
		}
		fmt.Println(maxTokens, status.Code(err))
	}
	// Output:
	// 600 OK
	// 900 OK
	// 950 ResourceExhausted - retry after 1.8s
}
