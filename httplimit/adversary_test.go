package httplimit_test

// The tests of this file attack the package: each one's comment tells the
// defect it found in the past code, and the test pins the fix (or the
// documented behaviour).

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/httplimit"
	"github.com/ratepace/pace/internal/fakeclock"
	"github.com/ratepace/pace/memory"
)

// TestVerifiedRefusalReleasesSlots: Verify's doc says a refusal keeps
// slots "held until Finish", and Finish's that it releases the slots. But
// Finish returns early once the outcome is not Admitted, and a refusal by
// Verified sets it to Refused: the slot stays held for its whole ttl, and
// the client's next request is refused by a Slots limit of one.
func TestVerifiedRefusalReleasesSlots(t *testing.T) {
	clk := newClock()
	p := newPace(t, 1, clk)
	st := memory.New(memory.WithClock(clk.Now))
	m := mustNew(t, []httplimit.Limit{
		httplimit.Slots(st, 1, time.Hour, httplimit.ClientIP(), httplimit.Name("conns")),
		httplimit.Pace(p, httplimit.ClientID(), httplimit.Name("per-client"), httplimit.DecideAfterVerify()),
	})
	h := m.Wrap(tokenHandler(func(r *http.Request) {
		// Another request of the same client takes the last event while
		// this one is being verified.
		p.Allow(r.PostForm.Get("client_id"))
	}, true))
	if w := serve(h, tokenRequest("192.0.2.1", "app-1", "right")); w.Code != http.StatusTooManyRequests {
		t.Fatalf("first request: %d; want 429 from Verified", w.Code)
	}
	// The first request is over: its slot must be free again.
	w := serve(m.Wrap(tokenHandler(nil, true)), tokenRequest("192.0.2.1", "app-2", "right"))
	if w.Code != http.StatusOK {
		t.Fatalf("a request after a Verified refusal got %d: the refused request's slot is still held (leaked until its ttl)", w.Code)
	}
}

// TestVerifyRefusalGivesEverythingBack: a refusal by Verify (a
// DecideAfterVerify limit that no longer fits) refuses the request, which
// then spends nothing: its Pace events and its Bucket token, decided in
// Decide before the handler verified, are given back (the Bucket through
// Store.Refund). A failed verification, by contrast, keeps the Bucket token
// spent (TestReturnOnBucket...), so a per-address Bucket still bounds
// forged presentations.
func TestVerifyRefusalGivesEverythingBack(t *testing.T) {
	clk := newClock()
	p, perApp := newPace(t, 1, clk), newPace(t, 1, clk)
	st := memory.New(memory.WithClock(clk.Now))
	l, err := httplimit.NewLimiter([]httplimit.Limit{
		httplimit.Pace(p, nil, httplimit.Name("per-client"), httplimit.DecideAfterVerify()),
		httplimit.Bucket(st, 1, 0.001, nil, httplimit.Name("per-ip")),
		httplimit.Pace(perApp, nil, httplimit.Name("per-app")),
	})
	if err != nil {
		t.Fatal(err)
	}
	keys := func(client string) func(int) (string, error) {
		return func(i int) (string, error) {
			if i == 1 {
				return "192.0.2.1", nil
			}
			return client, nil
		}
	}
	var a httplimit.Ticket
	if out := l.Decide(context.Background(), &a, keys("app-1")); out != httplimit.Admitted {
		t.Fatalf("Decide: %v", out)
	}
	p.Allow("app-1") // taken meanwhile by another request of app-1
	if a.Verify() {
		t.Fatal("Verify admitted an event that no longer fits")
	}
	a.Finish(http.StatusTooManyRequests)
	if ok, _ := perApp.Peek("app-1"); !ok {
		t.Fatal("the request refused by Verify kept its per-app Pace event")
	}
	// The per-ip token (a bucket of one) is back: another client from the
	// same address is admitted, and then the address's bucket is spent.
	var b httplimit.Ticket
	out := l.Decide(context.Background(), &b, keys("app-2"))
	b.Finish(http.StatusOK)
	if out != httplimit.Admitted {
		_, name, _ := b.Refusal()
		t.Fatalf("another client from the same address: %v (%q); want admitted, the refused request's per-ip token given back", out, name)
	}
	var c httplimit.Ticket
	out = l.Decide(context.Background(), &c, keys("app-3"))
	c.Finish(http.StatusOK)
	if _, name, _ := c.Refusal(); out != httplimit.Refused || name != "per-ip" {
		t.Fatalf("a third client from the same address: %v (%q); want refused by per-ip, spent by the second", out, name)
	}
}

