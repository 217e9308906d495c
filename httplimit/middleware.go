package httplimit

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Middleware applies a list of Limits to every request of the handlers it
// wraps, all or nothing (across nested Middlewares too): the first refusal,
// key error or store error gives back what the earlier limits took. A
// refused request gets a 429 with Retry-After (OnRefusal); a key that
// cannot be read a 400 (KeyError, OnKeyError), a store error a 503
// (OnStoreError). When the handler returns, each limit whose ReturnOn
// statuses include its status is given back, and slots are released. Every
// response carries the RateLimit-Policy and RateLimit fields. Streaming and
// WebSockets work through it, and the handler may call Return, Settle and
// Verified.
//
// The header field lines the middleware sets are shared between responses:
// change them with http.Header's methods, which copy, never by writing into
// the slices of the header map. docs/httplimit.md has the long story.
// Middleware must be created with New. It is safe for concurrent use by
// multiple goroutines.
type Middleware struct {
	l          *Limiter
	needCtx    bool // Return or Verified can do something
	needStatus bool // Finish needs the handler's status
	costs      bool // some limit has a Cost
}

// New returns a Middleware applying limits. The error wraps
// pace.ErrInvalidArgument when limits is empty, when a limit is the zero
// Limit, has a nil KeyFunc, pace or store, an invalid shape or name, two
// limits have the same name, or an option does not fit its limit (ReturnOn
// on Slots, DecideAfterVerify on anything but a Pace, Cost on Bucket or
// Slots or with DecideAfterVerify, a nil CostFunc), or two
// Pace limits have the same *pace.Pace (their keys would share one table);
// or it is the error of the WithObserver function.
func New(limits []Limit, opts ...Option) (*Middleware, error) {
	l, err := newLimiter(limits, opts, true)
	if err != nil {
		return nil, err
	}
	m := &Middleware{l: l}
	for i := range l.limits {
		c := &l.limits[i]
		m.needCtx = m.needCtx || c.refundable() || c.afterVerify
		// The recording writer also rewrites the RateLimit field when
		// something was given back before the header went out.
		m.needStatus = m.needStatus || c.refundable() || c.afterVerify
		m.costs = m.costs || c.costed
		c.problem = problemBody(quotaExceeded(c.name))
	}
	return m, nil
}

// Names returns the names of the limits, in the order given to New.
func (m *Middleware) Names() []string { return m.l.Names() }

// Wrap returns next behind the limits.
func (m *Middleware) Wrap(next http.Handler) http.Handler {
	return &handler{m: m, next: next}
}

type handler struct {
	m    *Middleware
	next http.Handler
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m := h.m
	s := states.Get().(*state)
	outer := from(r.Context()) // a Middleware this request went through before this one
	var cost func(i int) (int, error)
	if m.costs {
		cost = func(i int) (int, error) { return m.l.limits[i].estimate(r) }
	}
	out := m.l.DecideN(r.Context(), &s.t, func(i int) (string, error) { return m.l.limits[i].key(r) }, cost)
	var c *call
	if m.needCtx && (out == Admitted || m.l.cfg.dryRun || outer != nil) {
		// Only a request the handler serves has something to give back,
		// and a nested one's refusal is answered through the outer
		// Middleware's writer, which composes the fields from the calls.
		// The request copy and its call in one allocation: WithContext,
		// inlined, copies onto the stack, and the copy is kept here.
		p := &passage{call: call{Context: r.Context(), s: s, gen: s.gen, rw: w, dryRun: m.l.cfg.dryRun, legacy: m.l.cfg.legacy}}
		p.req = *r.WithContext(&p.call)
		c, r = &p.call, &p.req
	}
	hdr := w.Header()
	if outer != nil && out != Admitted && !m.l.cfg.dryRun {
		// All or nothing across nested Middlewares, as within one (Decide):
		// a refusal, a key error or a store error here gives back what the
		// outer ones took.
		Return(r)
	}
	var one *[1]string // for a RateLimit line that is not cached: the call's, if any
	if c != nil {
		one = &c.field
	}
	switch {
	case outer == nil:
		if m.l.policy != nil {
			hdr["Ratelimit-Policy"] = m.l.policy
		}
		if rl := s.t.rateLimit(one); rl != nil {
			hdr["Ratelimit"] = rl[:len(rl):len(rl)] // an Add copies, and never writes into a shared line
		}
	default:
		// Nested: this Middleware's fields join those of the ones before,
		// which rewrite them from here (see commit).
		if c != nil {
			for x := outer; x != nil; x = from(x.Context) {
				x.innermost = c
			}
		}
		if m.l.policy != nil {
			p := hdr["Ratelimit-Policy"]
			hdr["Ratelimit-Policy"] = append(p[:len(p):len(p)], m.l.policy...)
		}
		setRateLimit(hdr, compose(outer, &s.t, one))
	}
	if m.l.cfg.legacy {
		setLegacy(hdr, outer, &s.t)
	}
	if !m.l.cfg.dryRun && out != Admitted {
		switch out {
		case Refused:
			m.l.refuse(w, r, &s.t)
		case KeyFailed, StoreFailed:
			_, err := s.t.Err()
			if out == KeyFailed {
				m.l.cfg.onKeyError(w, r, err)
			} else {
				m.l.cfg.onStoreError(w, r, err)
			}
		}
		s.recycle()
		return
	}
	if !m.needStatus {
		defer s.end(nil)
		h.next.ServeHTTP(w, r)
		s.completed = true
		return
	}
	defer s.end(c)
	h.next.ServeHTTP(c, r)
	s.completed = true
	if c.status == 0 {
		// The handler wrote nothing: net/http writes the header as it is
		// now, so it must report what Return or Settle left.
		s.t.mu.Lock()
		changed := s.t.returned
		s.t.mu.Unlock()
		if changed {
			c.commit(http.StatusOK)
		}
	}
}

