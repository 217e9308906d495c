package pacer

import (
	"time"
)

// learner is what a Pacer learns about the server's window from responses
// that do not state it (no RateLimit-Policy "w"). Every algorithm met in
// the wild (sliding log, sliding-window counter, fixed window, token
// bucket) reports a reset and a Retry-After no longer than its window, so
// the longest seen is a lower bound on the window, and reaches it as soon
// as one response comes right after a window began (or a bucket emptied).
// A fixed window (and the counter's fixed halves) also shows it in the
// structure of its resets: the reset instant stays put for a whole window,
// then moves on by exactly the window when the count drops.
//
// It is owned by one Pacer and used under its lock.
type learner struct {
	longest time.Duration // the longest reset or Retry-After seen
	resets  bool          // whether any response carried a reset
	period  time.Duration // how far the reset instant moved when the window turned over

	instant time.Time // the latest reset instant (response time + Reset)
	fixed   bool      // the count dropped when a stable reset instant passed
	// boundary is, for a fixed window, the start of the server's current
	// window: this client's calls before it no longer count.
	boundary time.Time
	othersAt time.Time // the latest response whose count included other clients' calls
	// floor is what refusals taught: a window learned from resets alone
	// that gets the client refused is doubled, at most once a window, back
	// towards the default (the more conservative reading wins).
	floor    time.Duration
	bumpedAt time.Time
}

// instantSlack is how far two reset instants may differ and still name the
// same one: resets come rounded to the second (delta seconds, epoch
// seconds, HTTP dates), and the round trip moves them by a little more.
const instantSlack = 1100 * time.Millisecond

// learnWindow takes in the reset and Retry-After of s, observed at now,
// before the count is: it sets the window (unless a policy gave it) and,
// on a fixed window whose reset instant has passed, moves the boundary so
// that this client's calls of the previous window no longer count. It
// must be called with p.mu held.
func (p *Pacer) learnWindow(now time.Time, s Signal) {
	l := &p.lw
	if s.Reset > 0 {
		l.resets = true
		at := now.Add(s.Reset)
		if !l.instant.IsZero() && !now.Before(l.instant) && at.Sub(l.instant) > instantSlack {
			// The previous reset instant has passed and the new one is
			// further on. Seen soon after it passed, the move is a window
			// (a fixed window turned over there, or a counter expired a
			// window after the call that created it) and, if the count
			// dropped with it, the window is a fixed one.
			jump := at.Sub(l.instant)
			if now.Sub(l.instant) <= jump/4 && jump >= l.longest/2 {
				l.period = jump
				if p.droppedTo(s) {
					l.fixed, l.boundary = true, l.instant
					p.forgetBefore(l.instant)
				}
			}
		}
		l.instant = at
	}
	if d := max(s.Reset, s.RetryAfter); d > l.longest {
		l.longest = d
	}
	if p.winSet {
		return
	}
	w := p.cfg.window
	switch {
	case l.resets:
		// The default is a guess; a reset is the server's word.
		w = max(l.longest, l.period)
		if l.period == 0 {
			// Until the structure of the resets confirms it.
			w = max(w, l.floor)
		}
	case l.longest > w:
		// Retry-After alone (no reset ever): a lower bound, above the
		// default only when it says so.
		w = l.longest
	}
	p.setWindow(w)
}

// refused takes in a refusal at now: a window shorter than the default,
// read from resets that no turnover has confirmed (see period),
// may be a misreading (a token bucket whose reset names the next token,
// not the full bucket), so it doubles, at most once a window, up to the
// default. It must be called with p.mu held.
func (p *Pacer) refused(now time.Time) {
	l := &p.lw
	if p.winSet || l.period > 0 || p.window >= p.cfg.window || (!l.bumpedAt.IsZero() && now.Sub(l.bumpedAt) < p.window) {
		return
	}
	l.floor, l.bumpedAt = min(2*p.window, p.cfg.window), now
	p.setWindow(max(p.window, l.floor))
}

// setWindow changes the window to w, scaling the rates so that the
// client keeps the same share of the limit (every client sees the same
// resets and scales alike), and restarting the reconstruction of the
// others' calls, whose slots were cut for the old window. It must be
// called with p.mu held.
func (p *Pacer) setWindow(w time.Duration) {
	w = max(w, time.Millisecond)
	if w == p.window {
		return
	}
	k := p.window.Seconds() / w.Seconds()
	p.rate *= k
	p.others *= k
	p.window = w
	p.hist.valid = false
	if p.rate > 0 {
		p.clampRate()
	}
}

// droppedTo reports whether the count s reports is below half the
// previous one: the window was emptied, not slid.
func (p *Pacer) droppedTo(s Signal) bool {
	if !p.hasUsed || p.used < 2 {
		return false
	}
	switch {
	case s.HasUsed:
		return float64(s.Used) < p.used/2
	case s.HasRemaining && p.limit > 0:
		return p.limit-float64(s.Remaining) < p.used/2
	}
	return false
}

// turnedOver returns the count predicted at t when a fixed window turns
// over between the latest report and t: only the slots handed out since
// the turnover count. It must be called with p.mu held.
func (p *Pacer) turnedOver(t time.Time) (float64, bool) {
	l := &p.lw
	if !l.fixed || l.instant.IsZero() || t.Before(l.instant) || !p.obsAt.Before(l.instant) {
		return 0, false
	}
	u := p.queue.countUntil(t) - p.queue.countUntil(l.instant)
	u += until(&p.ahead, t) - until(&p.ahead, l.instant)
	return float64(u) + float64(p.own.flyingFrom(l.instant)), true
}

// untilTurnover returns how long until a fixed window turns over, when the
// window is known to be fixed and the turnover is at most a window away.
func (p *Pacer) untilTurnover(now time.Time) (time.Duration, bool) {
	l := &p.lw
	if !l.fixed || !l.instant.After(now) || l.instant.Sub(now) > p.window {
		return 0, false
	}
	return l.instant.Sub(now), true
}

// forgetBefore drops this client's counted calls made before t, when a
// fixed window turned over at t.
func (p *Pacer) forgetBefore(t time.Time) {
	p.own.forgetBefore(t)
	p.hist.valid = false
}

// othersSeen reports whether another client's calls were counted within
// the last two windows: the key is in use, and an idle-key burst would
// take what the others are about to spend.
func (p *Pacer) othersSeen(now time.Time) bool {
	return !p.lw.othersAt.IsZero() && now.Sub(p.lw.othersAt) < 2*p.window
}
