package pacer

import (
	"fmt"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/ratepace/pace/internal/fakeclock"
)

// busyPacer returns a Pacer that has observed n of its own calls, one every
// window/n, the last at c's time: the window (an hour) holds n of its
// calls and as many of the others'. report is what every response says.
func busyPacer(c *fakeclock.Clock, n int) (p *Pacer, report Signal) {
	const window = time.Hour
	p = MustNew(WithClock(c), WithSeed(1), WithWindow(window))
	report = Signal{Limit: int64(4 * n), Used: int64(2 * n), HasUsed: true}
	step := window / time.Duration(n)
	c.Advance(-window)
	for i := 0; i < n; i++ {
		c.Advance(step)
		p.Observe(report)
	}
	return p, report
}

// BenchmarkReserveObserve measures one decision and one observation with
// n of the Pacer's own calls in its window (the window keeps n: one call
// leaves it for every call made), and reports the heap the Pacer holds
// (heap-B).
func BenchmarkReserveObserve(b *testing.B) {
	for _, n := range []int{10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("own=%d/serial", n), func(b *testing.B) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			c := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
			p, report := busyPacer(c, n)
			runtime.GC()
			runtime.ReadMemStats(&after)
			step := time.Hour / time.Duration(n)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				c.Advance(step)
				p.Reserve()
				p.Observe(report)
			}
			b.StopTimer()
			if got := ownInWindow(p); got < n*99/100 || got > n*101/100 {
				b.Fatalf("%d own calls in the window; want %d", got, n)
			}
			b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)), "heap-B")
			runtime.KeepAlive(p)
		})
	}
}

// TestMemoryDoesNotGrowWithCallsInWindow pins a bug: the Pacer kept an entry
// per own call for a whole window (and one per call in flight for a quarter
// of it), so that with a one-day window its memory grew all day. It must not
// grow with the calls in the window, whether their responses are observed or
// not.
func TestMemoryDoesNotGrowWithCallsInWindow(t *testing.T) {
	const window = 24 * time.Hour
	for _, observe := range []bool{true, false} {
		c := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
		p := MustNew(WithClock(c), WithSeed(1), WithWindow(window))
		report := Signal{Limit: 1 << 30, Used: 1 << 20, HasUsed: true, Window: window}
		p.Observe(report)
		call := func() {
			// A caller that keeps to its slots, one second apart at least.
			c.Advance(time.Second + p.Reserve())
			if observe {
				p.Observe(report)
			}
		}
		for i := 0; i < 1000; i++ {
			call()
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		const calls = 2000 // all within the window
		for i := 0; i < calls; i++ {
			call()
		}
		runtime.ReadMemStats(&after)
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<10 {
			t.Fatalf("observe=%v: %d more calls in the window allocated %d bytes; want no growth", observe, calls, grew)
		}
		if observe {
			if got := ownInWindow(p); got < 3000 {
				t.Fatalf("%d own calls in the window; want 3000: the test measures nothing", got)
			}
		}
	}
}

// ownInWindow returns how many of p's own calls are in its window. (On
// the code before the ring, which kept a slice, this was len(p.own): the
// benchmark runs on both with that one line changed.)
func ownInWindow(p *Pacer) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return int(p.own.counted() + 0.5)
}

// TestPacerSize pins the size the Pacer's godoc states, about 17 KiB: its
// record of the window is a fixed ring, so that the size is the struct's.
func TestPacerSize(t *testing.T) {
	if n := unsafe.Sizeof(Pacer{}); n < 15<<10 || n > 18<<10 {
		t.Fatalf("a Pacer takes %d bytes; its godoc says about 17 KiB", n)
	}
}
