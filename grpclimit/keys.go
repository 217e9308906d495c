package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/httplimit"
)

// KeyFunc returns the key a limit counts a call against: the client's
// address, an API key, the method. ctx is the call's incoming context (its
// peer and metadata), fullMethod the method's full name,
// "/package.Service/Method". It is called once per limit and call, from the
// call's goroutine, before the handler runs, and must be safe for concurrent
// use. An error stops the call (see KeyError); the call is never counted
// against a key made up in its place. An empty key, or one longer than
// httplimit.MaxKeyLen bytes, is a key error too.
type KeyFunc func(ctx context.Context, fullMethod string) (string, error)

// KeyError is the error of a key function of this package, and of the
// interceptors when a key is empty or too long: what the call lacks, and
// the code of the refusal (codes.InvalidArgument, or codes.Internal for a
// fault of the server such as a peer address that is not an IP). Reason
// never contains text the client sent. Key functions of your own may return
// a *KeyError to choose the code and the reason sent to the client.
type KeyError struct {
	Code   codes.Code // the code of the refusal
	Reason string     // what is wrong, without client-supplied text
	Err    error      // the cause, if any (pace.ErrInvalidArgument for a bad configuration)
}

// Error returns "grpclimit: " followed by the reason.
func (e *KeyError) Error() string { return "grpclimit: " + e.Reason }

// Unwrap returns the cause.
func (e *KeyError) Unwrap() error { return e.Err }

func badKey(reason string) *KeyError {
	return &KeyError{Code: codes.InvalidArgument, Reason: reason}
}

// Key errors that carry no per-call data are allocated once.
var (
	errNoMetadata      = badKey("the key metadata is absent or empty")
	errManyMetadata    = badKey("the key metadata appears more than once")
	errNoPeer          = &KeyError{Code: codes.Internal, Reason: "the call has no peer address"}
	errInvalidMetadata = &KeyError{Code: codes.Internal, Reason: "Metadata: invalid metadata key name", Err: pace.ErrInvalidArgument}
	errInvalidTrusted  = &KeyError{Code: codes.Internal, Reason: "ClientIP: invalid trusted prefix", Err: pace.ErrInvalidArgument}
)

// keyError returns err as a *KeyError: a KeyError of this package as it
// is, one of package httplimit (from ClientIP, or the empty or overlong key
// that Limiter.Decide refuses) with its reason and the code matching its
// status, and any other error as InvalidArgument with a reason that does
// not repeat its text, which may come from the client.
func keyError(err error) *KeyError {
	var ke *KeyError
	if errors.As(err, &ke) {
		return ke
	}
	var he *httplimit.KeyError
	if errors.As(err, &he) {
		code := codes.InvalidArgument
		if he.Status >= http.StatusInternalServerError {
			code = codes.Internal
		}
		return &KeyError{Code: code, Reason: he.Reason, Err: err}
	}
	return &KeyError{Code: codes.InvalidArgument, Reason: "the call's key could not be read", Err: err}
}

// Metadata returns a KeyFunc whose key is the value of the incoming
// metadata key name (an API key, say; gRPC metadata keys are lower case,
// and name is lowered). The key must be present exactly once with a
// non-empty value; otherwise the error is a *KeyError answered
// codes.InvalidArgument. A binary key (ending in "-bin") gives its decoded
// bytes. An empty or invalid name (anything but a-z, 0-9, '-', '_', '.', or
// a leading ':' for a pseudo-header such as ":authority") makes every call
// fail with a *KeyError wrapping pace.ErrInvalidArgument, answered
// codes.Internal.
//
// The value is whatever the client sent: a limit keyed by it counts what a
// client claims to be. Put a limit keyed by ClientIP before it.
func Metadata(name string) KeyFunc {
	name = strings.ToLower(name)
	if !validMetadataKey(name) {
		return func(context.Context, string) (string, error) { return "", errInvalidMetadata }
	}
	return func(ctx context.Context, _ string) (string, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		v := md[name]
		switch {
		case len(v) == 0 || v[0] == "":
			return "", errNoMetadata
		case len(v) > 1:
			return "", errManyMetadata
		}
		return v[0], nil
	}
}

// validMetadataKey reports whether s is a valid metadata key: gRPC's
// characters for header names, in lower case, with an optional leading ':'.
func validMetadataKey(s string) bool {
	s = strings.TrimPrefix(s, ":")
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// FullMethod returns a KeyFunc whose key is the full name of the called
// method, "/package.Service/Method": a limit shared by every client of a
// method (an expensive one, say). A server's registered methods are a
// bounded set, but with an unknown-service handler
// (grpc.UnknownServiceHandler) the client chooses the name, and so the key.
func FullMethod() KeyFunc {
	return func(_ context.Context, fullMethod string) (string, error) { return fullMethod, nil }
}

// ClientIP returns a KeyFunc whose key is the client's IP address, which a
// client cannot choose, by the rules of httplimit.ClientIP applied to the
// call's peer address and its "forwarded" and "x-forwarded-for" metadata:
// with no trusted prefixes the peer's address, every forwarding header
// ignored; with trusted prefixes (your load balancers and gRPC proxies), the
// metadata of a trusted peer walked from the right, skipping trusted hops.
// A malformed or conflicting entry is a *KeyError answered
// codes.InvalidArgument; a peer that is not an IP address, or an invalid
// prefix in trusted (ClientIPWith reports it at once), one answered
// codes.Internal. IPv6 addresses are grouped by /64 (httplimit.IPv6Bits).
func ClientIP(trusted ...netip.Prefix) KeyFunc {
	k, err := ClientIPWith(httplimit.TrustProxies(trusted...))
	if err != nil {
		return func(context.Context, string) (string, error) { return "", errInvalidTrusted }
	}
	return k
}

// ClientIPWith is ClientIP configured by the options of
// httplimit.ClientIPWith: httplimit.TrustProxies, httplimit.ProxyHeader
// (the one forwarding header your proxies write: "forwarded" or
// "x-forwarded-for"), httplimit.IPv6Bits. The error wraps
// pace.ErrInvalidArgument when an option is invalid.
func ClientIPWith(opts ...httplimit.Option) (KeyFunc, error) {
	hk, err := httplimit.ClientIPWith(opts...)
	if err != nil {
		return nil, fmt.Errorf("grpclimit: %w", err)
	}
	return func(ctx context.Context, _ string) (string, error) {
		p, ok := peer.FromContext(ctx)
		if !ok || p.Addr == nil {
			return "", errNoPeer
		}
		md, _ := metadata.FromIncomingContext(ctx)
		r := requests.Get().(*http.Request)
		r.RemoteAddr = p.Addr.String()
		setLines(r.Header, "Forwarded", md["forwarded"])
		setLines(r.Header, "X-Forwarded-For", md["x-forwarded-for"])
		key, err := hk(r)
		r.RemoteAddr = ""
		clear(r.Header)
		requests.Put(r)
		if err != nil {
			return "", keyError(err)
		}
		return key, nil
	}, nil
}

// requests holds the requests through which ClientIPWith asks
// httplimit.ClientIP for a call's key: a request carrying only the
// connection's address and the forwarding headers, which ClientIP reads
// and does not keep. Missing: a form of httplimit.ClientIP that takes the
// address and the header lines without an *http.Request.
var requests = sync.Pool{New: func() any { return &http.Request{Header: make(http.Header, 2)} }}

// setLines sets the field lines of name in h when there are any (the
// pooled requests' headers are cleared after each use).
func setLines(h http.Header, name string, lines []string) {
	if len(lines) > 0 {
		h[name] = lines
	}
}
