package instrument_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/instrument"
	"github.com/ratepace/pace/internal/benchkit"
	"github.com/ratepace/pace/memory"
)

// BenchmarkWrapTokenBucket measures what Wrap adds to a memory store's
// TokenBucket: the same workload on the bare store and on the wrapped one.
func BenchmarkWrapTokenBucket(b *testing.B) {
	keys := benchkit.Keys(b, 10000)
	for _, wrapped := range []bool{false, true} {
		name := "bare"
		if wrapped {
			name = "wrapped"
		}
		b.Run(name, func(b *testing.B) {
			benchkit.TokenBucket(b, keys, func(b *testing.B) pace.Store {
				var s pace.Store = memory.New()
				if wrapped {
					var err error
					if s, err = instrument.Wrap(s, prometheus.NewRegistry()); err != nil {
						b.Fatal(err)
					}
				}
				b.Cleanup(func() { s.Close(context.Background()) })
				return s
			})
		})
	}
}

// BenchmarkNewPaceReserve measures what the observer of NewPace adds to
// Pace.Reserve: the same workload on pace.New and on instrument.NewPace.
func BenchmarkNewPaceReserve(b *testing.B) {
	keys := benchkit.Keys(b, 10000)
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
		b.Run(name, func(b *testing.B) {
			benchkit.Run(b, len(keys), func(b *testing.B) benchkit.Decide {
				p := newPace(b)
				return func(i int) bool {
					r := p.Reserve(keys[i])
					return r.OK()
				}
			}, true)
		})
	}
}
