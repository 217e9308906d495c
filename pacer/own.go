package pacer

import "time"

const (
	// ownBuckets is the resolution of a Pacer's record of its own calls:
	// buckets of W/ownBuckets.
	ownBuckets = 256
	// ownRing is the number of buckets kept: the window straddles
	// ownBuckets+1 of them, and one more is the one being reused.
	ownRing = ownBuckets + 2
	// lostAfter: a call in flight for W/lostAfter will never be observed
	// (its response was lost, or its caller never reported it).
	lostAfter = 4
)

// own is a client's record of its own calls, on a ring of buckets W/256
// wide that covers the last window, so that its memory and the time of
// every operation are fixed whatever the number of calls:
//
//   - the calls the server counted, by the time of their response, for as
//     long as they stay in the server's window. A bucket keeps how many,
//     the first and the last exactly: two calls per bucket are exact, more
//     are taken as spread evenly between the first and the last. Buckets
//     keep a running total, so that "how many by t" is one lookup.
//   - the calls sent and not yet observed, by their slot, for at most
//     W/4, after which they are taken for lost.
//
// Every call has a weight, its cost in the limit's units: one for a limit
// of requests, the tokens the caller said for a limit of tokens. Counts
// are sums of weights; a bucket's weight is taken as spread evenly between
// its first and its last call.
//
// The zero value is empty; sync lays it out for a window. It is owned by
// one Pacer and used under its lock.
type own struct {
	ring   [ownRing]bucket
	window time.Duration // the window the ring is laid out for; zero before sync
	width  time.Duration // of a bucket
	origin time.Time     // start of bucket 0
	now    time.Time     // the latest sync
	since  time.Time     // counted calls answered before it no longer count (a fixed window turned over)
	newest int64         // the bucket holding now
	lost   int64         // buckets before this one hold no call in flight
	total  int64         // counted calls recorded since the layout (their weight)
	flying int64         // calls in flight (their weight)
	flyN   int64         // calls in flight (how many)
}

type bucket struct {
	before int64         // counted calls recorded in the buckets before this one
	n      int64         // counted calls in this bucket
	lo, hi time.Duration // the first and the last of them, from origin
	flying int64         // calls in flight whose slot is in this bucket (their weight)
	flyN   int64         // how many they are
}

// sync brings the ring to now, a time no earlier than the previous sync,
// laying it out again if the window changed.
func (o *own) sync(now time.Time, window time.Duration) {
	if window != o.window {
		o.layout(now, window)
		return
	}
	o.now = now
	o.dropLost()
	k := o.index(now)
	if k <= o.newest {
		return
	}
	if k-o.newest >= ownRing {
		// A window or more went by: everything recorded has left it.
		o.ring = [ownRing]bucket{}
		for i := range o.ring {
			o.ring[i].before = o.total
		}
		o.flying, o.flyN = 0, 0
	} else {
		// The buckets reused are older than the window, and than
		// lostAfter: dropLost has emptied them of calls in flight.
		for j := o.newest + 1; j <= k; j++ {
			*o.at(j) = bucket{before: o.total}
		}
	}
	o.newest = k
}

// dropLost forgets the calls in flight since before now − W/lostAfter.
func (o *own) dropLost() {
	cut := o.index(o.now.Add(-o.window / lostAfter))
	for j := max(o.lost, o.oldest()); j < cut && j <= o.newest; j++ {
		b := o.at(j)
		o.flying -= b.flying
		o.flyN -= b.flyN
		b.flying, b.flyN = 0, 0
	}
	o.lost = max(o.lost, cut)
}

// layout lays the ring out for window at now, carrying over what it
// holds: counted calls within the new window, and calls in flight that
// are not lost (each at the start of its old bucket).
func (o *own) layout(now time.Time, window time.Duration) {
	old := *o
	*o = own{window: window, width: max(window/ownBuckets, 1), origin: now, now: now, since: old.since}
	o.lost = o.index(now.Add(-window / lostAfter))
	if old.window == 0 {
		return
	}
	gone := now.Add(-window)
	put := func(t time.Time, n int64) {
		if n <= 0 || !t.After(gone) {
			return
		}
		b := o.at(o.clamp(o.index(t)))
		off := t.Sub(o.origin)
		if b.n == 0 || off < b.lo {
			b.lo = off
		}
		if b.n == 0 || off > b.hi {
			b.hi = off
		}
		b.n += n
	}
	for j := old.oldest(); j <= old.newest; j++ {
		b := old.at(j)
		lo, hi := old.origin.Add(b.lo), old.origin.Add(b.hi)
		put(lo, min(b.n, 1))
		put(lo.Add(hi.Sub(lo)/2), max(b.n-2, 0))
		put(hi, min(b.n-1, 1))
		if k := o.index(old.origin.Add(time.Duration(j) * old.width)); b.flyN > 0 && k >= o.lost {
			nb := o.at(o.clamp(k))
			nb.flying += b.flying
			nb.flyN += b.flyN
			o.flying += b.flying
			o.flyN += b.flyN
		}
	}
	for j := o.oldest(); j <= o.newest; j++ {
		b := o.at(j)
		b.before = o.total
		o.total += b.n
	}
}