// setRateLimit sets the RateLimit field lines of h, or removes the field
// when there are none.
func setRateLimit(h http.Header, lines []string) {
	if lines == nil {
		delete(h, "Ratelimit")
		return
	}
	h["Ratelimit"] = lines[:len(lines):len(lines)]
}

// maxNested bounds the nested Middlewares whose fields combine.
const maxNested = 8

// compose returns the RateLimit field lines of a request from the tickets
// of every Middleware it went through: those of the calls from outer
// outwards, and own (nil for none), the innermost, which the caller owns
// or holds (locked, if shared). After a refusal, the item of the refusal
// that waits longest alone (the request spent nothing; none when that is a
// Slots limit); otherwise every item of every ticket, outermost first.
// one is for own's line when it is not a cached one.
func compose(outer *call, own *Ticket, one *[1]string) []string {
	var all, refusal []string
	refused := false
	var longest time.Duration
	eachTicket(outer, own, func(t *Ticket, own bool) {
		var line [1]string
		lp := &line
		if own {
			lp = one
		}
		lines := t.rateLimit(lp)
		switch {
		case t.outcome == Refused && (!refused || t.wait > longest):
			refused, longest = true, t.wait
			refusal = append(refusal[:0], lines...)
		case t.outcome == Admitted:
			all = append(all, lines...)
		}
	})
	if refused {
		return refusal
	}
	return all
}

// eachTicket calls f with the ticket of every Middleware a request went
// through, outermost first: those of the calls from outer outwards
// (locked while f runs; a call whose request is over is skipped), then own
// unless nil (which the caller owns or holds, locked if shared; own is
// true for it).
func eachTicket(outer *call, own *Ticket, f func(t *Ticket, own bool)) {
	var calls [maxNested]*call
	n := 0
	for x := outer; x != nil && n < len(calls); x = from(x.Context) {
		calls[n] = x
		n++
	}
	for k := n - 1; k >= 0; k-- {
		t, done := calls[k].use()
		if t == nil {
			continue
		}
		t.mu.Lock()
		f(t, false)
		t.mu.Unlock()
		done()
	}
	if own != nil {
		f(own, true)
	}
}

// legacyAsked reports whether a Middleware the request went through (the
// calls from outer outwards, and own's Limiter) sets X-RateLimit-*.
func legacyAsked(outer *call, own *Limiter) bool {
	if own != nil && own.cfg.legacy {
		return true
	}
	for x := outer; x != nil; x = from(x.Context) {
		if x.legacy {
			return true
		}
	}
	return false
}

