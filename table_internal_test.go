package pace

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratepace/pace/internal/fakeclock"
	"github.com/ratepace/pace/internal/table"
)

// keysInShard returns n distinct keys that hash to shard s of t.
func keysInShard(t *table.Table, s, n int, prefix string) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		k := prefix + strconv.Itoa(i)
		if t.ShardOf(t.Hash(k)) == s {
			out = append(out, k)
		}
	}
	return out
}

// TestRacesWithRebuildsAreExact decides on a few hot keys without a lock
// while other goroutines churn thousands of keys of the same shard, forcing
// inserts, drops by Return, sweeps and rebuilds (growth, shrinking,
// tombstones) under the decisions. With the clock frozen in each phase,
// every hot key must admit exactly its capacity (returned events given back),
// and the live count must match a recount of the table. A rebuild that lost
// a racing decision or refund fails it.
func TestRacesWithRebuildsAreExact(t *testing.T) {
	clk := fakeclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	const rate = 8
	p, err := New(rate, WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	const shard = 5
	hot := keysInShard(&p.t, shard, 4, "hot")
	churn := keysInShard(&p.t, shard, 4000, "churn")
	for phase := range 40 {
		var admitted [4]atomic.Int64
		var churners, deciders sync.WaitGroup
		stop := make(chan struct{})
		for g := range 4 {
			churners.Add(1)
			go func() {
				defer churners.Done()
				for i := g; ; i += 4 {
					select {
					case <-stop:
						return
					default:
					}
					k := churn[(i*7+phase*131)%len(churn)]
					if i%3 == 0 {
						p.Allow(k)
					} else {
						r := p.Reserve(k)
						r.Return()
					}
				}
			}()
		}
		for g := range 8 {
			deciders.Add(1)
			go func() {
				defer deciders.Done()
				for i := range 2000 {
					j := (i + g) % len(hot)
					r := p.Reserve(hot[j])
					if !r.OK() {
						continue
					}
					if i%2 == 0 {
						r.Return()
					} else {
						admitted[j].Add(1)
					}
				}
			}()
		}
		deciders.Wait()
		close(stop)
		churners.Wait()
		for j, k := range hot {
			for p.Allow(k) {
				admitted[j].Add(1)
			}
			if got := admitted[j].Load(); got != rate {
				t.Fatalf("phase %d, hot key %d: %d events admitted and kept; want exactly %d", phase, j, got, rate)
			}
		}
		clk.Advance(time.Second + time.Duration(phase%3)*time.Second/3)
	}
	if live, n := p.t.Recount(shard); live != n {
		t.Fatalf("live count %d; a recount of the table finds %d", live, n)
	}
}

// TestSaturatedClockIsNotAllowAll: a test clock whose first reading is the
// zero time.Time and whose later readings are today's saturates Time.Sub; the
// readings are clamped, so decisions stay decisions.
func TestSaturatedClockIsNotAllowAll(t *testing.T) {
	clk := fakeclock.New(time.Time{})
	p, err := New(20, WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	today := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	clk.Set(today)
	admitted := 0
	for range 1000 {
		if p.Allow("k") {
			admitted++
		}
	}
	if admitted != 20 || p.Len() != 1 {
		t.Fatalf("%d of 1000 admitted at one instant, Len() = %d; want 20 and 1", admitted, p.Len())
	}
}
