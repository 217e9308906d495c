package pace_test

import (
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratepace/pace/internal/benchkit"
)

const million = 1_000_000

// key returns the i-th key of 10 bytes, built fresh so the test holds none.
func key(i int) string {
	var b [10]byte
	b[0] = 'k'
	for j := 9; j > 0; j-- {
		b[j] = byte('0' + i%10)
		i /= 10
	}
	return string(b[:])
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

func TestMemoryReturnedLeavesNothing(t *testing.T) {
	p, _ := newPaceT(t, 20)
	before := benchkit.Heap()
	for i := range million {
		r := p.Reserve(key(i))
		if !r.OK() {
			t.Fatalf("new key %d refused", i)
		}
		r.Return()
	}
	if p.Len() != 0 {
		t.Fatalf("Len() = %d after a million reservations returned; want 0", p.Len())
	}
	after := benchkit.Heap()
	grown := int64(after) - int64(before)
	t.Logf("heap %.2f MiB before, %.2f MiB after a million returned reservations", mib(before), mib(after))
	if grown > 4<<20 {
		t.Fatalf("heap grew by %.2f MiB after a million returned reservations; want < 4 MiB", float64(grown)/(1<<20))
	}
	runtime.KeepAlive(p)
}

func TestMemoryKeptKeysComeBack(t *testing.T) {
	p, c := newPaceT(t, 20)
	before := benchkit.Heap()
	for i := range million {
		if !p.Allow(key(i)) {
			t.Fatalf("new key %d refused", i)
		}
	}
	if p.Len() != million {
		t.Fatalf("Len() = %d; want %d live rows", p.Len(), million)
	}
	peak := benchkit.Heap()
	perKey := float64(peak-before) / million
	t.Logf("a million live 10-byte keys: %.2f MiB, %.1f bytes per key", mib(peak-before), perKey)
	if perKey > 64 {
		t.Errorf("%.1f bytes per live key; want ≤ 64", perKey)
	}

	c.Advance(time.Second)  // one horizon at 20 per second
	for i := range 10_000 { // some activity on every shard (64 shards; 10,000 keys miss none)
		r := p.Reserve("activity-" + strconv.Itoa(i))
		r.Return()
	}
	if p.Len() > 1000 {
		t.Fatalf("Len() = %d one horizon after the flood; want small", p.Len())
	}
	after := benchkit.Heap()
	t.Logf("after one horizon: Len() = %d, heap %.2f MiB over the baseline (peak %.2f MiB)", p.Len(), mib(after-min(after, before)), mib(peak-before))
	if after > before && after-before > (peak-before)/10 {
		t.Fatalf("heap %.2f MiB over the baseline one horizon after the flood; want below 10%% of the peak %.2f MiB",
			mib(after-before), mib(peak-before))
	}
	runtime.KeepAlive(p)
}

func TestKeysDoNotPinCallerBuffers(t *testing.T) {
	p, _ := newPaceT(t, 20)
	before := benchkit.Heap()
	const big = 64 << 20
	for i := range 4 {
		s := strings.Repeat(strconv.Itoa(i), big) // a large request body, say
		if !p.Allow(s[100:110]) {                 // a short key cut from it
			t.Fatal("refused")
		}
	}
	after := benchkit.Heap()
	if after > before+big/2 {
		t.Fatalf("heap %.2f MiB over the baseline with four short keys cut from 64 MiB strings: the strings are pinned", mib(after-before))
	}
	if p.Len() != 4 {
		t.Fatalf("Len() = %d; want 4 rows", p.Len())
	}
	runtime.KeepAlive(p)
}
