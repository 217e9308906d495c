package instrument_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/instrument"
	"github.com/ratepace/pace/memory"
)

// benchKeys returns n distinct keys, checked to be distinct.
func benchKeys(b *testing.B, n int) []string {
	b.Helper()
	keys := make([]string, n)
	seen := make(map[string]bool, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("client-%d", i)
		seen[keys[i]] = true
	}
	if len(seen) != n {
		b.Fatalf("%d distinct keys; want %d", len(seen), n)
	}
	return keys
}

// BenchmarkWrapTokenBucket measures what Wrap adds to a memory store's
// TokenBucket: the same workload on the bare store and on the wrapped one.
func BenchmarkWrapTokenBucket(b *testing.B) {
	keys := benchKeys(b, 10000)
	for _, wrapped := range []bool{false, true} {
		name := "bare"
		if wrapped {
			name = "wrapped"
		}
		newStore := func(b *testing.B) pace.Store {
			var s pace.Store = memory.New()
			if wrapped {
				var err error
				if s, err = instrument.Wrap(s, prometheus.NewRegistry()); err != nil {
					b.Fatal(err)
				}
			}
			b.Cleanup(func() { s.Close(context.Background()) })
			return s
		}
		b.Run(name+"/serial", func(b *testing.B) {
			s := newStore(b)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if _, _, err := s.TokenBucket(ctx, keys[i%len(keys)], 1e9, 1e9, 1); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/parallel", func(b *testing.B) {
			s := newStore(b)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					if _, _, err := s.TokenBucket(ctx, keys[i%len(keys)], 1e9, 1e9, 1); err != nil {
						b.Error(err)
						return
					}
					i++
				}
			})
		})
	}
}

// BenchmarkNewPaceReserve measures what the observer of NewPace adds to
// Pace.Reserve: the same workload on pace.New and on instrument.NewPace.
func BenchmarkNewPaceReserve(b *testing.B) {
	keys := benchKeys(b, 10000)
	for _, instrumented := range []bool{false, true} {
		name := "bare"
		if instrumented {
			name = "instrumented"
		}
		newPace := func(b *testing.B) *pace.Pace {
			var p *pace.Pace
			var err error
			if instrumented {
				p, err = instrument.NewPace(1e6, prometheus.NewRegistry())
			} else {
				p, err = pace.New(1e6)
			}
			if err != nil {
				b.Fatal(err)
			}
			return p
		}
		b.Run(name+"/serial", func(b *testing.B) {
			p := newPace(b)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				p.Reserve(keys[i%len(keys)])
			}
		})
		b.Run(name+"/parallel", func(b *testing.B) {
			p := newPace(b)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					p.Reserve(keys[i%len(keys)])
					i++
				}
			})
		})
	}
}
