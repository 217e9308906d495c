package pacer

import (
	"math"
	"time"
)

// history reconstructs, from the shared counts a client observes, when
// the other clients' calls arrived within the last window: a histogram of
// slots of W/slots each. Knowing when those calls arrived tells when they
// will leave the server's window, and how fast the others are calling now,
// without the lag of the count itself (which averages a whole window).
//
// It is owned by one Pacer and used under its lock.
type history struct {
	bins  [slots]float64 // bins[(head-i) mod slots] covers slot i back from end
	head  int
	end   time.Time // end of the newest slot
	width time.Duration
	valid bool
}

const slots = 60

// reset forgets everything and spreads count evenly over the window
// ending at now: the best guess when nothing is known.
func (h *history) reset(now time.Time, window time.Duration, count float64) {
	h.width = max(window/slots, 1)
	h.end = now
	h.head = 0
	for i := range h.bins {
		h.bins[i] = count / slots
	}
	h.valid = true
}

// advance moves the histogram to now, dropping the slots that left the
// window, and returns how many calls they held (the predicted expiries).
func (h *history) advance(now time.Time) float64 {
	expired := 0.0
	steps := 0
	for now.After(h.end) && steps <= slots {
		h.head = (h.head + 1) % slots
		expired += h.bins[h.head]
		h.bins[h.head] = 0
		h.end = h.end.Add(h.width)
		steps++
	}
	if now.After(h.end) { // more than a window passed: nothing is left
		for i := range h.bins {
			h.bins[i] = 0
		}
		h.end = now
	}
	return expired
}

func (h *history) total() float64 {
	s := 0.0
	for _, b := range h.bins {
		s += b
	}
	return s
}

// record reconciles the histogram with an observed count at now, the
// previous observation having been at since. Calls the histogram did not
// account for arrived since then, spread evenly over (since, now]; a count
// below the histogram means it overestimated, and every slot is scaled
// down. It returns the number of new calls attributed to (since, now], negative
// when the histogram held more than the count.
func (h *history) record(now, since time.Time, count float64) float64 {
	h.advance(now)
	pred := h.total()
	fresh := count - pred
	if fresh <= 0 {
		if pred > 0 {
			k := count / pred
			for i := range h.bins {
				h.bins[i] *= k
			}
		}
		// Negative: the expiries were overestimated, or the arrivals
		// few. Report it signed, so that an average of these stays
		// unbiased.
		return fresh
	}
	n := int(math.Ceil(float64(now.Sub(since)) / float64(h.width)))
	n = min(max(n, 1), slots)
	for i := 0; i < n; i++ {
		h.bins[(h.head-i+slots)%slots] += fresh / float64(n)
	}
	return fresh
}

// expiring returns how many recorded calls leave the window by t (after
// now): the slots ending at or before t − W.
func (h *history) expiring(t time.Time, window time.Duration) float64 {
	if !h.valid {
		return 0
	}
	s := 0.0
	// slot i back from the newest ends at end − i×width and leaves the
	// window at that time + W.
	for i := slots - 1; i >= 0; i-- {
		leaves := h.end.Add(-time.Duration(i) * h.width).Add(window)
		if leaves.After(t) {
			break
		}
		s += h.bins[(h.head-i+slots)%slots]
	}
	return s
}
