// Package grpclimit is gRPC server interceptors for pace: the limits of
// package httplimit, applied all or nothing to unary calls and streams,
// with keys a client cannot forge and refusals a client can act on.
//
// An Interceptor applies a list of Limits (a Pace, a pace Shared by the
// replicas through a Store, a token Bucket in a Store, concurrent Slots in
// a Store), each counted per key, the key read
// from the call by a KeyFunc: ClientIP (the peer's address, or the
// forwarding metadata of trusted proxies read from the right), Metadata (a
// metadata value such as an API key), FullMethod. A refused call fails with
// codes.ResourceExhausted and a google.rpc.RetryInfo detail saying how long
// to wait (read it with RetryDelay); a stream holds its Slots for its whole
// life. A service that authenticates clients by an id limits each peer
// address and each client, and gives the client's event back when the
// credentials are wrong, so that a forger naming the client spends nothing
// of its pace:
//
//	perPeer, err := pace.New(50)
//	perClient, err := pace.New(5)
//	ic, err := grpclimit.New([]grpclimit.Limit{
//		grpclimit.Pace(perPeer, grpclimit.ClientIP(), grpclimit.Name("per-peer")),
//		grpclimit.Pace(perClient, grpclimit.Metadata("client-id"), grpclimit.Name("per-client"),
//			grpclimit.ReturnOn(codes.Unauthenticated)),
//	})
//	srv := grpc.NewServer(ic.ServerOptions()...)
//
// The decisions are those of an httplimit.Limiter, so the behaviour of
// each kind of limit, the order of decision, DryRun and the metrics
// (package instrument's Limits) are as documented there. This package is
// its own module, so that gRPC never enters the dependencies of the root
// module.
package grpclimit