// setLegacy sets the X-RateLimit-* fields of a request from the tickets of
// every Middleware it went through (see eachTicket): after a refusal, the
// refusing limit that waits longest (no fields when that is a Slots
// limit); otherwise the limit with the fewest events left, as the next
// request will see them (a limit given back counts one more).
func setLegacy(h http.Header, outer *call, own *Ticket) {
	var lim *limit
	var r int
	var reset int64
	refused := false
	var longest time.Duration
	eachTicket(outer, own, func(t *Ticket, _ bool) {
		switch {
		case t.outcome == Refused && (!refused || t.wait > longest):
			refused, longest, lim = true, t.wait, nil
			if l := &t.l.limits[t.failed]; l.reportsRemaining() {
				lim, r, reset = l, 0, retryAfterSeconds(t.wait)
			}
		case t.outcome == Admitted && !refused:
			for i := range t.holds {
				if !t.reports(i) {
					continue
				}
				left, full := t.left(i)
				if lim == nil || left < r {
					lim, r, reset = &t.l.limits[i], left, full
				}
			}
		}
	})
	if lim == nil {
		delete(h, "X-Ratelimit-Limit")
		delete(h, "X-Ratelimit-Remaining")
		delete(h, "X-Ratelimit-Reset")
		return
	}
	h["X-Ratelimit-Limit"] = []string{strconv.FormatInt(lim.q, 10)}
	h["X-Ratelimit-Remaining"] = []string{strconv.Itoa(r)}
	h["X-Ratelimit-Reset"] = []string{strconv.FormatInt(reset, 10)}
}

// refuse answers a refusal recorded in t; the RateLimit fields are set.
func (l *Limiter) refuse(w http.ResponseWriter, r *http.Request, t *Ticket) {
	i, name, wait := t.Refusal()
	secs := retryAfterSeconds(wait)
	w.Header()["Retry-After"] = cached(retryAfterFields[:], int(secs), nil, func() string { return strconv.FormatInt(secs, 10) })
	if l.cfg.onRefusal == nil {
		writeProblem(w, http.StatusTooManyRequests, l.limits[i].problem)
		return
	}
	l.cfg.onRefusal(w, r, Refusal{Limit: name, RetryAfter: wait})
}

// state is the part of one request's passage through a Middleware that
// outlives no request: its Ticket, recycled through states once the
// request is over, so that a request the handler serves allocates only its
// passage (the request copy and its call), and a refused one nothing.
//
// Someone may still hold the call after the request is over (a handler
// that keeps its request and calls Return late, from another goroutine):
// gen tells such a caller that the state has moved on, and busy keeps a
// state that a caller is using from being recycled under it. Both are
// guarded by mu.
type state struct {
	mu        sync.Mutex
	gen       uint64 // bumped when the request is over
	busy      int    // calls using the state (see call.use)
	t         Ticket
	completed bool // the handler returned without panicking
}

var states = sync.Pool{New: func() any { return new(state) }}

// end finishes the ticket with the handler's status: the one it wrote
// through c, 200 if it wrote none (or c is nil: no limit needs the status),
// 500 if it panicked before writing one. Then it recycles s.
func (s *state) end(c *call) {
	status := 0
	if c != nil {
		status = int(c.status)
	}
	if status == 0 {
		status = http.StatusOK
		if !s.completed {
			status = http.StatusInternalServerError
		}
	}
	s.t.Finish(status)
	s.recycle()
}

// recycle puts s back in states, unless a late caller is using it (it is
// then left to the garbage collector); either way, calls of the request
// over find it moved on.
func (s *state) recycle() {
	s.mu.Lock()
	s.gen++
	busy := s.busy > 0
	s.mu.Unlock()
	if busy {
		return
	}
	s.t.reset()
	s.completed = false
	states.Put(s)
}

// call is one request's passage through a Middleware: the context that
// carries it to Return and Verified, and the ResponseWriter that records
// the handler's status. It is never recycled, so that a handler may keep
// its request (and its context) as long as it likes.
type call struct {
	context.Context
	s         *state
	gen       uint64 // s.gen while s is this request's
	rw        http.ResponseWriter
	status    int32 // the handler's status, once written
	committed bool  // the header is on its way: see commit
	// dryRun and legacy are the Middleware's DryRun and LegacyHeaders, for
	// callers that find the request over (its state recycled). Two flags
	// rather than the Limiter keep a passage in the 384-byte size class.
	dryRun, legacy bool
	innermost      *call     // of the Middlewares nested inside this one, the last to decide
	field          [1]string // the RateLimit field line, when it is not a cached one
}

