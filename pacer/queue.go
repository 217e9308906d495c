package pacer

import (
	"math"
	"sort"
	"time"
)

// forever is the longest Duration, longer than any gap.
const forever = time.Duration(math.MaxInt64)

// queue holds the callers blocked in Wait, in arrival order, and the slots
// they hold, in time order: the i-th waiter holds the i-th slot. Slots
// belong to positions, not to callers, so a caller that leaves gives back
// the last slot and everyone behind it moves up one place, as if it had
// never waited; and only the head needs a timer, so that a leave or a
// re-plan wakes at most one goroutine however long the queue.
//
// It is owned by one Pacer and used under its lock.
type queue struct {
	head, tail *waiter
	slots      deque[time.Time]
	// spacing is at most the shortest interval between two consecutive
	// slots (leaving only lengthens intervals, so it stays a lower bound):
	// a re-plan whose gap is no longer than spacing moves nothing behind
	// the head.
	spacing time.Duration
}

// waiter is one caller blocked in Wait.
type waiter struct {
	prev, next *waiter
	// turn receives when the waiter becomes the head of the queue: from
	// then on it sleeps on the clock until the first slot.
	turn chan struct{}
}

func (q *queue) len() int { return q.slots.len() }

// first is the head's slot; the queue must not be empty.
func (q *queue) first() time.Time { return q.slots.at(0) }

// last is the latest slot held; the queue must not be empty.
func (q *queue) last() time.Time { return q.slots.at(q.slots.len() - 1) }

// push appends w holding slot, which must not be before the last slot,
// and reports whether w is the head.
func (q *queue) push(w *waiter, slot time.Time) bool {
	if q.tail == nil {
		q.head, q.tail = w, w
		q.spacing = forever
		q.slots.push(slot)
		return true
	}
	q.spacing = min(q.spacing, slot.Sub(q.last()))
	w.prev, q.tail.next, q.tail = q.tail, w, w
	q.slots.push(slot)
	return false
}

// leave removes w, which gives back the last slot, and returns the new
// head if w was the head (nil otherwise, or if the queue is now empty).
func (q *queue) leave(w *waiter) *waiter {
	wasHead := q.head == w
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		q.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		q.tail = w.prev
	}
	w.prev, w.next = nil, nil
	q.slots.popBack()
	if wasHead {
		return q.head
	}
	return nil
}

// pop removes the head, which takes the first slot, and returns that slot
// and the new head (nil if the queue is now empty).
func (q *queue) pop() (time.Time, *waiter) {
	w := q.head
	q.head = w.next
	if q.head != nil {
		q.head.prev = nil
	} else {
		q.tail = nil
	}
	w.next = nil
	return q.slots.popFront(), q.head
}

// countUntil returns how many slots are at or before t.
func (q *queue) countUntil(t time.Time) int { return until(&q.slots, t) }

// until returns how many of the times in d, which are in order, are at or
// before t.
func until(d *deque[time.Time], t time.Time) int {
	return sort.Search(d.len(), func(i int) bool { return d.at(i).After(t) })
}

// replan moves every slot that the latest signal puts too early later,
// never earlier: none before from, and each at least gap after the one
// before it. It reports whether any slot moved.
func (q *queue) replan(from time.Time, gap time.Duration) bool {
	n := q.slots.len()
	if n == 0 || (!q.first().Before(from) && gap <= q.spacing) {
		return false
	}
	moved := false
	prev := time.Time{}
	q.spacing = forever
	for i := 0; i < n; i++ {
		s := q.slots.at(i)
		lo := from
		if i > 0 {
			if t := prev.Add(gap); t.After(lo) {
				lo = t
			}
		}
		if s.Before(lo) {
			s, moved = lo, true
			q.slots.set(i, s)
		}
		if i > 0 {
			q.spacing = min(q.spacing, s.Sub(prev))
		}
		prev = s
	}
	return moved
}

// deque is a double-ended queue on a slice that reuses its array, so that
// steady pushing and popping allocates nothing.
type deque[T any] struct {
	s   []T
	off int // s[off:] is live
}

func (d *deque[T]) len() int       { return len(d.s) - d.off }
func (d *deque[T]) at(i int) T     { return d.s[d.off+i] }
func (d *deque[T]) set(i int, v T) { d.s[d.off+i] = v }

func (d *deque[T]) push(v T) {
	if d.off > 0 && len(d.s) == cap(d.s) {
		// Slide the live part down rather than grow the array: the
		// popped front is dead space.
		n := copy(d.s, d.s[d.off:])
		clear(d.s[n:])
		d.s, d.off = d.s[:n], 0
	}
	d.s = append(d.s, v)
}

func (d *deque[T]) popFront() T {
	var zero T
	v := d.s[d.off]
	d.s[d.off] = zero
	d.off++
	if d.off == len(d.s) {
		d.s, d.off = d.s[:0], 0
	}
	return v
}

func (d *deque[T]) popBack() T {
	var zero T
	n := len(d.s) - 1
	v := d.s[n]
	d.s[n] = zero
	d.s = d.s[:n]
	if d.off == len(d.s) {
		d.s, d.off = d.s[:0], 0
	}
	return v
}
