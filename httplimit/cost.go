package httplimit

import (
	"context"
	"errors"
	"io"
	"net/http"
)

// CostFunc returns the estimated cost of a request, in the units of the
// limit it is given to (the tokens of an LLM call, the rows of an export):
// see Cost. It is called once per limit and request, from the request's
// goroutine, before the handler runs, and must be safe for concurrent use.
type CostFunc func(r *http.Request) (int, error)

// DefaultMaxCostBody is the most of a request body, in bytes, that a
// CostFunc may read unless MaxCostBody says otherwise.
const DefaultMaxCostBody = 1 << 20

// Cost makes a Pace or Shared limit reserve the estimate f makes of each
// request (pace.Pace.ReserveN, pace.Shared.ReserveN) instead of one event;
// the handler settles the reservation at the actual once it knows it
// (Settle). A request whose estimate does not fit is refused, and its
// Retry-After is when that many fit.
//
// f may read r.Body (a JSON body's max_tokens, say): what it reads is kept
// and given back, so the handler reads the whole body as it came. f may read
// at most MaxCostBody bytes (DefaultMaxCostBody by default); a read beyond
// them fails, and the request is a key error answered 413 whatever f
// returns. An error of f, an estimate below 1, or one above the limit's
// bucket (which could never fit) is a key error too (the KeyFailed outcome,
// answered by OnKeyError): a *KeyError of f's is answered with its status;
// any other error, and an estimate out of range, with 400. Nothing is
// taken of any limit then.
//
// Only a Pace or a Shared limit takes it, and not with DecideAfterVerify;
// New rejects it elsewhere with an error wrapping pace.ErrInvalidArgument
// (a store shared by replicas with costs is a Shared limit). New rejects a
// nil f; NewLimiter, which ignores KeyFuncs, ignores f too, and asks
// Limiter.DecideN for the cost instead.
func Cost(f CostFunc) Option {
	return func(s *settings) {
		if c := s.limit("Cost"); c != nil {
			c.cost, c.costed = f, true
		}
	}
}

// MaxCostBody bounds, at maxBytes, the request body that the CostFunc of
// the limit (see Cost) may read: at least 1; the default is
// DefaultMaxCostBody. It needs Cost on the same limit.
func MaxCostBody(maxBytes int64) Option {
	return func(s *settings) {
		if c := s.limit("MaxCostBody"); c != nil {
			c.costMax, c.costMaxSet = maxBytes, true
		}
	}
}

// Errors of a cost estimate; they carry no per-request data.
var (
	costFailed       = "the request's cost could not be estimated"
	errCostBelowOne  = badRequest("the request's estimated cost is below 1")
	errCostAboveMax  = badRequest("the request's estimated cost exceeds what the limit can ever admit")
	errCostTooLarge  = &KeyError{Status: http.StatusRequestEntityTooLarge, Reason: "the request body is larger than the bound for estimating its cost"}
	errCostBodyAfter = errors.New("httplimit: the request body was read beyond the bound for estimating its cost")
)

// costOf returns the units limit i reserves: 1 without cost, else the
// estimate cost makes, checked against the limit's bucket.
func (l *Limiter) costOf(i int, cost func(int) (int, error)) (int, error) {
	if cost == nil {
		return 1, nil
	}
	n, err := cost(i)
	switch {
	case err != nil:
		var ke *KeyError
		if errors.As(err, &ke) {
			return 0, err
		}
		return 0, &KeyError{Status: http.StatusBadRequest, Reason: costFailed, Err: err}
	case n < 1:
		return 0, errCostBelowOne
	case int64(n) > l.limits[i].q:
		return 0, errCostAboveMax
	}
	return n, nil
}

// estimate calls the limit's CostFunc with r, whose body it first makes
// replayable (see costBody), and bounds what the function reads of it.
func (lim *limit) estimate(r *http.Request) (int, error) {
	var b *costBody
	if r.Body != nil && r.Body != http.NoBody {
		var ok bool
		if b, ok = r.Body.(*costBody); !ok {
			b = &costBody{src: r.Body}
			r.Body = b
		}
		b.pos, b.max, b.tooLarge = 0, lim.costMax, false
	}
	n, err := lim.cost(r)
	if b != nil {
		b.pos, b.max = 0, -1 // the handler reads it all again
		if b.tooLarge {
			return 0, errCostTooLarge
		}
	}
	return n, err
}

// costBody is a request body that a CostFunc reads: the bytes it reads,
// at most max, are kept in buf, and read again (from pos) by the next
// CostFunc and by the handler, who then read the rest from src. max < 0
// reads past buf straight from src, keeping nothing.
type costBody struct {
	src      io.ReadCloser
	buf      []byte
	pos      int
	max      int64
	tooLarge bool // a read went beyond max
}

// Read reads what buf holds past pos, then src.
func (b *costBody) Read(p []byte) (int, error) {
	if b.pos < len(b.buf) {
		if b.max >= 0 && int64(b.pos) >= b.max {
			// An earlier CostFunc with a larger bound buffered more than
			// this one may read.
			b.tooLarge = true
			return 0, errCostBodyAfter
		}
		end := len(b.buf)
		if b.max >= 0 {
			end = int(min(int64(end), b.max))
		}
		n := copy(p, b.buf[b.pos:end])
		b.pos += n
		return n, nil
	}
	if b.max < 0 {
		return b.src.Read(p)
	}
	if b.tooLarge {
		return 0, errCostBodyAfter
	}
	if len(p) == 0 {
		return 0, nil
	}
	room := b.max - int64(len(b.buf))
	if room <= 0 {
		// One byte more tells an end at the bound from a body beyond it;
		// it is kept, for the handler.
		room = 1
		b.tooLarge = true
	}
	if int64(len(p)) > room {
		p = p[:room]
	}
	n, err := b.src.Read(p)
	b.buf = append(b.buf, p[:n]...)
	b.pos += n
	if b.tooLarge {
		if n == 0 {
			b.tooLarge = false // nothing beyond the bound (yet)
			return 0, err
		}
		return 0, errCostBodyAfter
	}
	return n, err
}