// passage is the one allocation of a request through a Middleware that can
// give something back: the copy of the request whose context is its call,
// and the call (384 bytes).
type passage struct {
	req  http.Request
	call call
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

// from returns the call ctx carries, or nil.
func from(ctx context.Context) *call {
	c, _ := ctx.Value(ctxKey{}).(*call)
	return c
}

// use returns the request's Ticket and a function to call when done with
// it, or nil when the request is over (its state recycled).
func (c *call) use() (*Ticket, func()) {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gen != c.gen {
		return nil, nil
	}
	s.busy++
	return &s.t, func() {
		s.mu.Lock()
		s.busy--
		s.mu.Unlock()
	}
}

// Return gives back, from inside the handler, every reservation of r that
// can be given back, whether its limit has ReturnOn or not (see
// Ticket.Return): call it when the request turns out not to count, before
// or after writing the response. It gives back the reservations of every
// Middleware the request went through. Without a Middleware, called again,
// or once the handler has returned, it does nothing.
func Return(r *http.Request) {
	for c := from(r.Context()); c != nil; c = from(c.Context) {
		if t, done := c.use(); t != nil {
			t.Return()
			done()
		}
	}
}

// Verified takes, once the handler has verified the presentation, the
// events of the DecideAfterVerify limits that the middleware only looked
// at, in every Middleware the request went through, and reports whether
// they all fitted (see DecideAfterVerify). When one did not, it has given
// back whatever the request took that can be given back (as Return does,
// in every Middleware the request went through), written the refusal (429,
// a Retry-After that every limit admits after, and the RateLimit fields,
// through OnRefusal) to w, and reports false: the handler must then return
// without writing. When they fitted, it adds their RateLimit items to w's
// header. Call it before writing the response. It reports true when there
// is nothing to take (no such limit, no Middleware, or a second call), and
// always under DryRun; false once the handler has returned, or after a
// refusal by an earlier call.
func Verified(w http.ResponseWriter, r *http.Request) bool {
	first := from(r.Context())
	ok, changed := true, false
	var refused *call
	var longest time.Duration
	for c := first; c != nil; c = from(c.Context) {
		t, done := c.use()
		if t == nil {
			ok = ok && c.dryRun
			continue
		}
		t.mu.Lock()
		pending := t.pending > 0
		t.mu.Unlock()
		verified := t.Verify()
		t.mu.Lock()
		if !verified {
			ok = false
			if pending && t.outcome == Refused && (refused == nil || t.wait > longest) {
				refused, longest = c, t.wait
			}
		}
		t.mu.Unlock()
		changed = changed || pending
		done()
	}
	if refused != nil {
		Return(r) // what the others took, as the refusing ones gave back their own
	}
	if !changed {
		return ok
	}
	hdr := w.Header()
	setRateLimit(hdr, compose(first, nil, nil))
	if legacyAsked(first, nil) {
		setLegacy(hdr, first, nil)
	}
	if refused == nil {
		return ok
	}
	t, done := refused.use()
	if t == nil {
		return false
	}
	defer done()
	t.l.refuse(w, r, t)
	return false
}

// commit runs once, when the handler's header is about to be written with
// status: it gives back the limits whose ReturnOn holds status, and, when
// anything was given back since the decision (by ReturnOn, or by Return
// from the handler), rewrites the RateLimit field with what the next request
// will see.
func (c *call) commit(status int) {
	if c.committed {
		return
	}
	c.committed = true
	t, done := c.use()
	if t == nil {
		return
	}
	t.returnOn(status)
	done()
	start := c // the innermost call of the request, whose chain holds every ticket
	if c.innermost != nil {
		start = c.innermost
	}
	for x := start; x != nil; x = from(x.Context) {
		t, done := x.use()
		if t == nil {
			continue
		}
		t.mu.Lock()
		returned := t.returned
		t.mu.Unlock()
		done()
		if returned {
			setRateLimit(c.rw.Header(), compose(start, nil, nil))
			if legacyAsked(start, nil) {
				setLegacy(c.rw.Header(), start, nil)
			}
			return
		}
	}
}

// Header returns the handler's header map.
func (c *call) Header() http.Header { return c.rw.Header() }

// WriteHeader records the first final status and writes it.
func (c *call) WriteHeader(code int) {
	if c.status == 0 && (code < 100 || code > 199 || code == http.StatusSwitchingProtocols) {
		c.status = int32(code)
		c.commit(code)
	}
	c.rw.WriteHeader(code)
}

// Write writes b, after an implicit 200 if no status was written.
func (c *call) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
		c.commit(http.StatusOK)
	}
	return c.rw.Write(b)
}

// WriteString writes str without converting it, as net/http's own writer.
func (c *call) WriteString(str string) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
		c.commit(http.StatusOK)
	}
	return io.WriteString(c.rw, str)
}

// ReadFrom copies from src, letting the underlying writer use sendfile.
func (c *call) ReadFrom(src io.Reader) (int64, error) {
	if c.status == 0 {
		c.status = http.StatusOK
		c.commit(http.StatusOK)
	}
	if rf, ok := c.rw.(io.ReaderFrom); ok {
		return rf.ReadFrom(src)
	}
	return io.Copy(writerOnly{c.rw}, src)
}

