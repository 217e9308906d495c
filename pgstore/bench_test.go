package pgstore

import (
	"context"
	"crypto/sha256"
	"github.com/ratepace/pace/driver"
	"github.com/ratepace/pace/internal/benchkit"
	"github.com/ratepace/pace/internal/takemodel"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// benchKeys is the number of distinct keys the benchmarks spread their calls
// over, so that they measure decisions on many rows, not one hot row.
const benchKeys = 10000

// benchStore runs f as sub-benchmarks for three configurations (logged
// tables with the default asynchronous commit, unlogged tables, and logged
// tables with WithSynchronousCommit(true), one WAL flush per call) and for 1
// and 16 concurrent callers. Each call of f decides once on one key.
func benchStore(b *testing.B, f func(s *Store, ctx context.Context, key string) error) {
	pool := newPool(b, 32)
	keys := benchkit.Keys(b, benchKeys)
	ctx := context.Background()
	for _, tables := range []string{"logged", "unlogged", "synccommit"} {
		s, _ := newTestStore(b, pool, WithUnlogged(tables == "unlogged"), WithSynchronousCommit(tables == "synccommit"))
		// Warm every pooled connection (pgx prepares each statement once
		// per connection) outside the timer.
		done := make(chan error, 32)
		for i := range 32 {
			go func() { done <- f(s, ctx, keys[i]) }()
		}
		for range 32 {
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		}
		var next atomic.Uint64
		b.Run(tables+"/callers=1", func(b *testing.B) {
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := f(s, ctx, keys[next.Add(1)%benchKeys]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
		b.Run(tables+"/callers=16", func(b *testing.B) {
			// RunParallel starts parallelism × GOMAXPROCS goroutines.
			procs := runtime.GOMAXPROCS(0)
			b.SetParallelism((16 + procs - 1) / procs)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := f(s, ctx, keys[next.Add(1)%benchKeys]); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
	}
}

// BenchmarkTokenBucket measures TokenBucket decisions (capacity 100, 100 per
// second) over 10000 keys.
func BenchmarkTokenBucket(b *testing.B) {
	benchStore(b, func(s *Store, ctx context.Context, key string) error {
		_, _, err := s.TokenBucket(ctx, key, 100, 100, 1)
		return err
	})
}

// BenchmarkAcquireSlotBurst measures AcquireSlotBurst decisions (sustained
// 100, ceiling 200, one minute of budget and TTL) over 10000 keys.
func BenchmarkAcquireSlotBurst(b *testing.B) {
	benchStore(b, func(s *Store, ctx context.Context, key string) error {
		_, _, err := s.AcquireSlotBurst(ctx, key, 100, 200, time.Minute, time.Minute)
		return err
	})
}

// BenchmarkRoundTrip is the baseline: an empty statement (SELECT 1) through
// the same pool, the floor under every decision above.
func BenchmarkRoundTrip(b *testing.B) {
	pool := newPool(b, 32)
	ctx := context.Background()
	roundTrip := func() error {
		var one int
		return pool.QueryRow(ctx, "SELECT 1").Scan(&one)
	}
	b.Run("callers=1", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if err := roundTrip(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
	})
	b.Run("callers=16", func(b *testing.B) {
		procs := runtime.GOMAXPROCS(0)
		b.SetParallelism((16 + procs - 1) / procs)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := roundTrip(); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
	})
}

// BenchmarkTake measures Take of one shape (capacity 100, 100 per second,
// as BenchmarkTokenBucket) over 10000 keys: compare the two in one run.
func BenchmarkTake(b *testing.B) {
	shapes := []driver.Shape{takemodel.MustBucket(b, 100, 100, 1)}
	benchStore(b, func(s *Store, ctx context.Context, key string) error {
		_, err := s.Take(ctx, key, shapes)
		return err
	})
}

// BenchmarkTakeMany64 measures TakeMany of 64 keys in one call; ns/op is
// per call, decisions/s counts keys.
func BenchmarkTakeMany64(b *testing.B) {
	shapes := []driver.Shape{takemodel.MustBucket(b, 100, 100, 1)}
	keys := benchkit.Keys(b, benchKeys)
	batch := make([]string, 64)
	out := make([]driver.Grant, 64)
	var next atomic.Uint64
	s, _ := newTestStore(b, newPool(b, 4))
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		for j := range batch {
			batch[j] = keys[next.Add(1)%benchKeys]
		}
		if err := s.TakeMany(ctx, batch, shapes, out); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(64*b.N)/b.Elapsed().Seconds(), "decisions/s")
}

// BenchmarkRowKey measures the row key of a 24-byte client id, plain
// SHA-256 and with WithHashedKeys: the CPU that option adds to every call.
func BenchmarkRowKey(b *testing.B) {
	const id = "client-1234567@10.1.2.3"
	pool := newPool(b, 1)
	hashed, err := New(context.Background(), pool, WithSchema(testSchema(b, pool)), WithHashedKeys([]byte(testSecret)))
	if err != nil {
		b.Fatal(err)
	}
	for _, s := range []struct {
		name string
		s    *Store
	}{{"sha256", &Store{}}, {"hmac", hashed}} {
		b.Run(s.name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if len(s.s.rowKey(id)) != sha256.Size {
					b.Fatal("short key")
				}
			}
		})
	}
}