// TestUnverifiedTakeAtFinishGoesIntoDebt: DecideAfterVerify's doc says
// that when the handler never calls Verified "the pace then still holds over
// time" (only at one instant may a key get more: every request arriving
// while the event is only looked at is admitted). Finish took the late event
// with Allow, which debits nothing once the bucket is empty, so the pace did
// not hold: 350 admitted in 10 s at 1/s. Each served request must count,
// into debt: over T, at most the pace (rate × T + burst) plus the requests
// admitted by a look while others were in flight. Pace 1/s, a request every
// 10 ms, each served for 500 ms (50 in flight), 100 s.
func TestUnverifiedTakeAtFinishGoesIntoDebt(t *testing.T) {
	clk := newClock()
	l := perClientLimiter(t, 1, clk, httplimit.DecideAfterVerify())
	var inFlight []flight
	admitted, peak := 0, 0
	const steps = 10000 // 100 s in steps of 10 ms
	for step := range steps {
		for len(inFlight) > 0 && inFlight[0].done <= step {
			inFlight[0].t.Finish(http.StatusOK) // served; the handler forgot Verified
			inFlight = inFlight[1:]
		}
		t := new(httplimit.Ticket)
		if l.Decide(context.Background(), t, key) == httplimit.Admitted {
			admitted++
			inFlight = append(inFlight, flight{t, step + 50})
			peak = max(peak, len(inFlight))
		}
		clk.Advance(10 * time.Millisecond)
	}
	if bound := 1*100 + 1 + peak; admitted > bound {
		t.Fatalf("a forgotten Verified admitted %d requests in 100 s at a pace of 1/s (at most %d: the pace, plus %d admitted by a look while in flight)", admitted, bound, peak)
	}
}

// TestClientIPBareMappedRemoteIsIPv4: parseRemote accepts a bare host
// without a port, as its doc says; an IPv4-mapped IPv6 one is read as IPv4,
// but format then cuts the raw string at its last colon, so every such
// client gets the key "::ffff".
func TestClientIPBareMappedRemoteIsIPv4(t *testing.T) {
	key := httplimit.ClientIP()
	keyOf := func(remote string) string {
		r, _ := http.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = remote
		k, err := key(r)
		if err != nil {
			t.Fatalf("ClientIP(%q): %v", remote, err)
		}
		return k
	}
	a, b := keyOf("::ffff:192.0.2.1"), keyOf("::ffff:198.51.100.7")
	if a != "192.0.2.1" || b != "198.51.100.7" {
		t.Fatalf("bare IPv4-mapped remote addresses keyed %q and %q; want 192.0.2.1 and 198.51.100.7", a, b)
	}
}

// TestClientIDRefusesBasicAndFormNamingTwoClients: RFC 6749 section 2.3 says a client MUST NOT
// use more than one authentication method in a request. ClientID keys such
// a request by the Basic user name, while a handler that reads the form
// (r.PostFormValue("client_id")) authenticates the form's client: an
// attacker with valid credentials of its own, naming the victim in Basic,
// spends the victim's pace with accepted presentations. The key function
// should refuse a request whose two ids differ.
func TestClientIDRefusesBasicAndFormNamingTwoClients(t *testing.T) {
	form := url.Values{"grant_type": {"client_credentials"}, "client_id": {"attacker"}, "client_secret": {"attackers-own"}}
	r := httptestRequest(form.Encode())
	r.SetBasicAuth("victim", "x")
	k, err := httplimit.ClientID()(r)
	var ke *httplimit.KeyError
	if !errors.As(err, &ke) || ke.Status != http.StatusBadRequest {
		t.Fatalf("ClientID keyed a request naming two clients (Basic victim, form attacker) as %q (%v); want a KeyError answered 400", k, err)
	}
}

