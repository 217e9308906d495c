package bench

import (
	"fmt"
	"math/rand/v2"
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

// minOrder is the shortest Order: long enough that walking it is not
// walking a few keys over and over in one pattern.
const minOrder = 1 << 16

// Order returns the fixed pseudo-random order in which the benchmarks visit
// n keys: whole permutations of [0, n), one after another, at least minOrder
// long, the same in every run. Requests from many clients arrive in no
// particular order; walking keys in the order they were allocated would
// flatter the designs that allocate one object per key, whose objects then
// sit next to each other in memory.
func Order(n int) []int32 {
	perms := max(1, (minOrder+n-1)/n)
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
