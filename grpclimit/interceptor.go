package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratepace/pace/httplimit"
)

// Interceptor applies a list of Limits to the calls of a gRPC server, unary
// and streaming, all or nothing, with the machinery of package httplimit
// (an httplimit.Limiter), across chained Interceptors too. The first
// refusal, key error or store error gives back what the earlier limits
// took; a refusal fails the call with codes.ResourceExhausted carrying a
// google.rpc.RetryInfo detail (waiting that long admits) and a
// google.rpc.QuotaFailure naming the limit; a key that cannot be read fails
// it with codes.InvalidArgument, a Store error with codes.Unavailable, and
// no message contains the key. A stream is one call, decided when it opens;
// it holds its slots for its whole life. docs/grpclimit.md has the details.
//
// Install both interceptors with ServerOptions, or Unary and Stream
// separately. The handler may call Return, Settle and Verified with its
// context.
// An Interceptor must be created with New; it is safe for concurrent use by
// multiple goroutines.
type Interceptor struct {
	l       *httplimit.Limiter
	keys    []KeyFunc
	costs   []CostFunc // by limit: Cost's, or nil
	costed  bool       // some limit has a Cost
	needCtx bool       // Return, Verified or Settle can do something

	// Per limit, built by New: the status messages of a refusal, a key
	// error (followed by the reason) and a store error, and the
	// QuotaFailure detail of a refusal.
	refused     []string
	keyPrefix   []string
	unavailable []string
	quota       []*anypb.Any
}

// New returns an Interceptor applying limits. opts are the options of
// package httplimit that concern a Limiter: httplimit.DryRun (decide and
// count, but never refuse: a call refused, whose key cannot be read or
// whose store fails is served as if admitted) and httplimit.WithObserver
// (package instrument's Limits counts the decisions for Prometheus); those
// about HTTP answers are ignored.
//
// The error wraps pace.ErrInvalidArgument when limits is empty, when a
// limit is the zero Limit, has a nil KeyFunc, pace or store, an invalid
// shape or name, two limits have the same name, or an option does not fit
// its limit (a code that is not canonical, ReturnOn on Slots,
// DecideAfterVerify on anything but a Pace, Cost on Bucket or Slots or with
// DecideAfterVerify, a nil CostFunc); or it is the error of the
// WithObserver function.
func New(limits []Limit, opts ...httplimit.Option) (*Interceptor, error) {
	hl := make([]httplimit.Limit, len(limits))
	ic := &Interceptor{keys: make([]KeyFunc, len(limits)), costs: make([]CostFunc, len(limits))}
	for i, lim := range limits {
		if lim.bad != "" {
			return nil, invalidf("limit %d: %s", i, lim.bad)
		}
		hl[i], ic.keys[i], ic.costs[i] = lim.h, lim.key, lim.cost
		ic.costed = ic.costed || lim.cost != nil
		ic.needCtx = ic.needCtx || lim.kind != kindSlots // Return, Verified
	}
	l, err := httplimit.NewLimiter(hl, opts...)
	if err != nil {
		return nil, fmt.Errorf("grpclimit: %w", err)
	}
	ic.l = l
	for i, name := range l.Names() {
		if ic.keys[i] == nil {
			return nil, invalidf("limit %q has a nil KeyFunc", name)
		}
		prefix := fmt.Sprintf("grpclimit: limit %q: ", name)
		what := "rate limit exceeded"
		if limits[i].kind == kindSlots {
			what = "no free slot"
		}
		quota, err := anypb.New(&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{
			{Subject: name, Description: what},
		}})
		if err != nil {
			return nil, fmt.Errorf("grpclimit: %w", err)
		}
		ic.refused = append(ic.refused, prefix+what)
		ic.keyPrefix = append(ic.keyPrefix, prefix)
		ic.unavailable = append(ic.unavailable, prefix+"the limit's store is unavailable")
		ic.quota = append(ic.quota, quota)
	}
	return ic, nil
}

// Names returns the names of the limits, in the order given to New.
func (ic *Interceptor) Names() []string { return ic.l.Names() }

// ServerOptions returns the options that install both interceptors on a
// server, chained after any installed before them:
//
//	srv := grpc.NewServer(ic.ServerOptions()...)
func (ic *Interceptor) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(ic.Unary), grpc.ChainStreamInterceptor(ic.Stream)}
}

// Unary is a grpc.UnaryServerInterceptor that decides each unary call
// before its handler runs, and finishes the decision (ReturnOn, slots) when
// the handler returns.
func (ic *Interceptor) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	c, err := ic.decide(ctx, info.FullMethod, req)
	if err != nil {
		return nil, err
	}
	if ic.needCtx {
		ctx = c
	}
	completed := false
	defer func() { c.end(err, completed) }()
	resp, err = handler(ctx, req)
	completed = true
	return resp, err
}

// Stream is a grpc.StreamServerInterceptor that decides each streaming
// call before its handler runs, and finishes the decision when the handler
// returns, which ends the stream: the stream's slots are held, and
// refreshed, until then.
func (ic *Interceptor) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	c, err := ic.decide(ss.Context(), info.FullMethod, nil)
	if err != nil {
		return err
	}
	if ic.needCtx {
		ss = &serverStream{ServerStream: ss, ctx: c}
	}
	completed := false
	defer func() { c.end(err, completed) }()
	err = handler(srv, ss)
	completed = true
	return err
}

// serverStream is a stream whose context carries the call's state.
type serverStream struct {
	grpc.ServerStream
	ctx context.Context
}

// Context returns the stream's context, which carries the call's state
// for Return and Verified.
func (s *serverStream) Context() context.Context { return s.ctx }