type writerOnly struct{ io.Writer }

// Flush sends what is buffered to the client (http.Flusher), through
// whatever wrappers lie underneath; it does nothing when none can flush.
func (c *call) Flush() { c.FlushError() }

// FlushError is Flush reporting its error, for http.ResponseController:
// one wrapping http.ErrNotSupported when nothing underneath can flush, so a
// streaming handler learns it cannot stream. A flush that succeeded before
// any status was written records 200, as it sends one.
func (c *call) FlushError() error {
	if c.status == 0 {
		c.commit(http.StatusOK) // a flush sends the header
	}
	err := http.NewResponseController(c.rw).Flush()
	if err == nil && c.status == 0 {
		c.status = http.StatusOK
	}
	return err
}

// Hijack takes over the connection (http.Hijacker), through whatever
// wrappers lie underneath; the error wraps http.ErrNotSupported when none
// can (HTTP/2). The status is then recorded as 101.
func (c *call) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	var conn net.Conn
	var rw *bufio.ReadWriter
	var err error
	if c.status == 0 {
		c.commit(http.StatusSwitchingProtocols)
	}
	if h, ok := c.rw.(http.Hijacker); ok {
		conn, rw, err = h.Hijack()
	} else {
		conn, rw, err = http.NewResponseController(c.rw).Hijack()
	}
	if err == nil && c.status == 0 {
		c.status = http.StatusSwitchingProtocols
	}
	return conn, rw, err
}

// Unwrap returns the underlying ResponseWriter, for
// http.ResponseController.
func (c *call) Unwrap() http.ResponseWriter { return c.rw }

// problem is an RFC 9457 problem details object.
type problem struct {
	Type     string   `json:"type"`
	Title    string   `json:"title"`
	Status   int      `json:"status"`
	Detail   string   `json:"detail,omitempty"`
	Policies []string `json:"violated-policies,omitempty"`
}

// problemDoc is a problem details body, encoded, with its Content-Length.
type problemDoc struct {
	body   []byte
	length []string
}

func problemBody(p problem) problemDoc {
	b, err := json.Marshal(p)
	if err != nil {
		panic("httplimit: cannot encode problem details: " + err.Error()) // cannot happen: strings and ints
	}
	b = append(b, '\n')
	return problemDoc{body: b, length: []string{strconv.Itoa(len(b))}}
}

// Header field lines every problem shares; their capacity is their length,
// so a handler's Add copies them rather than writing into them.
var (
	problemType = []string{"application/problem+json"}
	noSniff     = []string{"nosniff"}
	// retryAfterFields caches the Retry-After lines of the first 1024
	// seconds.
	retryAfterFields [maxItems]atomic.Pointer[[]string]
)

// writeProblem writes a problem details response.
func writeProblem(w http.ResponseWriter, status int, p problemDoc) {
	h := w.Header()
	h["Content-Type"], h["X-Content-Type-Options"], h["Content-Length"] = problemType, noSniff, p.length
	w.WriteHeader(status)
	w.Write(p.body)
}

func quotaExceeded(name string) problem {
	return problem{
		Type:     "https://iana.org/assignments/http-problem-types#quota-exceeded",
		Title:    "Too Many Requests",
		Status:   http.StatusTooManyRequests,
		Detail:   "httplimit: the request exceeds the limit named in violated-policies; retry after Retry-After seconds",
		Policies: []string{name},
	}
}

var (
	genericKeyError = "httplimit: the request does not carry the key a rate limit needs"
	serverFault     = problemBody(problem{Type: "about:blank", Title: "Internal Server Error", Status: 500,
		Detail: "httplimit: the rate limit cannot read its key (server configuration)"})
	storeDown = problemBody(problem{Type: "about:blank", Title: "Service Unavailable", Status: 503,
		Detail: "httplimit: the rate limit store is unavailable"})
)

func defaultKeyError(w http.ResponseWriter, r *http.Request, err error) {
	status, detail := http.StatusBadRequest, genericKeyError
	var ke *KeyError
	if errors.As(err, &ke) && ke.Status >= 400 && ke.Status <= 599 {
		status, detail = ke.Status, ke.Error()
	}
	if status >= 500 {
		writeProblem(w, status, serverFault)
		return
	}
	writeProblem(w, status, problemBody(problem{Type: "about:blank", Title: statusText(status), Status: status, Detail: detail}))
}

func defaultStoreError(w http.ResponseWriter, r *http.Request, err error) {
	writeProblem(w, http.StatusServiceUnavailable, storeDown)
}
