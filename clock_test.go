package pace_test

import (
	"testing"
	"time"
)

var sink time.Duration

// BenchmarkClock is the floor under every decision: one monotonic reading.
func BenchmarkClock(b *testing.B) {
	b.ReportAllocs()
	epoch := time.Now()
	b.Run("serial", func(b *testing.B) {
		for range b.N {
			sink = time.Since(epoch)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			var d time.Duration
			for pb.Next() {
				d = time.Since(epoch)
			}
			sink = d
		})
	})
}
