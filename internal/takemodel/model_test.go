package takemodel

import (
	"github.com/ratepace/pace/driver"
	"testing"
	"time"
)

// TestFreeTakeForgetsFullState checks that a take on a full key that keeps
// nothing (a free take) leaves the key absent, its earlier state forgotten:
// a clock stepped back to before that state was full must not revive it, as
// no store keeps a full key's state once a take has replaced it.
func TestFreeTakeForgetsFullState(t *testing.T) {
	slow, err := driver.NewShape(10, 1, 1) // one take a second
	if err != nil {
		t.Fatal(err)
	}
	free, err := driver.NewShape(100, 1e6, 0) // tolerance 100 µs
	if err != nil {
		t.Fatal(err)
	}
	var m Model
	now := time.Duration(1e12)
	if g, err := m.Take("k", []driver.Shape{slow}, now, 1); err != nil || !g.OK {
		t.Fatalf("Take(slow) = %+v, %v; want OK", g, err)
	}
	now += 2 * time.Second // full again
	if g, err := m.Take("k", []driver.Shape{free}, now, 2); err != nil || !g.OK {
		t.Fatalf("Take(free) on a full key = %+v, %v; want OK", g, err)
	}
	now -= 1500 * time.Millisecond // half a second before the slow take's refill ended
	if st := m.Get("k", now); st != nil {
		t.Fatalf("after a free take on a full key and a clock stepped back, the key holds %+v; want absent", *st)
	}
	if g, err := m.Take("k", []driver.Shape{free}, now, 3); err != nil || !g.OK {
		t.Fatalf("Take(free) after the clock stepped back = %+v, %v; want OK, the key absent", g, err)
	}
}
