package bench

import (
	"fmt"

	"github.com/ratepace/pace/internal/benchkit"
)

// KeyLen is the length of every key the benchmarks and MeasureMemory use,
// namespace aside.
const KeyLen = 10

// Key returns the i-th key: "k" and i in nine decimal digits, KeyLen bytes
// in a string of its own.
func Key(i int) string { return fmt.Sprintf("k%09d", i) }

// Keys returns n distinct keys, Key(0) to Key(n-1), each preceded by ns, or
// an error if they are not n distinct keys of the expected length.
func Keys(ns string, n int) ([]string, error) {
	keys := make([]string, n)
	seen := make(map[string]struct{}, n)
	for i := range keys {
		keys[i] = ns + Key(i)
		seen[keys[i]] = struct{}{}
		if len(keys[i]) != len(ns)+KeyLen {
			return nil, fmt.Errorf("bench: key %d is not %d bytes after its namespace", i, KeyLen)
		}
	}
	if len(seen) != n {
		return nil, fmt.Errorf("bench: %d distinct keys, want %d", len(seen), n)
	}
	return keys, nil
}

// Order returns the order in which the random workloads walk n keys: whole
// permutations of [0, n), one after another, at least 1<<16 long, the same
// in every run (benchkit.Order, which the root benchmarks use too).
// Requests from many clients arrive in no particular order; walking keys in
// the order they were allocated would flatter the designs that allocate one
// object per key, whose objects then sit next to each other in memory.
func Order(n int) []int32 { return benchkit.Order(n) }