func httptestRequest(body string) *http.Request {
	r, _ := http.NewRequest(http.MethodPost, "/token", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.RemoteAddr = "192.0.2.1:1234"
	return r
}

// TestUndoReleasesSlotsOfACanceledRequest: Finish releases slots with a
// context that cannot be canceled (context.WithoutCancel), but the undo of
// a decision that stops at a later limit releases them with the request's
// own context. A client that goes away while a later limit reads its key
// (a body read by ClientID, an HTTP/2 stream reset) leaves the slot it
// took held until its ttl: with a Slots limit keyed by a client-named id,
// a forger can lock the victim out for the whole ttl without being
// admitted once.
func TestUndoReleasesSlotsOfACanceledRequest(t *testing.T) {
	st := memory.New()
	m := mustNew(t, []httplimit.Limit{
		httplimit.Slots(st, 1, time.Hour, httplimit.Header("X-Client"), httplimit.Name("streams")),
		httplimit.Pace(newPace(t, 10, newClock()), func(r *http.Request) (string, error) {
			if cancel, ok := r.Context().Value(cancelKey{}).(context.CancelFunc); ok {
				cancel() // the client goes away while its key is read
				return "", errors.New("reading the body: connection reset")
			}
			return "192.0.2.9", nil
		}, httplimit.Name("per-ip")),
	})
	h := m.Wrap(ok)
	ctx, cancel := context.WithCancel(context.Background())
	r := from("192.0.2.1").WithContext(context.WithValue(ctx, cancelKey{}, cancel))
	r.Header.Set("X-Client", "victim")
	if w := serve(h, r); w.Code != http.StatusBadRequest {
		t.Fatalf("the forger's request: %d; want 400 (key error)", w.Code)
	}
	r = from("198.51.100.7")
	r.Header.Set("X-Client", "victim")
	if w := serve(h, r); w.Code != http.StatusOK {
		t.Fatalf("the victim's request after a forger's request went away: %d; the slot it took was not released", w.Code)
	}
}

type cancelKey struct{}

// TestRetryAfterIsTheLongestWaitOfPaceLimits: RefusalFunc's doc says
// Retry-After is rounded up "so that waiting that long admits". The
// decision stops at the first refusal and reports its wait only: when a
// later limit is spent for longer, a client that waits exactly Retry-After
// is refused again, by the limit it was never told about.
func TestRetryAfterIsTheLongestWaitOfPaceLimits(t *testing.T) {
	clk := newClock()
	perIP, perClient := newPace(t, 1, clk), newPace(t, 0.1, clk)
	m := mustNew(t, []httplimit.Limit{
		httplimit.Pace(perIP, httplimit.ClientIP(), httplimit.Name("per-ip")),
		httplimit.Pace(perClient, httplimit.Header("X-Client"), httplimit.Name("per-client")),
	})
	h := m.Wrap(ok)
	req := func() *http.Request {
		r := from("192.0.2.1")
		r.Header.Set("X-Client", "app-1")
		return r
	}
	if w := serve(h, req()); w.Code != http.StatusOK {
		t.Fatalf("first request: %d", w.Code)
	}
	w := serve(h, req()) // both spent: per-ip for 1 s, per-client for 10 s
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("second request: %d; want 429", w.Code)
	}
	ra, err := strconv.Atoi(w.Header().Get("Retry-After"))
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Duration(ra) * time.Second)
	if w := serve(h, req()); w.Code != http.StatusOK {
		t.Fatalf("after waiting Retry-After (%d s) exactly: %d (RateLimit %q, Retry-After %s)", ra, w.Code, w.Header().Get("RateLimit"), w.Header().Get("Retry-After"))
	}
}

