package bench

import (
	"os"
	"testing"
)

// BenchmarkLocal compares the in-process implementations (see Local) on
// every workload: one hot key, 10,000 keys in a fixed pseudo-random order,
// and a million keys (a flood of new keys on the admit path, spent keys on
// the refuse path); each serial and parallel (one goroutine per GOMAXPROCS).
func BenchmarkLocal(b *testing.B) {
	runAll(b, Local(), workloads(true), setup{})
}

// reversed reports whether PACE_BENCH_REVERSE asks for the implementations
// in reverse order.
func reversed() bool { return os.Getenv("PACE_BENCH_REVERSE") == "1" }
