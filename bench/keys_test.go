package bench

import (
	"slices"
	"testing"
)

func TestKeys(t *testing.T) {
	keys, err := Keys("ns:", 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1000 || keys[0] != "ns:k000000000" || keys[999] != "ns:k000000999" {
		t.Fatalf("Keys(ns:, 1000) = %d keys, first %q, last %q", len(keys), keys[0], keys[len(keys)-1])
	}
	if k := Key(123456789); len(k) != KeyLen {
		t.Errorf("Key(123456789) = %q: %d bytes, want %d", k, len(k), KeyLen)
	}
}

// TestOrder: whole permutations, the same in every run, not the order of
// allocation.
func TestOrder(t *testing.T) {
	for _, n := range []int{1, 3, 10_000, 100_000} {
		o := Order(n)
		if len(o) < 1<<16 || len(o)%n != 0 {
			t.Fatalf("Order(%d) has %d entries; want whole permutations, at least %d", n, len(o), 1<<16)
		}
		for start := 0; start < len(o); start += n {
			p := slices.Clone(o[start : start+n])
			slices.Sort(p)
			for i, v := range p {
				if int(v) != i {
					t.Fatalf("Order(%d)[%d:%d] is not a permutation of [0, %d)", n, start, start+n, n)
				}
			}
		}
		if !slices.Equal(o, Order(n)) {
			t.Errorf("Order(%d) differs between two calls", n)
		}
		if n >= 3 && slices.IsSorted(o[:n]) {
			t.Errorf("Order(%d) starts in the order of allocation", n)
		}
	}
}