// TestNewRejectsOnePaceInTwoLimits: a Store limit's keys are prefixed with
// its name "so two Bucket limits of different names never share a bucket";
// a Pace limit's are not, and New accepts one *pace.Pace in two limits
// (Limit's doc: a Limit may be given to several Middlewares, which then
// share its pace). With one Pace behind a per-ip and a per-client limit, a
// client id is looked up in the same table as addresses: an attacker
// naming the victim's address as its client id spends the victim's per-ip
// pace from another address.
func TestNewRejectsOnePaceInTwoLimits(t *testing.T) {
	p := newPace(t, 1, newClock())
	m, err := httplimit.New([]httplimit.Limit{
		httplimit.Pace(p, httplimit.ClientIP(), httplimit.Name("per-ip")),
		httplimit.Pace(p, httplimit.Header("X-Client"), httplimit.Name("per-client")),
	})
	if err != nil {
		if !errors.Is(err, pace.ErrInvalidArgument) {
			t.Fatalf("New with one Pace in two limits: %v; want an error wrapping pace.ErrInvalidArgument", err)
		}
		return // refusing one Pace in two limits is the fix
	}
	h := m.Wrap(ok)
	r := from("198.51.100.7")
	r.Header.Set("X-Client", "192.0.2.1") // the victim's address, as a client id
	if w := serve(h, r); w.Code != http.StatusOK {
		t.Fatalf("attacker: %d", w.Code)
	}
	r = from("192.0.2.1")
	r.Header.Set("X-Client", "victim-app")
	if w := serve(h, r); w.Code != http.StatusOK {
		t.Fatalf("the victim's first request: %d: its per-ip pace was spent by another address naming it as a client id", w.Code)
	}
}

// TestForgerAt300PerSecondCostsHonestClientNothing: a forger presenting
// someone else's client id with a wrong secret at 300 requests/s costs that
// client nothing, and an honest client asking at 4/s under a pace of 5/s has
// every request accepted, with a check of 5 ms (a database lookup, not a
// password hash), through ReturnOn(401). At most two forged requests are in
// flight, yet every 401 but the first after a reordering is returned "not
// intact" and keeps the 5 ms it was held: 1.5 s of the victim's refill a
// second at 300/s.
func TestForgerAt300PerSecondCostsHonestClientNothing(t *testing.T) {
	for phase := range 10 { // when, within the forger's 10 ms cycle, the honest client asks
		if honest, asked := forgerAt300(t, phase); honest < asked {
			t.Errorf("under a forger at 300/s with 5 ms checks, the honest client at 4/s (pace 5/s), asking at %d ms of the forger's cycle, got %d/%d", phase, honest, asked)
		}
	}
}

func forgerAt300(t *testing.T, phase int) (honest, asked int) {
	clk := newClock()
	l := perClientLimiter(t, 5, clk, httplimit.ReturnOn(http.StatusUnauthorized))
	var inFlight []flight // in arrival order; each check takes 5 ms
	for ms := range 5000 {
		for len(inFlight) > 0 && inFlight[0].done <= ms {
			inFlight[0].t.Finish(http.StatusUnauthorized) // the wrong secret
			inFlight = inFlight[1:]
		}
		if m := ms % 10; m == 0 || m == 3 || m == 6 { // 300 forged requests a second
			tk := new(httplimit.Ticket)
			if l.Decide(context.Background(), tk, key) == httplimit.Admitted {
				inFlight = append(inFlight, flight{tk, ms + 5})
			}
		}
		if ms%250 == 120+phase { // the honest client, at 4/s
			asked++
			var tk httplimit.Ticket
			if l.Decide(context.Background(), &tk, key) == httplimit.Admitted {
				honest++
			}
			tk.Finish(http.StatusOK)
		}
		clk.Advance(time.Millisecond)
	}
	return honest, asked
}

