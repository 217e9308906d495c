package pace

import (
	"context"
	"errors"
	"time"

	"golang.org/x/sync/singleflight"
)

// Memo memoises values in a Store: Get returns the stored value of a key,
// and on a miss loads it once, stores it with the Memo's TTL and returns it.
// Concurrent misses on one key in one process share a single call of the
// loader (through golang.org/x/sync/singleflight); misses in different
// processes sharing a Store each load once. It is meant for short-lived,
// expensive lookups on the request path (a client's quota, a key's
// configuration) that many requests ask for at once.
//
// Memo must be created with NewMemo. It is safe for concurrent use by
// multiple goroutines.
type Memo struct {
	s   Store
	ttl time.Duration
	g   singleflight.Group
}

// NewMemo returns a Memo over s that stores loaded values for ttl (0: until
// deleted). A nil s or a negative ttl returns an error wrapping
// ErrInvalidArgument.
func NewMemo(s Store, ttl time.Duration) (*Memo, error) {
	if s == nil {
		return nil, invalid("nil Store")
	}
	if err := ValidateTTL(ttl); err != nil {
		return nil, err
	}
	return &Memo{s: s, ttl: ttl}, nil
}

// maxRetries bounds how often a caller joins a new load after the one it
// waited on failed only because its initiator's context ended.
const maxRetries = 3

// Get returns the value at key, loading it with load on a miss. The result
// is the caller's own copy.
//
// On a miss, load runs once for all the callers that miss on key while it
// runs, with the context of the first of them; its value is stored with the
// Memo's TTL and returned to each. An error from load is returned to those
// callers and not stored, so the next miss loads again. A caller whose ctx
// ends while it waits returns ctx.Err() at once, and the load goes on for the
// others; a caller whose load failed only because the first caller's context
// ended joins a new load instead. When the value loads but cannot be stored,
// Get returns it together with the Store's error. Any other error from the
// Store is returned as it is, without loading. load must not panic.
//
// A nil load returns an error wrapping ErrInvalidArgument; so does an invalid
// key, through the Store.
func (m *Memo) Get(ctx context.Context, key string, load func(ctx context.Context) ([]byte, error)) ([]byte, error) {
	if load == nil {
		return nil, invalid("nil load function")
	}
	v, err := m.s.Get(ctx, key)
	if !errors.Is(err, ErrNotFound) {
		return v, err
	}
	for retry := 0; ; retry++ {
		ch := m.g.DoChan(key, func() (any, error) {
			// A load that ended between our miss and this flight has
			// stored the value already.
			if v, err := m.s.Get(ctx, key); !errors.Is(err, ErrNotFound) {
				return v, err
			}
			v, err := load(ctx)
			if err != nil {
				return nil, err
			}
			return v, m.s.Set(ctx, key, v, m.ttl)
		})
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case r := <-ch:
			if r.Shared && retry < maxRetries && ctx.Err() == nil &&
				(errors.Is(r.Err, context.Canceled) || errors.Is(r.Err, context.DeadlineExceeded)) {
				continue // the first caller gave up, we did not
			}
			v, _ := r.Val.([]byte)
			if v != nil {
				v = append(make([]byte, 0, len(v)), v...) // every caller gets its own
			}
			return v, r.Err
		}
	}
}
