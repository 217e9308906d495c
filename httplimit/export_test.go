package httplimit

import "time"

// WithAfterFunc replaces time.AfterFunc for the slot refresh, so that tests
// fire refreshes themselves.
func WithAfterFunc(f func(d time.Duration, fn func()) (stop func() bool)) Option {
	return func(c *config) { c.afterFunc = f }
}