// Close closes the original body.
func (b *costBody) Close() error { return b.src.Close() }

// Settle settles, from inside the handler, the reservation of every limit
// of r that has a Cost, at used, the units the request actually spent (see
// Cost): fewer than the estimate gives the rest back, more debits the
// difference, putting the key into debt that its later requests are refused
// until repaid (pace.Reservation.Settle, pace.SharedReservation.Settle). The
// limits without a Cost are untouched. It settles the limits of every
// Middleware the request went through.
//
// Call it before writing the response: the RateLimit fields (and the
// X-RateLimit-* of LegacyHeaders) then report the settled state, what the
// next request sees; once the header is written they are not rewritten.
// Settling is final: a ReturnOn status, Return, or another Settle gives
// nothing back of a settled limit. Settle does nothing and returns nil
// without a Middleware, for a limit already given back, on a second call,
// or once the handler has returned; Return, before it, is Settle at 0.
//
// A Shared limit settles at the store; a store error (joined with any
// other, and counted as StoreFailed by the Observer) leaves that limit as
// it was reserved, at the estimate, and the others settled:
// pace.SharedReservation.Settle says what that costs. The error is the
// handler's to log; the response is the handler's too.
func Settle(r *http.Request, used int) error {
	var errs []error
	for c := from(r.Context()); c != nil; c = from(c.Context) {
		if t, done := c.use(); t != nil {
			if err := t.Settle(used); err != nil {
				errs = append(errs, err)
			}
			done()
		}
	}
	return errors.Join(errs...)
}

// Settle settles the reservations of the limits of the ticket that have a
// Cost at used (see the package's Settle), and returns the errors of the
// Shared limits whose store failed, joined. It does nothing and returns nil
// after any outcome but Admitted, after Finish, or on a second call.
func (t *Ticket) Settle(used int) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.finished || t.outcome != Admitted || t.settled {
		return nil
	}
	t.settled = true
	var errs []error
	for _, i := range t.l.order {
		if t.holds[i].state == holdTaken && t.l.limits[i].costed {
			if err := t.settle(i, used); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// maxSettled bounds the used of a settlement in the arithmetic of the
// fields: far beyond any bucket, and far from overflowing.
const maxSettled = 1 << 53

// settle settles the reservation of limit i, a Pace or Shared limit with a
// Cost, at used, and records what the next request sees. t.mu is held.
func (t *Ticket) settle(i, used int) error {
	h, lim := &t.holds[i], &t.l.limits[i]
	n, used := units(h), min(max(used, 0), maxSettled)
	taken, takenFull := t.remaining(i), t.fullIn(i)
	left, full := lim.settled(taken, n, used)
	var err error
	switch lim.kind {
	case kindShared:
		err = h.shared.Settle(context.WithoutCancel(t.ctx), used)
		switch {
		case err != nil:
			left, full = taken, takenFull // as reserved
			t.l.observe(i, StoreFailed)
		default: // the store's or the fallback's settled state
			left, full = h.shared.Remaining(), ceilSeconds(h.shared.FullIn())
		}
	default:
		h.res.Settle(used)
	}
	h.state, h.left, h.full, h.shared = holdSettled, left, full, nil
	t.returned = true // the RateLimit field is rewritten (see call.commit)
	return err
}

// units reports the units a hold reserved: its cost, or one.
func units(h *hold) int { return max(h.n, 1) }

// settled returns the whole events a Pace limit has left, and the seconds
// until its bucket is full, once a reservation of n that left r is settled
// at used at once: the events missing from a full bucket move by used − n,
// into debt (none left, and the debt's refill in t) beyond an empty bucket.
func (lim *limit) settled(r, n, used int) (int, int64) {
	missing := max(0, lim.q-int64(r)+int64(used)-int64(n))
	if missing == 0 {
		return int(lim.q), 0
	}
	return int(max(0, lim.q-missing)), windowSeconds(float64(missing), lim.rate)
}

// compileCost validates and records the Cost and MaxCostBody of cfg.
func (c *limit) compileCost(cfg limitConfig, needFunc bool) error {
	if !cfg.costed {
		if cfg.costMaxSet {
			return invalidf("limit %q: MaxCostBody without Cost", c.name)
		}
		return nil
	}
	switch {
	case c.kind != kindPace && c.kind != kindShared:
		return invalidf("limit %q: Cost on a %s limit: only Pace and Shared limits reserve a cost", c.name, kindNames[c.kind])
	case cfg.afterVerify:
		return invalidf("limit %q: Cost with DecideAfterVerify", c.name)
	case needFunc && cfg.cost == nil:
		return invalidf("limit %q has a nil CostFunc", c.name)
	case cfg.costMaxSet && cfg.costMax < 1:
		return invalidf("limit %q: MaxCostBody %d below 1 byte", c.name, cfg.costMax)
	}
	c.cost, c.costed, c.costMax = cfg.cost, true, cfg.costMax
	if !cfg.costMaxSet {
		c.costMax = DefaultMaxCostBody
	}
	return nil
}
