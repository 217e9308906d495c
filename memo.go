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
	if ttl < 0 {
		return nil, invalid("negative ttl %v", ttl)
	}
	return &Memo{s: s, ttl: ttl}, nil
}

// maxRetries bounds how often a caller joins a new load after the one it
// waited on failed only because its initiator's context ended.
const maxRetries = 3

// Get returns the caller's own copy of the value at key, loading it with
// load on a miss. load runs once for all the callers that miss on key while
// it runs, with the first caller's context; its value is stored with the
// Memo's TTL. An error from load is returned and not stored. A caller whose
// ctx ends returns ctx.Err() at once while the load goes on for the others.
// When the value loads but cannot be stored, Get returns it with the
// Store's error; any other Store error is returned without loading.
//
// A panic in load is raised again, with the same value, in every caller
// waiting on that load, on its own goroutine; a load that calls
// runtime.Goexit returns an error. A nil load, or an invalid key, returns an
// error wrapping ErrInvalidArgument. docs/store.md has the details.
func (m *Memo) Get(ctx context.Context, key string, load func(ctx context.Context) ([]byte, error)) ([]byte, error) {
	if load == nil {
		return nil, invalid("nil load function")
	}
	v, err := m.s.Get(ctx, key)
	if !errors.Is(err, ErrNotFound) {
		return v, err
	}
	for retry := 0; ; retry++ {
		ch := m.g.DoChan(key, func() (any, error) { return m.fill(ctx, key, load) })
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case r := <-ch:
			if p, ok := r.Err.(*loadPanic); ok {
				panic(p.value)
			}
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

// fill is one flight of Get: it loads the value at key and stores it.
func (m *Memo) fill(ctx context.Context, key string, load func(ctx context.Context) ([]byte, error)) (any, error) {
	// A load that ended between our miss and this flight has stored the
	// value already.
	if v, err := m.s.Get(ctx, key); !errors.Is(err, ErrNotFound) {
		return v, err
	}
	v, err := guard(ctx, load)
	if err != nil {
		return nil, err
	}
	return v, m.s.Set(ctx, key, v, m.ttl)
}

// loadPanic carries the value a load panicked with from the flight to the
// callers of Get, which panic with it again.
type loadPanic struct{ value any }

func (p *loadPanic) Error() string { return "pace: Memo load panicked" }

var errLoadExited = errors.New("pace: Memo load exited its goroutine (runtime.Goexit) without returning")

// guard runs load and returns what it returns, a *loadPanic if it panicked,
// or errLoadExited if it called runtime.Goexit. singleflight would re-panic
// a panic on a goroutine of its own, where no caller can recover it, and
// after a Goexit it sends its callers nothing at all, so the flight must end
// normally either way. load runs on a goroutine of its own, since a Goexit
// cannot be stopped, only contained.
func guard(ctx context.Context, load func(ctx context.Context) ([]byte, error)) (v []byte, err error) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		returned := false
		defer func() {
			if returned {
				return
			}
			if p := recover(); p != nil { // panic(nil) recovers a *runtime.PanicNilError
				err = &loadPanic{value: p}
			} else {
				err = errLoadExited
			}
		}()
		v, err = load(ctx)
		returned = true
	}()
	<-done
	return v, err
}