// call is the state of one call through an Interceptor, in one
// allocation: the Ticket and the context that carries it to Return and
// Verified.
type call struct {
	context.Context
	t  httplimit.Ticket
	ic *Interceptor
}

type ctxKey struct{}

// Value returns the call itself for this package's key, and otherwise the
// value of the parent context.
func (c *call) Value(key any) any {
	if _, ok := key.(ctxKey); ok {
		return c
	}
	return c.Context.Value(key)
}

// from returns the call state ctx carries, or nil.
func from(ctx context.Context) *call {
	c, _ := ctx.Value(ctxKey{}).(*call)
	return c
}

// decide decides a call to method with the request req (nil for a
// stream), and returns its state, or the error that fails the call.
func (ic *Interceptor) decide(ctx context.Context, method string, req any) (*call, error) {
	c := &call{Context: ctx, ic: ic}
	var cost func(i int) (int, error)
	if ic.costed {
		cost = func(i int) (int, error) { return ic.costs[i](ctx, method, req) }
	}
	out := ic.l.DecideN(ctx, &c.t, func(i int) (string, error) { return ic.keys[i](ctx, method) }, cost)
	if out == httplimit.Admitted || ic.l.DryRun() {
		return c, nil
	}
	// All or nothing across chained Interceptors, as within one (Decide): a
	// refusal, a key error or a store error here gives back what the outer
	// ones took.
	Return(ctx)
	switch out {
	case httplimit.Refused:
		return nil, ic.refusal(&c.t)
	case httplimit.KeyFailed:
		i, err := c.t.Err()
		ke := keyError(err)
		return nil, status.Error(ke.Code, ic.keyPrefix[i]+ke.Reason)
	}
	i, _ := c.t.Err()
	return nil, status.Error(codes.Unavailable, ic.unavailable[i])
}

// refusal returns the error of a call refused by the limit recorded in t:
// codes.ResourceExhausted, with a RetryInfo and a QuotaFailure detail.
func (ic *Interceptor) refusal(t *httplimit.Ticket) error {
	i, _, wait := t.Refusal()
	retry, err := anypb.New(&errdetails.RetryInfo{RetryDelay: durationpb.New(wait)})
	if err != nil { // a RetryInfo always marshals; keep the code if it ever did not
		return status.Error(codes.ResourceExhausted, ic.refused[i])
	}
	return status.ErrorProto(&spb.Status{
		Code:    int32(codes.ResourceExhausted),
		Message: ic.refused[i],
		Details: []*anypb.Any{retry, ic.quota[i]},
	})
}

// end finishes the call's decision with the handler's code: that of err
// when the handler returned, codes.Internal when it panicked.
func (c *call) end(err error, completed bool) {
	code := codes.Internal
	if completed {
		code = status.Code(err)
	}
	c.t.Finish(finishStatus(code))
}

// Return gives back, from inside the handler, every reservation of the
// call that can be given back, whether its limit has ReturnOn or not (see
// httplimit.Ticket.Return): call it with the handler's context (a stream's
// Context()) when the call turns out not to count. It gives back the
// reservations of every Interceptor the call went through. Without an
// Interceptor, or called again, it does nothing.
func Return(ctx context.Context) {
	for c := from(ctx); c != nil; c = from(c.Context) {
		c.t.Return()
	}
}

// Settle settles, from inside the handler, the reservation of every limit
// of the call that has a Cost, at used, the units the call actually spent:
// fewer than the estimate gives the rest back, more debits the difference
// into debt (see httplimit.Settle). Call it with the handler's context (a
// stream's Context()). It settles the limits of every Interceptor the call
// went through; the others are untouched. Settling is final: a ReturnOn
// code, Return or another Settle gives nothing back of a settled limit. It
// does nothing and returns nil without an Interceptor, for a limit already
// given back, on a second call, or once the handler has returned; Return,
// before it, is Settle at 0. A Shared limit's store error is returned
// (joined with any other): that limit stays at the estimate, the others are
// settled. gRPC sends no rate-limit metadata, so nothing else changes.
func Settle(ctx context.Context, used int) error {
	var errs []error
	for c := from(ctx); c != nil; c = from(c.Context) {
		if err := c.t.Settle(used); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Verified takes, once the handler has verified the call's credentials,
// the events of the DecideAfterVerify limits that the interceptors the call
// went through only looked at (see DecideAfterVerify), and returns nil when
// they all fitted. When one did not, it has given back whatever the call
// took in every Interceptor it went through (all or nothing across the
// chain, as within one Interceptor) and returns the refusal
// (codes.ResourceExhausted with its details, whose retry delay is the
// longest wait of the limits that refused), which the handler must return.
// It returns nil when there is nothing to take (no such limit, no
// Interceptor, a second call, or a call whose handler has returned), and
// always under httplimit.DryRun.
func Verified(ctx context.Context) error {
	var refused *call
	var wait time.Duration
	for c := from(ctx); c != nil; c = from(c.Context) {
		if c.t.Verify() {
			continue
		}
		// Verify is false after a refusal, and also once the call is over
		// (nothing to take: no refusal to report).
		if i, _, w := c.t.Refusal(); i >= 0 && (refused == nil || w > wait) {
			refused, wait = c, w
		}
	}
	if refused == nil {
		return nil
	}
	Return(ctx) // what the other Interceptors took, as the refusing ones gave back their own
	return refused.ic.refusal(&refused.t)
}

// RetryDelay returns the retry delay of err, the error of a call, when it
// carries a google.rpc.RetryInfo detail (as a refusal by an Interceptor
// does), and whether it does: for a client, waiting that long after the
// refusal before calling again finds the limit admitting (unless others
// took the room meanwhile).
func RetryDelay(err error) (time.Duration, bool) {
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}