// count records a call of weight w (at least zero) that the server
// counted, answered at the latest sync.
func (o *own) count(w int64) {
	if w <= 0 {
		return
	}
	b := o.at(o.newest)
	off := o.now.Sub(o.origin)
	if b.n == 0 {
		b.lo = off
	}
	b.hi = off
	b.n += w
	o.total += w
}

// counted returns how many counted calls are within the window at the
// latest sync.
func (o *own) counted() float64 {
	return float64(o.total) - o.upTo(o.cut())
}

// countedBy returns how many of the counted calls within the window at
// the latest sync were answered at or before t.
func (o *own) countedBy(t time.Time) float64 {
	return max(0, o.upTo(t)-o.upTo(o.cut()))
}

// cut is the time at or before which counted calls no longer count: a
// window before the latest sync, or the latest turnover of a fixed window.
func (o *own) cut() time.Time {
	c := o.now.Add(-o.window)
	if o.since.After(c) {
		c = o.since.Add(-1)
	}
	return c
}

// forgetBefore stops counting the calls answered before t: a fixed window
// turned over at t, and the server forgot them.
func (o *own) forgetBefore(t time.Time) {
	if t.After(o.since) {
		o.since = t
	}
}

// answeredNth returns when the n-th most recent counted call within the
// window (n ≥ 1) was answered, to the resolution of a bucket and never
// later than it was, and false when there are fewer than n.
func (o *own) answeredNth(n int64) (time.Time, bool) {
	cut := o.upTo(o.cut())
	if n < 1 || float64(o.total)-cut < float64(n) {
		return time.Time{}, false
	}
	// The newest bucket j whose calls and the later ones number n or more.
	lo, hi := max(o.oldest(), o.index(o.cut())), o.newest
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		if o.total-o.at(mid).before >= n {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return o.origin.Add(o.at(lo).lo), true
}

// flyingFrom returns how many calls in flight were sent at or after t,
// to the resolution of a bucket.
func (o *own) flyingFrom(t time.Time) int64 {
	if o.flyN == 0 {
		return 0
	}
	n := int64(0)
	for j := max(o.index(t), o.lost, o.oldest()); j <= o.newest; j++ {
		n += o.at(j).flying
	}
	return n
}

// upTo returns how many counted calls were answered at or before t.
func (o *own) upTo(t time.Time) float64 {
	k := o.index(t)
	if k > o.newest {
		return float64(o.total)
	}
	if k < o.oldest() {
		return float64(o.at(o.oldest()).before)
	}
	b := o.at(k)
	n := float64(b.before)
	switch off := t.Sub(o.origin); {
	case b.n == 0 || off < b.lo:
		return n
	case off >= b.hi:
		return n + float64(b.n)
	default: // the first is in, the last is not, those between pro rata
		return n + 1 + float64(b.n-2)*float64(off-b.lo)/float64(b.hi-b.lo)
	}
}

// fly records a call of weight w sent at slot, at or before the latest
// sync, and not yet observed.
func (o *own) fly(slot time.Time, w int64) {
	k := o.index(slot)
	if k < o.lost || k < o.oldest() {
		return
	}
	b := o.at(min(k, o.newest))
	b.flying += w
	b.flyN++
	o.flying += w
	o.flyN++
}

// land forgets the call in flight sent first, and returns the start of
// the bucket its slot was in (no later than it was sent) and its weight
// (the bucket's weight shared evenly among its calls), and false when
// there was none.
func (o *own) land() (time.Time, int64, bool) {
	if o.flyN == 0 {
		return time.Time{}, 0, false
	}
	for j := max(o.lost, o.oldest()); j <= o.newest; j++ {
		if b := o.at(j); b.flyN > 0 {
			w := b.flying / b.flyN
			b.flying -= w
			b.flyN--
			o.flying -= w
			o.flyN--
			return o.origin.Add(time.Duration(j) * o.width), w, true
		}
	}
	return time.Time{}, 0, false
}

// index returns the bucket holding t (0 before the first sync).
func (o *own) index(t time.Time) int64 {
	if o.width == 0 {
		return 0
	}
	d := t.Sub(o.origin)
	k := d / o.width
	if d%o.width < 0 {
		k--
	}
	return int64(k)
}

// at returns bucket j, which must be within the ring.
func (o *own) at(j int64) *bucket {
	i := j % ownRing
	if i < 0 {
		i += ownRing
	}
	return &o.ring[i]
}

func (o *own) oldest() int64 { return o.newest - ownRing + 1 }

func (o *own) clamp(k int64) int64 { return min(max(k, o.oldest()), o.newest) }
