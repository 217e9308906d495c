package grpclimit_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratepace/pace/grpclimit"
	"github.com/ratepace/pace/httplimit"
	"github.com/ratepace/pace/internal/limittest"
)

// newClock, newPace and counter are limittest's, shared with httplimit's
// tests.
var (
	newClock = limittest.NewClock
	newPace  = limittest.NewPace
)

type counter = limittest.Counter

// mustNew is grpclimit.New, failing the test on an error.
func mustNew(t testing.TB, limits []grpclimit.Limit, opts ...httplimit.Option) *grpclimit.Interceptor {
	t.Helper()
	ic, err := grpclimit.New(limits, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return ic
}

// The Check service names that make the test server's handler do something
// else than answer SERVING.
const (
	svcUnauthenticated = "unauthenticated" // answer codes.Unauthenticated
	svcDenied          = "denied"          // answer codes.PermissionDenied
	svcVerify          = "verify"          // call grpclimit.Verified
	svcReturn          = "return"          // call grpclimit.Return, then answer OK
)

// server is the gRPC health service, in a form that lets tests choose its
// answers (through the service name of a Check) and how long its Watch
// streams live (until end is closed, or the client goes away).
type server struct {
	healthpb.UnimplementedHealthServer
	before func(ctx context.Context) // run by Check before anything else, if set
	end    chan struct{}             // closing it ends every Watch with OK

	mu   sync.Mutex
	runs map[string]int // handler runs by service name ("watch " + name for Watch)
}

func (s *server) count(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.runs == nil {
		s.runs = map[string]int{}
	}
	s.runs[name]++
}

// ran reports how many times a handler ran for service name.
func (s *server) ran(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runs[name]
}

func (s *server) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	s.count(req.Service)
	if s.before != nil {
		s.before(ctx)
	}
	switch req.Service {
	case svcUnauthenticated:
		return nil, status.Error(codes.Unauthenticated, "wrong secret")
	case svcDenied:
		return nil, status.Error(codes.PermissionDenied, "not yours")
	case svcVerify:
		if err := grpclimit.Verified(ctx); err != nil {
			return nil, err
		}
	case svcReturn:
		grpclimit.Return(ctx)
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func (s *server) Watch(req *healthpb.HealthCheckRequest, ss grpc.ServerStreamingServer[healthpb.HealthCheckResponse]) error {
	s.count("watch " + req.Service)
	if err := ss.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}); err != nil {
		return err
	}
	select {
	case <-s.end:
		return nil
	case <-ss.Context().Done():
		return status.FromContextError(ss.Context().Err()).Err()
	}
}

// serve starts a gRPC server with the interceptor (after any interceptors
// of opts) on a TCP listener on 127.0.0.1 and returns a client of it; both
// stop with the test.
func serve(t *testing.T, ic *grpclimit.Interceptor, s *server, opts ...grpc.ServerOption) healthpb.HealthClient {
	t.Helper()
	if s.end == nil {
		s.end = make(chan struct{})
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(append(opts, ic.ServerOptions()...)...)
	healthpb.RegisterHealthServer(srv, s)
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(lis)
	}()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
		<-done
	})
	return healthpb.NewHealthClient(conn)
}

// check calls Check for service with the metadata pairs md (key, value,
// ...) and returns the call's error.
func check(t *testing.T, c healthpb.HealthClient, service string, md ...string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	return err
}

// wantCode fails the test unless err has code want.
func wantCode(t *testing.T, err error, want codes.Code, what string) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Fatalf("%s: code %v (%v); want %v", what, got, err, want)
	}
}

// refusal checks that err is a refusal by the limit named name and returns
// its retry delay, read from the RetryInfo detail as a client would.
func refusal(t *testing.T, err error, name string) time.Duration {
	t.Helper()
	wantCode(t, err, codes.ResourceExhausted, "refusal")
	st := status.Convert(err)
	var retry *errdetails.RetryInfo
	var quota *errdetails.QuotaFailure
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			retry = d
		case *errdetails.QuotaFailure:
			quota = d
		case error:
			t.Fatalf("a detail does not parse: %v", d)
		}
	}
	if retry == nil || retry.GetRetryDelay() == nil {
		t.Fatalf("refusal %v: no RetryInfo with a retry_delay in %v", err, st.Details())
	}
	if err := retry.GetRetryDelay().CheckValid(); err != nil {
		t.Fatalf("retry_delay: %v", err)
	}
	if quota == nil || len(quota.Violations) != 1 || quota.Violations[0].Subject != name {
		t.Fatalf("QuotaFailure %v; want one violation of %q", quota, name)
	}
	if !strings.Contains(st.Message(), `"`+name+`"`) {
		t.Fatalf("message %q does not name the limit %q", st.Message(), name)
	}
	d, ok := grpclimit.RetryDelay(err)
	if !ok || d != retry.GetRetryDelay().AsDuration() {
		t.Fatalf("RetryDelay = %v, %v; want %v", d, ok, retry.GetRetryDelay().AsDuration())
	}
	return d
}
