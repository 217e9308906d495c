package pacer

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestQueueMatchesModel drives the queue with random arrivals, leaves
// (from anywhere), departures of the head and re-plans, against a model
// of two slices: the waiters in arrival order, the slots in time order.
func TestQueueMatchesModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	var q queue
	var waiters []*waiter
	var slots []time.Time
	now := ownT0
	longest := 0
	for step := 0; step < 6000; step++ {
		arrive := 1 // in tens: the queue shrinks, then grows, in turn
		if step/1000%2 == 1 {
			arrive = 5
		}
		switch op := rng.IntN(10); {
		case op < arrive: // arrival, a gap after the last slot
			s := now
			if len(slots) > 0 {
				s = slots[len(slots)-1]
			}
			s = s.Add(time.Duration(rng.IntN(3)) * time.Millisecond)
			w := &waiter{}
			head := q.push(w, s)
			if head != (len(waiters) == 0) {
				t.Fatalf("step %d: push reported head %v with %d waiting", step, head, len(waiters))
			}
			waiters, slots = append(waiters, w), append(slots, s)
		case op < arrive+2 && len(waiters) > 0: // a caller gives up
			i := rng.IntN(len(waiters))
			next := q.leave(waiters[i])
			waiters = slices.Delete(waiters, i, i+1)
			slots = slots[:len(slots)-1]
			var want *waiter
			if i == 0 && len(waiters) > 0 {
				want = waiters[0]
			}
			if next != want {
				t.Fatalf("step %d: leave(%d) returned the wrong new head", step, i)
			}
		case op < arrive+3 && len(waiters) > 0: // the head goes
			s, next := q.pop()
			if !s.Equal(slots[0]) {
				t.Fatalf("step %d: pop() slot %v; want %v", step, s, slots[0])
			}
			waiters, slots = waiters[1:], slots[1:]
			if (next == nil) != (len(waiters) == 0) || (next != nil && next != waiters[0]) {
				t.Fatalf("step %d: pop() returned the wrong new head", step)
			}
		default: // a signal moves slots later
			from := now.Add(time.Duration(rng.IntN(20)) * time.Millisecond)
			gap := time.Duration(rng.IntN(4)) * time.Millisecond
			q.replan(from, gap)
			for i := range slots {
				lo := from
				if i > 0 && slots[i-1].Add(gap).After(lo) {
					lo = slots[i-1].Add(gap)
				}
				if slots[i].Before(lo) {
					slots[i] = lo
				}
			}
		}
		now = now.Add(time.Duration(rng.IntN(2)) * time.Millisecond)
		longest = max(longest, len(waiters))
		// The queue holds the model's waiters, in order, with its slots.
		if q.len() != len(slots) {
			t.Fatalf("step %d: len() = %d; want %d", step, q.len(), len(slots))
		}
		for i, w := 0, q.head; i < len(waiters); i, w = i+1, w.next {
			if w != waiters[i] || !q.slots.at(i).Equal(slots[i]) {
				t.Fatalf("step %d: place %d holds the wrong waiter or slot %v (want %v)", step, i, q.slots.at(i), slots[i])
			}
		}
		if len(waiters) > 0 && q.tail != waiters[len(waiters)-1] {
			t.Fatalf("step %d: wrong tail", step)
		}
		probe := now.Add(time.Duration(rng.IntN(40)) * time.Millisecond)
		want := 0
		for _, s := range slots {
			if !s.After(probe) {
				want++
			}
		}
		if got := q.countUntil(probe); got != want {
			t.Fatalf("step %d: countUntil = %d; want %d", step, got, want)
		}
	}
	if longest < 100 {
		t.Fatalf("the queue never held more than %d waiters: the test exercises little", longest)
	}
}
