package pace_test

import (
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/driver"
)

// TestForgetIsNotLostToConcurrentTakes pins a bug: Forget read the slot once
// and tried one compare-and-swap, so a take that moved the slot in between
// made it give up and leave the bucket drained.
//
// Every key first spends 1000 tokens of a large bucket. Then one goroutine
// forgets the keys one after another while another keeps taking one token
// from the key being forgotten. Whatever the order, the takes after a Forget
// draw from a full bucket, so at most the n admitted takes are missing from
// the capacity and a take of capacity − n − 1 fits (one token of margin for
// the rounding of the shape); a lost Forget leaves 1000 fewer.
func TestForgetIsNotLostToConcurrentTakes(t *testing.T) {
	const capacity, spent = 1 << 20, 1000
	shape := func(cost float64) driver.Shape {
		b, err := driver.NewShape(capacity, 1, cost) // the fake clock never moves: no refill
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	one, pre := shape(1), shape(spent)
	tb := pace.NewBuckets(newClock().Now)
	n := 20000
	if testing.Short() {
		n = 2000
	}
	keys := make([]string, n)
	admitted := make([]atomic.Int64, n)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
		if ok, _ := tb.Take(keys[i], pre); !ok {
			t.Fatalf("the first take of %d of %d was refused", spent, capacity)
		}
	}
	var cur atomic.Int64 // the key being forgotten; n when done
	race(2, func(g int) {
		if g == 0 {
			for i := cur.Load(); i < int64(n); i = cur.Load() {
				if ok, _ := tb.Take(keys[i], one); ok {
					admitted[i].Add(1)
				}
			}
			return
		}
		for i := range keys {
			cur.Store(int64(i))
			spin(i % 32) // let a few takes land first, a different number each time
			tb.Forget(keys[i])
		}
		cur.Store(int64(n))
	})
	lost := 0
	for i, k := range keys {
		if ok, _ := tb.Take(k, shape(float64(capacity-admitted[i].Load()-1))); !ok {
			lost++
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d Forgets racing takes were lost: the bucket stayed drained", lost, n)
	}
}

// race runs f(0), ..., f(n-1) on n goroutines that wait for one another by
// spinning, not by blocking, so that they start together on as many cores
// as there are, and returns when all have returned.
func race(n int, f func(g int)) {
	var ready atomic.Int64
	var wg sync.WaitGroup
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ready.Add(1)
			for ready.Load() < int64(n) {
				runtime.Gosched()
			}
			f(g)
		}()
	}
	wg.Wait()
}

// spin busy-waits for about n short steps.
func spin(n int) {
	x := 0
	for i := range n * 8 {
		x += i
	}
	spun.Store(int64(x))
}

var spun atomic.Int64
