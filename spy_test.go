package pace_test

import (
	"context"
	"github.com/ratepace/pace/driver"
	"github.com/ratepace/pace/memory"
	"sync/atomic"
	"time"
)

// spy is a memory.Store whose Take, TakeMany and Refund are counted, and
// can be made to fail or wait (Hook), for the tests of Shared.
type spy struct {
	*memory.Store
	// RoundTrips counts the calls of Take and TakeMany that reached the
	// store, Decisions the keys they carried, Refunds the calls of Refund.
	RoundTrips, Decisions, Refunds atomic.Int64
	// Hook, when set, runs at the start of every Take, TakeMany and Refund
	// with the number of keys, and of every Get (a fallback's probe) with 0;
	// a non-nil error fails the call.
	Hook atomic.Pointer[func(ctx context.Context, keys int) error]
}

// newSpy returns a spy on a memory store reading now (the monotonic clock
// when nil).
func newSpy(now func() time.Time) *spy {
	var opts []memory.Option
	if now != nil {
		opts = append(opts, memory.WithClock(now))
	}
	return &spy{Store: memory.New(opts...)}
}

func (s *spy) hook(ctx context.Context, keys int) error {
	if h := s.Hook.Load(); h != nil {
		return (*h)(ctx, keys)
	}
	return nil
}

func (s *spy) Take(ctx context.Context, key string, shapes []driver.Shape) (driver.Grant, error) {
	if err := s.hook(ctx, 1); err != nil {
		return driver.Grant{}, err
	}
	s.RoundTrips.Add(1)
	s.Decisions.Add(1)
	return s.Store.Take(ctx, key, shapes)
}

func (s *spy) TakeMany(ctx context.Context, keys []string, shapes []driver.Shape, out []driver.Grant) error {
	if err := s.hook(ctx, len(keys)); err != nil {
		return err
	}
	s.RoundTrips.Add(1)
	s.Decisions.Add(int64(len(keys)))
	return s.Store.TakeMany(ctx, keys, shapes, out)
}

func (s *spy) Refund(ctx context.Context, key string, shapes []driver.Shape, r driver.Receipt) error {
	if err := s.hook(ctx, 1); err != nil {
		return err
	}
	s.Refunds.Add(1)
	return s.Store.Refund(ctx, key, shapes, r)
}

func (s *spy) Get(ctx context.Context, key string) ([]byte, error) {
	if err := s.hook(ctx, 0); err != nil {
		return nil, err
	}
	return s.Store.Get(ctx, key)
}
