package grpclimit

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/driver"
	"github.com/ratepace/pace/httplimit"
)

// kind is what a Limit counts with.
type kind uint8

const (
	kindPace kind = iota + 1
	kindShared
	kindBucket
	kindSlots
)

// Limit is one limit applied to every call that an Interceptor decides: a
// Pace, a pace Shared by every replica through a Store, a token Bucket in a
// Store, or a count of concurrent Slots in a Store, each counted per key.
// Build it with Pace, Shared, Bucket or Slots; the
// zero Limit is rejected by New. It is an httplimit.Limit with a key read
// from gRPC calls, and behaves as one (see there for the details of each
// kind); New validates it.
type Limit struct {
	h    httplimit.Limit
	key  KeyFunc
	cost CostFunc // Cost's, or nil
	kind kind
	bad  string // what is wrong with an option, reported by New
}

// Pace returns a Limit that reserves one event of p for each call, keyed by
// key: the call is refused when the key's pace is spent, with the exact
// time until one event fits. It can be given back (ReturnOn, Return), and
// returns exactly (see pace.Reservation.Return).
func Pace(p *pace.Pace, key KeyFunc, opts ...Option) Limit {
	o, cost, bad := compile(opts)
	return Limit{h: httplimit.Pace(p, nil, o...), key: key, kind: kindPace, cost: cost, bad: bad}
}

// Shared returns a Limit that reserves one event of p for each call, keyed
// by key: a pace shared by every replica that uses p's store (see
// pace.Shared and httplimit.Shared). Its decision may make a round trip to
// the store, so a store error fails the call with codes.Unavailable unless
// p has a fallback. It can be given back (ReturnOn, Return), exactly as
// pace.SharedReservation.Return gives back, with a store call.
// DecideAfterVerify is not available.
//
// Its key in the store is prefixed as that of httplimit.Shared: a Shared
// limit of an HTTP middleware with the same name and p shares the buckets,
// so that a client counts once across both transports.
func Shared(p *pace.Shared, key KeyFunc, opts ...Option) Limit {
	o, cost, bad := compile(opts)
	return Limit{h: httplimit.Shared(p, nil, o...), key: key, kind: kindShared, cost: cost, bad: bad}
}

// Bucket returns a Limit that takes one token for each call from the token
// bucket at the call's key in s (Store.Take): capacity tokens,
// refilled at refillPerSec tokens per second, shared by every process that
// uses the same store. capacity must be at least 1 and refillPerSec
// positive; both finite.
//
// Its key in the store is that of httplimit.Bucket, "httplimit:" + the
// limit's name (escaped) + ":" + the key: a Bucket limit of an HTTP middleware with
// the same name and store shares the buckets, so that a client counts once
// across both transports; give the limits different names to keep them
// apart. It can be given back (ReturnOn, Return) through Store.Refund,
// exactly its own token, once (see httplimit.Bucket).
func Bucket(s driver.Taker, capacity, refillPerSec float64, key KeyFunc, opts ...Option) Limit {
	o, cost, bad := compile(opts)
	return Limit{h: httplimit.Bucket(s, capacity, refillPerSec, nil, o...), key: key, kind: kindBucket, cost: cost, bad: bad}
}

// Slots returns a Limit that holds one of limit concurrent slots at the
// call's key in s (Store.AcquireSlot) for the life of the call: acquired
// before the handler runs, released when it returns (for a stream, when the
// stream ends), and refreshed every ttl/3 meanwhile, so that a long stream
// keeps its slot however long it lives and the slots of a replica that
// crashed expire with their ttl. limit must be at least 1 and ttl at least
// a millisecond (see httplimit.Slots). A refusal's retry delay is one second, since no one knows when a
// slot will free. Its key in the store is prefixed as for Bucket. It cannot
// take ReturnOn: its slot is always given back when the handler returns.
func Slots(s driver.Slots, limit int64, ttl time.Duration, key KeyFunc, opts ...Option) Limit {
	o, cost, bad := compile(opts)
	return Limit{h: httplimit.Slots(s, limit, ttl, nil, o...), key: key, kind: kindSlots, cost: cost, bad: bad}
}

// Option configures one Limit (Pace, Shared, Bucket, Slots): the only
// option type of the package; New takes httplimit's, whose Limiter it runs.
type Option func(*limitConfig)

type limitConfig struct {
	name        string
	named       bool
	returnOn    []codes.Code
	afterVerify bool
	cost        CostFunc
	costed      bool
}

