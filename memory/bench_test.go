package memory_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/internal/benchkit"
	"github.com/ratepace/pace/memory"
)

// The benchmarks measure one decision per operation on n keys, walked in
// turn (serial) or from a different place by each goroutine (parallel), on
// two paths chosen by the arguments and checked after the timer stops:
//
//   - admit: every decision admits. Token buckets refill at one token per
//     nanosecond, far faster than any key is asked; slots have limits no
//     count reaches.
//   - refuse: every decision refuses. Buckets refill at one token per
//     1000 s and slots are at their limit, all spent before the timer
//     starts.
//
// BenchmarkPaceReserve runs pace.Pace.Reserve on the same workload as
// BenchmarkTokenBucket (the same bucket shape: capacity = rate × 1s, cost
// 1), so one run compares the two.

const (
	admitRate  = 1e9  // tokens per second; capacity 1e9
	refuseRate = 1e-3 // capacity max(1, rate × 1s) = 1
)

var keyCounts = []int{1, 10_000}

// decide is one decision on key; it reports admission.
type decide func(b *testing.B, key string) bool

// forPaths runs benchkit.Run for each path and key count, with a decide
// that setup makes (before the timer) for the keys and the path.
func forPaths(b *testing.B, setup func(b *testing.B, keys []string, admit bool) decide) {
	for _, path := range []string{"admit", "refuse"} {
		for _, n := range keyCounts {
			b.Run(fmt.Sprintf("%s/keys=%d", path, n), func(b *testing.B) {
				keys := benchkit.Keys(b, n)
				admit := path == "admit"
				benchkit.Run(b, n, func(b *testing.B) benchkit.Decide {
					do := setup(b, keys, admit)
					return func(i int) bool { return do(b, keys[i]) }
				}, admit)
			})
		}
	}
}

// newStore returns a memory store with every key prepared by prep.
func newStore(b *testing.B, keys []string, prep func(s *memory.Store, key string) error) *memory.Store {
	s := memory.New()
	b.Cleanup(func() { _ = s.Close(context.Background()) })
	for _, k := range keys {
		if err := prep(s, k); err != nil {
			b.Fatal(err)
		}
	}
	return s
}

func BenchmarkTokenBucket(b *testing.B) {
	ctx := context.Background()
	forPaths(b, func(b *testing.B, keys []string, admit bool) decide {
		rate, capacity := admitRate, float64(admitRate)
		if !admit {
			rate, capacity = refuseRate, 1
		}
		s := newStore(b, keys, func(s *memory.Store, k string) error {
			_, _, err := s.TokenBucket(ctx, k, capacity, rate, 1) // spends the refuse path's only token
			return err
		})
		return func(b *testing.B, k string) bool {
			ok, _, err := s.TokenBucket(ctx, k, capacity, rate, 1)
			if err != nil {
				b.Fatal(err)
			}
			return ok
		}
	})
}

func BenchmarkPaceReserve(b *testing.B) {
	forPaths(b, func(b *testing.B, keys []string, admit bool) decide {
		rate := float64(admitRate)
		if !admit {
			rate = refuseRate
		}
		p, err := pace.New(rate)
		if err != nil {
			b.Fatal(err)
		}
		for _, k := range keys {
			p.Allow(k)
		}
		return func(b *testing.B, k string) bool {
			r := p.Reserve(k)
			return r.OK()
		}
	})
}

func BenchmarkAcquireSlot(b *testing.B) {
	ctx := context.Background()
	forPaths(b, func(b *testing.B, keys []string, admit bool) decide {
		limit := int64(math.MaxInt64) // never reached
		if !admit {
			limit = 1
		}
		s := newStore(b, keys, func(s *memory.Store, k string) error {
			_, _, err := s.AcquireSlot(ctx, k, limit, time.Hour) // fills the refuse path's only slot
			return err
		})
		return func(b *testing.B, k string) bool {
			ok, _, err := s.AcquireSlot(ctx, k, limit, time.Hour)
			if err != nil {
				b.Fatal(err)
			}
			return ok
		}
	})
}

func BenchmarkAcquireSlotBurst(b *testing.B) {
	ctx := context.Background()
	forPaths(b, func(b *testing.B, keys []string, admit bool) decide {
		sustained, ceiling := int64(math.MaxInt64/2), int64(math.MaxInt64/2) // never reached
		if !admit {
			sustained, ceiling = 1, 1
		}
		s := newStore(b, keys, func(s *memory.Store, k string) error {
			_, _, err := s.AcquireSlotBurst(ctx, k, sustained, ceiling, time.Minute, time.Hour)
			return err
		})
		return func(b *testing.B, k string) bool {
			ok, _, err := s.AcquireSlotBurst(ctx, k, sustained, ceiling, time.Minute, time.Hour)
			if err != nil {
				b.Fatal(err)
			}
			return ok
		}
	})
}
