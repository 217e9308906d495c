package pacer

import (
	"math"
	"time"
)

// probe is a burst a client sends, on a server that reports a count and
// never a reset, to read the window from the moment the burst leaves the
// count. A client held at a full count while the first calls left sees
// them go only long after, and reads a bound on the window that long (47 s
// on a 20 s log); from then on the others keep the count flat, and a flat
// count reads the same over any window: the client paces at the share it
// believes in, a share of calls spread over the longer window, while
// holding a fraction of it. A sliding log drops the burst's calls a window
// after they came, within the time the burst took; the others' calls come
// and go at a steady pace, so that a drop of more than half the burst
// between two counts close together, across a round window since the
// burst, says that round window is the window. It is owned by one Pacer
// and used under its lock.
type probe struct {
	from, to time.Time     // when the first and the latest call of the burst went
	sent     int           // calls of the burst handed out so far (zero: none started)
	calls    int           // the burst's size, set when it starts
	done     bool          // the burst's outcome is known, or it will never go
	bound    time.Duration // the bound on the window when the burst went
	// next is the index in roundWindows of the next window the burst
	// may leave at; anchorAt and anchorV are the latest count before
	// that window had passed since the burst began, and the count less
	// this client's own calls then (see departures).
	next     int
	anchorAt time.Time
	anchorV  float64
	hit      bool // the latest count read the window from the burst leaving
}

const (
	// probeCalls is the least burst a probe sends: a drop of half of it
	// between two counts stands out from the others' steady flow.
	probeCalls = 8
	// probeShare is the burst's size as a share of the limit, when more.
	probeShare = 1.0 / 16
)

// probeArmed reports whether this client may send a burst to read the
// window: no response ever carried a reset nor a policy, the count and
// the limit are known, others' calls are in the count, and the window is
// bounded by calls leaving the count at a time below the default that is
// no round window (within a tenth): the client saw the first calls leave
// only long after they did. Only when the burst fits below the target
// with the count predicted now. Once the burst has started, until it is
// all handed out. It must be called with p.mu held.
func (p *Pacer) probeArmed(now time.Time) bool {
	l := &p.lw
	if p.pr.done || p.winSet || l.resetSent || l.bucket || l.fixed || p.limit <= 0 || !p.hasUsed {
		return false
	}
	if p.pr.sent > 0 {
		return p.pr.sent < p.pr.calls
	}
	if l.bound == 0 || l.bound >= p.cfg.window || isRound(l.bound) || !p.othersSeen(now) {
		return false
	}
	u, ok := p.predictedUsed(now)
	k := probeSize(p.limit)
	return ok && u+float64(k) <= p.cfg.target*p.limit
}

// probeSize is the number of calls of a burst on a limit of limit.
func probeSize(limit float64) int {
	return max(probeCalls, int(math.Ceil(probeShare*limit)))
}

// probeCalls is the size of the burst: set when it starts, else what the
// limit gives.
func (p *Pacer) probeCalls() int {
	if p.pr.sent > 0 {
		return p.pr.calls
	}
	return probeSize(p.limit)
}

// isRound reports whether d is within a tenth of one of roundWindows.
func isRound(d time.Duration) bool {
	for _, r := range roundWindows {
		if d >= r-r/10 && d <= r+r/10 {
			return true
		}
	}
	return false
}

// probeBook records a slot handed out for the burst; the last one moves
// the next paced call on by the burst's calls, less one.
func (p *Pacer) probeBook(slot time.Time) {
	if p.pr.sent == 0 {
		p.pr.calls = probeSize(p.limit)
		p.pr.from = slot
		p.pr.bound = p.lw.bound
	}
	p.pr.sent++
	p.pr.to = slot
	if p.pr.sent == p.pr.calls && p.rate > 0 {
		// The burst's calls are the next ones the rate would have
		// sent: the client's share of the count stays what it was.
		p.last = slot.Add(time.Duration(float64(p.pr.calls-1) / p.rate * float64(time.Second)))
	}
}

// probeRead takes in a count at now, v being the count less this
// client's own calls (as departures computes it). Once the burst has gone,
// for each round window below the window believed, in turn: a drop of v by
// more than half the burst from the latest count before that window had
// passed since the burst began (at least minReading after the burst) to
// the first count after it had passed since the burst ended, the two at
// most a quarter of that window apart (and the time the burst took), is
// the burst leaving the count: it returns that round window and true. A
// burst not seen to leave within the window believed gives up. It must be
// called with p.mu held.
func (p *Pacer) probeRead(now time.Time, v float64) (time.Duration, bool) {
	pr := &p.pr
	if pr.done || pr.sent == 0 || pr.sent < pr.calls {
		return 0, false
	}
	if pr.bound != p.lw.bound || now.Sub(pr.from) > p.window {
		// Another reading bounded the window meanwhile, or the burst
		// did not leave within the window believed.
		pr.done = true
		return 0, false
	}
	for ; pr.next < len(roundWindows) && roundWindows[pr.next] < p.window; pr.next++ {
		r := roundWindows[pr.next]
		if now.Before(pr.from.Add(r)) {
			// Before the burst can have left at r: the latest count
			// before it.
			pr.anchorAt, pr.anchorV = now, v
			return 0, false
		}
		if now.Before(pr.to.Add(r)) {
			return 0, false // while it leaves, if r is the window
		}
		ok := !pr.anchorAt.IsZero() && pr.anchorAt.Sub(pr.to) >= minReading &&
			now.Sub(pr.anchorAt) <= r/4+pr.to.Sub(pr.from) && pr.anchorV-v > float64(pr.calls)/2
		if ok {
			pr.done = true
			return r, true
		}
	}
	return 0, false
}
