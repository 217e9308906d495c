package pacer

import "time"

// departed is a client's record of the shared counts it observed, to tell
// when calls left the server's window: a count that rose by less than this
// client's own calls since an earlier one (or fell) lost calls, and calls
// counted at an earlier time were at most the count then. So when more
// calls left between t1 and t2 than the count held at t0 ≤ t1, one of the
// calls that left came after t0, and the window is shorter than t2 − t0.
// That holds for a sliding log (a call leaves exactly a window after it
// came), not for a fixed window (which empties at its turnover) nor a
// bucket (which drains from the start), hence the caller's checks.
//
// Counts are kept in slots of at least depWidth of the window, on a ring
// of depSlots, so that its memory and the time of a bound are fixed
// whatever the number of calls. It is owned by one Pacer and used under
// its lock.
type departed struct {
	ring   [depSlots]depSlot
	n      int // slots in use, the newest at ring[head]
	head   int
	origin time.Time // of the offsets below: the first count recorded
}

// depSlot holds the counts observed from start on (until the next slot):
// the lowest bound on the calls counted by the time a call was sent and
// that time (a t0), the highest value of the count less own calls seen at
// or after it (a t1 for that t0), and the highest seen at all (a t1 for
// older slots). Times are offsets from the origin, to keep it small.
type depSlot struct {
	start   time.Duration
	sent    time.Duration
	low     float64
	after   float64
	high    float64
	lowSent bool // whether low's call had a known send time
}

const (
	// depSlots is the number of slots kept: a window and a quarter of
	// depPerWindow.
	depSlots = 40
	// depPerWindow is how many slots a window holds.
	depPerWindow = 32
)

// add records a count observed at now, its call having been sent at sent
// (ok false when unknown): before, the most calls the count held that
// came by the time the call was sent, and v, the count less this
// client's own counted calls so far and its calls still in flight (which
// the count may already hold).
func (d *departed) add(now, sent time.Time, ok bool, before, v float64, window time.Duration) {
	if d.n == 0 {
		d.origin = now
	}
	at, from := now.Sub(d.origin), sent.Sub(d.origin)
	s := &d.ring[d.head]
	if d.n == 0 || at-s.start >= window/depPerWindow {
		d.head = (d.head + 1) % depSlots
		d.n = min(d.n+1, depSlots)
		d.ring[d.head] = depSlot{start: at, sent: from, low: before, lowSent: ok, after: v, high: v}
		return
	}
	if ok && (!s.lowSent || before < s.low) {
		s.sent, s.low, s.lowSent, s.after = from, before, true, v
	}
	s.after = max(s.after, v)
	s.high = max(s.high, v)
}

// bound returns the shortest upper bound on the window that a count at
// now, with v the count less own calls (as add takes it), gives against
// the counts recorded: the time since the latest t0 by which fewer calls
// had come than left between some t1 ≥ t0 and now. It returns false when
// no call is known to have left.
func (d *departed) bound(now time.Time, v float64) (time.Duration, bool) {
	left := 0.0 // the most calls that left since any later slot
	for i := 0; i < d.n; i++ {
		s := &d.ring[(d.head-i+depSlots)%depSlots]
		if s.lowSent && max(left, s.after-v) > s.low {
			return now.Sub(d.origin.Add(s.sent)), true
		}
		left = max(left, s.high-v)
	}
	return 0, false
}
