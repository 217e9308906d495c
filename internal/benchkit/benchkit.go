// Package benchkit is the harness the benchmarks and memory tests of pace's
// packages share: distinct keys, serial and parallel runs of one decision
// per operation, the check, after the timer stops, that every decision took
// the path the benchmark's name says, and the live heap.
package benchkit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/ratepace/pace"
)

// Keys returns n distinct keys of 10 bytes, failing tb if they are not
// distinct.
func Keys(tb testing.TB, n int) []string {
	tb.Helper()
	keys := make([]string, n)
	seen := make(map[string]bool, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%09d", i)
		seen[keys[i]] = true
	}
	if len(seen) != n {
		tb.Fatalf("benchkit.Keys(%d): %d distinct keys", n, len(seen))
	}
	return keys
}

// Order returns the fixed pseudo-random order in which a benchmark visits n
// keys: whole permutations of [0, n), one after another, at least 1<<16
// long, the same in every run. Requests from many clients arrive in no
// particular order; a walk in table order keeps the next key's line in
// cache.
func Order(n int) []int32 {
	perms := max(1, (1<<16+n-1)/n)
	order := make([]int32, 0, perms*n)
	rng := rand.New(rand.NewPCG(0x9ace, uint64(n)))
	for range perms {
		start := len(order)
		for i := range n {
			order = append(order, int32(i))
		}
		p := order[start:]
		rng.Shuffle(len(p), func(i, j int) { p[i], p[j] = p[j], p[i] })
	}
	return order
}

// Heap returns the live heap in bytes (runtime.MemStats.HeapAlloc) after
// two full collections, the second one freeing what the first one's
// finalizers released.
func Heap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// Decide makes decision i and reports whether it admitted. It is called
// from several goroutines at once in the parallel run.
type Decide func(i int) bool

// Run measures b.N decisions made by the Decide that setup returns (called
// before the timer starts), in two sub-benchmarks: "serial", one goroutine,
// and "parallel", b.RunParallel.
//
// With cycle > 0, i walks 0 … cycle-1 over and over: in turn from 0 in the
// serial run, from a different place in each goroutine of the parallel run.
// With cycle == 0, every decision has an i of its own in [0, b.N), as for a
// flood of keys never seen before.
//
// After the timer stops, Run fails the benchmark unless every decision
// admitted (wantAdmit) or none did: the benchmark would measure the wrong
// path.
func Run(b *testing.B, cycle int, setup func(b *testing.B) Decide, wantAdmit bool) {
	check := func(b *testing.B, admitted int64) {
		want := int64(0)
		if wantAdmit {
			want = int64(b.N)
		}
		if admitted != want {
			b.Fatalf("admitted %d of %d decisions; want %d: the benchmark measures the wrong path", admitted, b.N, want)
		}
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		do := setup(b)
		admitted := int64(0)
		b.ResetTimer()
		for i, j := 0, 0; i < b.N; i++ {
			if do(j) {
				admitted++
			}
			if j++; j == cycle {
				j = 0
			}
		}
		b.StopTimer()
		check(b, admitted)
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		do := setup(b)
		var admitted, start, next atomic.Int64
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			j := 0
			if cycle > 0 {
				j = int(start.Add(7919)) % cycle // each goroutine walks from its own place
			}
			local := int64(0)
			for pb.Next() {
				i := j
				if cycle == 0 {
					i = int(next.Add(1) - 1)
				} else if j++; j == cycle {
					j = 0
				}
				if do(i) {
					local++
				}
			}
			admitted.Add(local)
		})
		b.StopTimer()
		check(b, admitted.Load())
	})
}

// TokenBucket runs Run over keys, each decision a TokenBucket call of
// capacity 1e9 and rate 1e9 per second, cost 1, on the store newStore
// returns for each sub-benchmark: every decision admits. It measures what a
// wrapper adds to a store, by running once on the bare store and once on
// the wrapped one.
func TokenBucket(b *testing.B, keys []string, newStore func(b *testing.B) pace.Store) {
	Run(b, len(keys), func(b *testing.B) Decide {
		s := newStore(b)
		ctx := context.Background()
		return func(i int) bool {
			ok, _, err := s.TokenBucket(ctx, keys[i], 1e9, 1e9, 1)
			if err != nil {
				b.Error(err)
			}
			return ok
		}
	}, true)
}