// Name names the limit: in refusals (the status message and the
// QuotaFailure detail), in metrics and in the keys of a Store limit. It
// must be 1 to 64 printable ASCII characters and unique within an
// Interceptor. The default is the kind of the limit followed by its
// position in the list given to New, as in "pace-0", "bucket-1", "slots-2"
// (see httplimit.Name).
func Name(name string) Option {
	return func(c *limitConfig) { c.name, c.named = name, true }
}

// ReturnOn gives this limit's reservation back when the handler returns
// one of the given codes, as if the call had not been made: with
// ReturnOn(codes.Unauthenticated) on a limit keyed by a client id, only
// calls whose credentials were accepted spend the client's pace, so a
// forger naming someone else's client spends nothing of it. The code of a
// handler's error is status.Code(err) (codes.Unknown for an error that is
// not a status); a handler that panics counts as codes.Internal. Codes
// accumulate over several ReturnOn and must be canonical (codes.OK to
// codes.Unauthenticated). A Pace, Shared or Bucket limit takes it: New
// rejects it on Slots, always released (see httplimit.ReturnOn).
func ReturnOn(code ...codes.Code) Option {
	return func(c *limitConfig) { c.returnOn = append(c.returnOn, code...) }
}

// DecideAfterVerify makes a Pace limit decide after the handler has
// verified the call's credentials, so that a call that fails verification
// never holds anything of the key's pace however long verification takes
// (see httplimit.DecideAfterVerify): before the handler, the interceptor
// only looks at the key's pace and refuses the call if one event would not
// fit; after a successful verification the handler calls Verified, which
// takes the event. A handler that never calls Verified takes the event when
// it returns codes.OK (unless OK is one of the limit's ReturnOn codes), and
// nothing otherwise. Only a Pace limit takes it.
func DecideAfterVerify() Option {
	return func(c *limitConfig) { c.afterVerify = true }
}

// compile returns the options of package httplimit that opts stand for,
// or what is wrong with one that is invalid.
func compile(opts []Option) (h []httplimit.Option, cost CostFunc, bad string) {
	var cfg limitConfig
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if cfg.named {
		h = append(h, httplimit.Name(cfg.name))
	}
	if len(cfg.returnOn) > 0 {
		statuses := make([]int, len(cfg.returnOn))
		for j, c := range cfg.returnOn {
			if c > codes.Unauthenticated {
				return nil, nil, fmt.Sprintf("ReturnOn code %d is not a canonical gRPC code", uint32(c))
			}
			statuses[j] = finishStatus(c)
		}
		h = append(h, httplimit.ReturnOn(statuses...))
	}
	if cfg.afterVerify {
		h = append(h, httplimit.DecideAfterVerify())
	}
	if cfg.costed {
		if cfg.cost == nil {
			return nil, nil, "nil CostFunc"
		}
		// The Limiter asks the interceptor for the cost (DecideN).
		h = append(h, httplimit.Cost(nil))
	}
	return h, cfg.cost, ""
}

// CostFunc returns the estimated cost of a call, in the units of the
// limit it is given to (see Cost): from its context, its full method name
// ("/package.Service/Method") and, for a unary call, its request message
// (nil for a stream, which is one call, estimated when it opens). It is
// called once per limit and call, before the handler runs, and must be
// safe for concurrent use.
type CostFunc func(ctx context.Context, fullMethod string, req any) (int, error)

// Cost makes a Pace or Shared limit reserve the estimate f makes of each
// call instead of one event; the handler settles the reservation at the
// actual once it knows it (Settle). A call whose estimate does not fit is
// refused, with the retry delay at which it does. An error of f, an
// estimate below 1, or one above the limit's bucket fails the call with
// codes.InvalidArgument (the code of a *KeyError of f's, if it returns
// one), taking nothing of any limit. Only a Pace or a Shared limit takes
// it, and not with DecideAfterVerify; New rejects it elsewhere, and a nil
// f, with an error wrapping pace.ErrInvalidArgument (see httplimit.Cost).
func Cost(f CostFunc) Option {
	return func(c *limitConfig) { c.cost, c.costed = f, true }
}

// finishStatus maps a gRPC code to the status that httplimit.Ticket.Finish
// and httplimit.ReturnOn take: 200 for codes.OK, so that a
// DecideAfterVerify limit counts the call accepted, and for every other
// canonical code a status of its own at 500 and above (501 to 516), so
// that ReturnOn(c) matches c alone; a code beyond the canonical ones is
// 599, which ReturnOn cannot name.
func finishStatus(c codes.Code) int {
	switch {
	case c == codes.OK:
		return 200
	case c <= codes.Unauthenticated:
		return 500 + int(c)
	}
	return 599
}

// invalidf returns a configuration error wrapping pace.ErrInvalidArgument.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("grpclimit: "+format+": %w", append(args, pace.ErrInvalidArgument)...)
}
