package pace

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// StandIn is the store the root tests of Shared run on: Take, TakeMany and
// Refund over a map, built only on TakeAll, RemainingAll and RefundAll, as
// the Store contract for Shared fixes them. The other Store methods are not
// implemented (the nil Store embedded panics): Shared never calls them.
type StandIn struct {
	Store

	now func() time.Duration // the store's clock

	mu   sync.Mutex
	rows map[string]*standInRow

	// RoundTrips counts the calls of Take and TakeMany, Decisions the keys
	// they decided, Refunds the calls of Refund.
	RoundTrips, Decisions, Refunds atomic.Int64
	// Hook, when set, runs at the start of every Take, TakeMany and Refund,
	// with the number of keys; a non-nil error fails the call.
	Hook atomic.Pointer[func(ctx context.Context, keys int) error]
}

type standInRow struct {
	tats [MaxShapes]time.Duration
	gen  uint64
}

// NewStandIn returns an empty StandIn whose clock is now (the time since
// the StandIn was made when now is nil).
func NewStandIn(now func() time.Duration) *StandIn {
	if now == nil {
		epoch := time.Now()
		now = func() time.Duration { return time.Since(epoch) }
	}
	return &StandIn{now: now, rows: make(map[string]*standInRow)}
}

// Rows reports the keys with a row: not every shape full.
func (s *StandIn) Rows() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.rows)
}

func (s *StandIn) hook(ctx context.Context, keys int) error {
	if h := s.Hook.Load(); h != nil {
		if err := (*h)(ctx, keys); err != nil {
			return err
		}
	}
	return ctx.Err()
}

func validShapes(shapes []Bucket) error {
	if len(shapes) < 1 || len(shapes) > MaxShapes {
		return invalid("%d shapes", len(shapes))
	}
	for _, b := range shapes {
		if b.tolerance == 0 {
			return invalid("zero shape")
		}
	}
	return nil
}

func (s *StandIn) Take(ctx context.Context, key string, shapes []Bucket) (Grant, error) {
	var out [1]Grant
	err := s.TakeMany(ctx, []string{key}, shapes, out[:])
	return out[0], err
}

func (s *StandIn) TakeMany(ctx context.Context, keys []string, shapes []Bucket, out []Grant) error {
	if err := validShapes(shapes); err != nil {
		return err
	}
	for _, k := range keys {
		if err := ValidateKey(k); err != nil {
			return err
		}
	}
	if err := s.hook(ctx, len(keys)); err != nil {
		return err
	}
	s.RoundTrips.Add(1)
	s.Decisions.Add(int64(len(keys)))
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, k := range keys {
		now := s.now()
		row := s.rows[k]
		var tats, next [MaxShapes]time.Duration
		gen := uint64(now) // a new key's count differs from every earlier one
		for j := range shapes {
			tats[j] = now
		}
		if row != nil {
			tats, gen = row.tats, row.gen
		}
		n := len(shapes)
		wait, ok := TakeAll(shapes, tats[:n], next[:n], now)
		if !ok {
			out[i] = Grant{RetryAfter: wait}
			continue
		}
		if row == nil {
			row = &standInRow{gen: gen}
			s.rows[k] = row
		}
		row.tats = next
		left, reset := RemainingAll(shapes, next[:n], now)
		out[i] = Grant{OK: true, Remaining: left, Reset: reset, Receipt: Receipt{At: now, Gen: gen, Reserved: next}}
	}
	return nil
}

func (s *StandIn) Refund(ctx context.Context, key string, shapes []Bucket, r Receipt) error {
	if err := validShapes(shapes); err != nil {
		return err
	}
	if err := ValidateKey(key); err != nil {
		return err
	}
	if err := s.hook(ctx, 1); err != nil {
		return err
	}
	s.Refunds.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	row := s.rows[key]
	if row == nil || r == (Receipt{}) {
		return nil
	}
	now := s.now()
	n := len(shapes)
	var next [MaxShapes]time.Duration
	full, reordered := RefundAll(shapes, row.tats[:n], next[:n], r, now, row.gen == r.Gen)
	row.tats = next
	if reordered {
		row.gen++
	}
	if full {
		delete(s.rows, key)
	}
	return nil
}

// QueuedDecisions reports the decisions of p waiting for a round trip.
func QueuedDecisions(p *Shared) int {
	p.rt.mu.Lock()
	defer p.rt.mu.Unlock()
	return len(p.rt.queue)
}

// Close does nothing: a StandIn holds nothing to release.
func (s *StandIn) Close(context.Context) error { return nil }
