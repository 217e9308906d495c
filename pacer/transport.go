package pacer

import (
	"fmt"
	"net/http"

	"github.com/ratepace/pace"
)

// Transport returns an http.RoundTripper that calls p.Wait with the
// request's context before each request (its cost in tokens, if any, set
// by WithCost) and p.ObserveLimits with what each response said
// (LimitsFromResponse) after it, then hands the response back unchanged.
// base nil means http.DefaultTransport.
//
// It does not retry: a 429 or 503 is returned to the caller like any
// other response, and the pacer merely makes sure the next request waits
// at least the Retry-After. A request whose context ends, or whose
// deadline comes before its slot, fails with the error of Wait and is not
// sent. A transport error is observed as a call that said nothing.
//
// The returned RoundTripper is safe for concurrent use by multiple
// goroutines if base is. Transport has no error result: with a nil p, every
// request fails, unsent, with an error wrapping pace.ErrInvalidArgument.
func Transport(base http.RoundTripper, p *Pacer) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{base: base, pick: func(*http.Request) *Pacer { return p }}
}

// GroupTransport is Transport with one Pacer per key of g, the key of a
// request given by key (for example the resource a path belongs to). With a
// nil g or key, every request fails, unsent, with an error wrapping
// pace.ErrInvalidArgument.
func GroupTransport(base http.RoundTripper, g *Group, key func(*http.Request) string) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	if g == nil || key == nil {
		return &transport{base: base, pick: func(*http.Request) *Pacer { return nil }}
	}
	return &transport{base: base, pick: func(r *http.Request) *Pacer { return g.Get(key(r)) }}
}

// errNoPacer is what a Transport without a Pacer answers every request.
var errNoPacer = fmt.Errorf("pacer: Transport without a Pacer: %w", pace.ErrInvalidArgument)

type transport struct {
	base http.RoundTripper
	pick func(*http.Request) *Pacer
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	p := t.pick(req)
	if p == nil {
		if req.Body != nil {
			req.Body.Close() // RoundTrip must close the body, even on errors
		}
		return nil, errNoPacer
	}
	if err := p.Wait(req.Context()); err != nil {
		if req.Body != nil {
			req.Body.Close() // RoundTrip must close the body, even on errors
		}
		return nil, err
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		p.Observe(Signal{})
		return nil, err
	}
	now := p.now()
	p.ObserveLimits(now, LimitsFromResponse(resp, now))
	return resp, nil
}
