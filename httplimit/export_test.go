package httplimit

import (
	"net/http"
	"time"
)

// WithAfterFunc replaces time.AfterFunc for the slot refresh, so that tests
// fire refreshes themselves.
func WithAfterFunc(f func(d time.Duration, fn func()) (stop func() bool)) Option {
	return func(s *settings) {
		if c := s.middleware("WithAfterFunc"); c != nil {
			c.afterFunc = f
		}
	}
}

// HoldTicket does what Return and Verified do first: it returns the Ticket
// of r's request marked in use, and the function that ends the use, or nil
// and nil once the request is over.
func HoldTicket(r *http.Request) (*Ticket, func()) { return from(r.Context()).use() }