// perClientLimiter returns a Limiter of one Pace limit of perSecond on clk,
// "per-client", with opts.
func perClientLimiter(t *testing.T, perSecond float64, clk *fakeclock.Clock, opts ...httplimit.Option) *httplimit.Limiter {
	t.Helper()
	l, err := httplimit.NewLimiter([]httplimit.Limit{
		httplimit.Pace(newPace(t, perSecond, clk), nil, append([]httplimit.Option{httplimit.Name("per-client")}, opts...)...),
	})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// key is the key of every limit of a review Limiter: one client.
func key(int) (string, error) { return "app-1", nil }

// flight is a request in flight: its ticket, and the step it ends at.
type flight struct {
	t    *httplimit.Ticket
	done int
}

// TestVerifiedRefusalGivesBackThroughNestedMiddlewares: Verified's doc says
// that when an event no longer fits "it has given back whatever the
// request took" and written the refusal, and Return and Verified walk every
// Middleware the request went through. Behind two Middlewares (a per-ip
// one outside, a per-client DecideAfterVerify one inside), a refusal by
// Verified gives back only the inner one's: the request is answered 429
// and its per-ip event stays spent.
func TestVerifiedRefusalGivesBackThroughNestedMiddlewares(t *testing.T) {
	clk := newClock()
	perIP, perClient := newPace(t, 1, clk), newPace(t, 1, clk)
	outer := mustNew(t, []httplimit.Limit{httplimit.Pace(perIP, httplimit.ClientIP(), httplimit.Name("per-ip"))})
	inner := mustNew(t, []httplimit.Limit{
		httplimit.Pace(perClient, httplimit.ClientID(), httplimit.Name("per-client"), httplimit.DecideAfterVerify()),
	})
	h := outer.Wrap(inner.Wrap(tokenHandler(func(r *http.Request) {
		perClient.Allow(r.PostForm.Get("client_id")) // taken meanwhile by another request of the client
	}, true)))
	if w := serve(h, tokenRequest("192.0.2.1", "app-1", "right")); w.Code != http.StatusTooManyRequests {
		t.Fatalf("first request: %d; want 429 from Verified", w.Code)
	}
	if ok, _ := perIP.Peek("192.0.2.1"); !ok {
		t.Fatal("the request refused by Verified kept its per-ip event (the outer Middleware's)")
	}
}

// TestResponseControllerFlushReportsNotSupported: the Middleware's
// doc says its recording writer keeps http.ResponseController working. A
// ResponseController's Flush reports http.ErrNotSupported when the writer
// cannot flush, which is how a streaming handler learns it cannot stream;
// through the recording writer it reports success though nothing could be
// flushed, since the writer implements Flush() and not FlushError.
func TestResponseControllerFlushReportsNotSupported(t *testing.T) {
	m := mustNew(t, []httplimit.Limit{
		httplimit.Pace(newPace(t, 10, newClock()), httplimit.ClientIP(), httplimit.ReturnOn(http.StatusUnauthorized)),
	})
	var direct, through error
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		through = http.NewResponseController(w).Flush()
	})
	w := plainWriter{httptest.NewRecorder()}
	direct = http.NewResponseController(w).Flush()
	m.Wrap(h).ServeHTTP(w, from("192.0.2.1"))
	if !errors.Is(direct, http.ErrNotSupported) {
		t.Fatalf("the plain writer flushes: %v", direct)
	}
	if !errors.Is(through, http.ErrNotSupported) {
		t.Fatalf("ResponseController.Flush through the Middleware = %v; the writer underneath cannot flush (%v)", through, direct)
	}
}

// plainWriter is a ResponseWriter that can do nothing but write.
type plainWriter struct{ rec *httptest.ResponseRecorder }

func (p plainWriter) Header() http.Header         { return p.rec.Header() }
func (p plainWriter) Write(b []byte) (int, error) { return p.rec.Write(b) }
func (p plainWriter) WriteHeader(code int)        { p.rec.WriteHeader(code) }

// TestClientIDReadsFormOnlyForPostPutPatch: ClientID's doc says it
// reads the client_id of an application/x-www-form-urlencoded body and that
// "the handler still reads the form". net/http reads a form body only for
// POST, PUT and PATCH; ClientID reads it for any method. A GET (or DELETE)
// carrying "client_id=victim" is keyed to the victim while the handler
// sees no client id at all and answers 405 or 400, statuses a per-client
// limit rarely returns on (the token-endpoint pattern is ReturnOn(401)):
// each such request spends one of the victim's events.
func TestClientIDReadsFormOnlyForPostPutPatch(t *testing.T) {
	for _, method := range []string{http.MethodGet, http.MethodDelete} {
		r, _ := http.NewRequest(method, "/token", strings.NewReader("client_id=victim"))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		k, err := httplimit.ClientID()(r)
		if err := r.ParseForm(); err != nil {
			t.Fatal(err)
		}
		if err == nil && r.PostForm.Get("client_id") != k {
			t.Errorf("%s: ClientID keyed the request %q; the handler's form has client_id %q", method, k, r.PostForm.Get("client_id"))
		}
	}
}
