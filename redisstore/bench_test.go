package redisstore

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// benchKeys is the number of distinct keys the benchmarks spread over.
const benchKeys = 10_000

// BenchmarkTokenBucket measures TokenBucket decisions against the test
// server over loopback, with 1 and 16 concurrent callers. The shape admits
// every call, so each one runs the script's full path (read, decide, write).
func BenchmarkTokenBucket(b *testing.B) {
	s, _ := newTestStore(b)
	benchDecisions(b, func(ctx context.Context, key string) (bool, error) {
		ok, _, err := s.TokenBucket(ctx, key, 1e6, 1e6, 1)
		return ok, err
	})
}

// BenchmarkAcquireSlotBurst measures AcquireSlotBurst decisions with 1 and
// 16 concurrent callers. sustained is far above the number of calls, so each
// one is admitted and rewrites the slot's state.
func BenchmarkAcquireSlotBurst(b *testing.B) {
	s, _ := newTestStore(b)
	benchDecisions(b, func(ctx context.Context, key string) (bool, error) {
		ok, _, err := s.AcquireSlotBurst(ctx, key, 1<<40, 1<<40, time.Minute, time.Minute)
		return ok, err
	})
}

// benchDecisions runs decide over benchKeys keys, serially and from 16
// goroutines, reports decisions per second, and fails unless every call was
// admitted without error (so the benchmark measured the path it names).
func benchDecisions(b *testing.B, decide func(ctx context.Context, key string) (bool, error)) {
	keys := make([]string, benchKeys)
	for i := range keys {
		keys[i] = "bench:" + strconv.Itoa(i)
	}
	if len(keys) != benchKeys {
		b.Fatalf("%d keys; want %d", len(keys), benchKeys)
	}
	ctx := context.Background()
	for _, callers := range []int{1, 16} {
		b.Run("callers="+strconv.Itoa(callers), func(b *testing.B) {
			b.ReportAllocs()
			var next, refused atomic.Int64
			var failure atomic.Pointer[error]
			run := func() {
				i := next.Add(1)
				ok, err := decide(ctx, keys[int(i)%len(keys)])
				if err != nil {
					failure.CompareAndSwap(nil, &err)
				} else if !ok {
					refused.Add(1)
				}
			}
			b.ResetTimer()
			if callers == 1 {
				for range b.N {
					run()
				}
			} else {
				b.SetParallelism((callers + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						run()
					}
				})
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
			if err := failure.Load(); err != nil {
				b.Fatal(*err)
			}
			if n := refused.Load(); n > 0 {
				b.Fatalf("%d of %d calls refused; the benchmark must measure admissions", n, b.N)
			}
		})
	}
}
