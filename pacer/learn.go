package pacer

import (
	"math"
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
	// resetSent reports whether any response carried a reset field, even
	// one already passed.
	resetSent bool
	// ownPace reports whether the latest bound came from calls leaving
	// the count (see departures).
	ownPace bool
	period  time.Duration // how far the reset instant moved when the window turned over
	// slides counts the turnovers in a row without the count dropping,
	// each a period after the one before, with the instant named by
	// several responses in between (see counter).
	slides int
	turnAt time.Time // the latest turnover seen
	held   int       // responses that named the latest reset instant

	instant time.Time // the latest reset instant (response time + Reset)
	// reading is the reset that named instant; clocked reports whether
	// the latest reset, of a second at most, read the same as the one
	// before, its instant moving with the clock.
	reading time.Duration
	clocked bool
	// The reset instant stays put while the count rises, as a fixed
	// window's does: anchor is the instant as first named (later ones
	// within instantSlack are the same), at namedAt; far reports whether
	// a response named it at least minReading ahead, and stayed whether
	// the latest response named it again with a count no lower.
	anchor    time.Time
	namedAt   time.Time
	namedUsed float64 // the count reported when anchor was first named
	heldOver  bool    // the latest refusal held this client until the instant (see fullUntilHeld)
	far       bool
	stayed    bool
	fixed     bool // the count dropped when a stable reset instant passed
	// confirmed reports whether, since the window was recognised as
	// fixed, a turnover moved the instant on by a whole number of
	// periods, or an instant stayed put a quarter period while the count
	// rose: a sliding log emptied at once by a burst looks fixed once.
	confirmed bool
	// boundary is, for a fixed window, the start of the server's current
	// window: this client's calls before it no longer count.
	boundary time.Time
	othersAt time.Time // the latest response whose count included other clients' calls
	limitAt  time.Time // the instant named by the latest refusal at the limit
	waitFor  time.Time // the instant a client held by sparseWait waits for
	// retryAfter reports whether the server ever sent a Retry-After: a
	// refusal without one from such a server most likely carried a date
	// that had passed.
	retryAfter bool
	phase      float64 // where in its gap after a fixed window's turnover this client calls, in [0, 1)
	// floor is what refusals taught: a window learned from resets alone
	// that gets the client refused is doubled, at most once a window, back
	// towards the default (the more conservative reading wins), until
	// floorLapse doubled windows pass.
	floor    time.Duration
	bumpedAt time.Time
	// bound is the shortest upper bound on the window that this
	// client's own calls leaving the count gave (zero: none yet).
	bound time.Duration
	// short is the window probe shortened to while the count stayed low
	// at the client's ceiling (zero: never), at shortAt.
	short   time.Duration
	shortAt time.Time
	// bucket: the server is a token bucket whose reset is its time to
	// full (see bucketLike); its count drains at limit per window instead
	// of calls leaving it a window after they came.
	bucket   bool
	matches  int           // successive responses whose reset was the time to refill their count
	matchAt  time.Time     // the first of them
	matchQ   time.Duration // and the reset it predicted (count × interval)
	interval time.Duration // the longest reset per counted call seen
	// sawFull reports whether a response reported the count at the limit.
	sawFull bool
	// before is the latest turnover of a fixed window; beforeOthers and
	// beforeOwn are the others' calls and this client's in the latest
	// count of the window it ended (see othersBefore).
	before                  time.Time
	beforeOthers, beforeOwn float64
	// onGrid counts the reset instants that fell on a whole second, and
	// offGrid reports whether one did not (see wholeSeconds); rounded
	// reports whether the window is the round one they read (see
	// learnWindow).
	onGrid  int
	offGrid bool
	rounded bool
	// pinAt and pinUsed are the latest reset instant and the count first
	// seen with it; pinned reports whether the count rose by half the
	// limit while the instant stayed put (a fixed window's end; a
	// bucket's moves on by an interval a call).
	pinAt   time.Time
	pinUsed float64
	pinned  bool
	// perCall is the longest reset per counted call seen (a reset on no
	// count counting as on one): a bucket's reset, its time to full, is
	// at most its count times its interval (see learnWindow).
	perCall time.Duration
	// perCallHi is the least of (reset + instantSlack)/(count − 1) seen:
	// a bucket's count is its time to full over its interval, rounded up,
	// and its reset, to the second, falls short of that time by up to
	// instantSlack, so that its interval is at most perCallHi.
	perCallHi  time.Duration
	stayedLong bool // an instant stayed put for twice instantSlack while the count rose
	// secMatches counts the successive responses, on a count of at least
	// a quarter of the limit, whose whole-second reset was the time the
	// bucket takes to refill that count; secBucket latches once there
	// were secMatchesMin of them (see secondsBucket).
	secMatches   int
	secLo, secHi float64   // the range of seconds per token they agree on
	secFrom      time.Time // the first of them
	secAt        time.Time // the instant the first of them named
	secUsed      float64   // on what count
	secBucket    bool
}

// gridMin is how many reset instants, all on whole seconds, make the
// resets whole seconds (see wholeSeconds).
const gridMin = 8

// wholeSeconds reports whether every reset instant named so far fell on a
// whole second, gridMin of them at least: the server writes its reset as
// an HTTP date or a Unix time in seconds, rounded down to the second, so
// that the real instant lies up to a second after the one named, and the
// longest reset read falls short of the window by up to a second.
func (l *learner) wholeSeconds() bool {
	return !l.offGrid && l.onGrid >= gridMin
}

// perCallTol is how far, as a factor, perCall may exceed the interval a
// round window reads (a reset measured on the client's clock, a round trip
// after the server's).
const perCallTol = 1.1

// perCallFits reports whether every reset seen fits a bucket's time to
// full with the interval of the round window just above the longest
// reading (the window over the limit): none longer than its count times
// that interval (perCall), none so short that the interval is above
// perCallHi. A clock-aligned fixed window's ends are whole seconds too,
// but its reset is long on a low count (just after it turned over) and
// short on a full one (just before it turns over). It must be called with
// p.mu held.
func (p *Pacer) perCallFits() bool {
	l := &p.lw
	iv := float64(roundUp(l.longest)) / p.limit
	return p.limit > 0 && float64(l.perCall) <= iv*perCallTol && (l.perCallHi == 0 || iv <= float64(l.perCallHi))
}

// roundUp returns the shortest round window (see roundWindows) at least d
// and less than instantSlack above it, and d when there is none.
func roundUp(d time.Duration) time.Duration {
	for _, r := range roundWindows {
		if r >= d {
			if r-d < instantSlack {
				return r
			}
			break
		}
	}
	return d
}

// instantSlack is how far two reset instants may differ and still name the
// same one: resets come rounded to the second (delta seconds, epoch
// seconds, HTTP dates), and the round trip moves them by a little more.
const instantSlack = 1100 * time.Millisecond

// minReading is the shortest reset or Retry-After taken as a bound on the
// window. A shorter one says nothing about it: the formats count in whole
// seconds (a date rounded down reads anywhere from 0 to 1 s short), and a
// token bucket whose reset names the next token reads W/L. Taken as the
// window, such a reading made the one client that happened to see it
// believe in a window of milliseconds and take most of the limit.
const minReading = 500 * time.Millisecond

// learnWindow takes in the reset and Retry-After of s, observed at now,
// before the count is: it sets the window (unless a policy gave it) and,
// on a fixed window whose reset instant has passed, moves the boundary so
// that this client's calls of the previous window no longer count. It
// must be called with p.mu held.
func (p *Pacer) learnWindow(now time.Time, s Signal, sent time.Time, landed bool) {
	l := &p.lw
	reading := s.Reset
	if reading > 0 && reading < minReading {
		reading = p.bucketReading(s)
	}
	if reading >= minReading {
		l.resets = true
	}
	l.resetSent = l.resetSent || s.HasReset || s.Reset > 0
	if s.Reset > 0 {
		at := now.Add(s.Reset)
		jump := at.Sub(l.instant)
		// The previous reset instant has passed and the new one is
		// further on. A reset written in whole seconds (rounded up) names
		// an instant up to a second after the real one: a move of more
		// than twice that, seen within a second before it, passed too
		// (only a window turning over moves it that far at once).
		passed := !now.Before(l.instant) || (jump > 2*instantSlack && jump >= l.longest/2 && !now.Before(l.instant.Add(-instantSlack)))
		// An instant that stayed put while the count rose, then moved on
		// by less than two windows (the longest reading is one at most)
		// as the count dropped, moved on by one window, seen up to half
		// a window late (a sliding-window counter still weighs the
		// previous window by more than half then, and its count does not
		// drop by half).
		oneWindow := l.stayed && now.Sub(l.instant) <= jump/2 && jump >= l.longest/2 && jump < 2*l.longest-instantSlack
		held := l.held
		// How late this response saw the instant pass: from the instant
		// itself or, when a refusal held this client until after it (see
		// heldOver), from the end of that hold: it could see nothing
		// sooner.
		seenFrom := l.instant
		if l.heldOver && p.hold.After(seenFrom) {
			seenFrom = p.hold
		}
		// A reset of a second at most that reads as the one before moved
		// its instant with the clock (a window of a second written in
		// whole seconds always reads 1 s), by the time between the two
		// responses: that says nothing of a turnover or a period.
		clocked := s.Reset == l.reading && s.Reset <= instantSlack
		if jump >= -instantSlack && jump <= instantSlack {
			l.held++
		} else {
			l.held = 1
		}
		// On a limit of a few calls, the count rarely halves at a
		// turnover: the clients call a few times a window each, and
		// some call soon after it. A count below the one before (or
		// refused ones) after the instant named moved on by about a
		// window (the longest reading is one at most), of more than
		// twice instantSlack, turned over (see refilled and
		// onWindowGrid).
		dropped := p.droppedTo(s) || p.refilled(now, s, jump)
		p.onWindowGrid(now, s, at)
		if !l.instant.IsZero() && passed && jump > instantSlack {
			// Seen soon after it passed, the move is a window (a fixed
			// window turned over there, or a counter expired a window
			// after the call that created it) and, if the count dropped
			// with it, the window is a fixed one.
			if l.fixed && dropped {
				// Known fixed: the count dropped, the window turned over
				// at the instant named, however late this response (or
				// a window before the new instant, if later: a window
				// went by unseen).
				l.boundary = l.instant
				if b := at.Add(-p.window); b.After(l.boundary) {
					l.boundary = b
				}
				p.forgetBefore(earliest(l.boundary, now))
				if k := math.Round(float64(jump) / float64(l.period)); k >= 1 && math.Abs(float64(jump)-k*float64(l.period)) <= float64(instantSlack) {
					l.confirmed = true
				}
			} else if ((now.Sub(seenFrom) <= jump/4 && jump >= l.longest/2) || (oneWindow && dropped) || (dropped && !p.droppedTo(s))) && !clocked {
				l.slid(now, jump, held, dropped)
				l.period = jump
				if dropped {
					if !l.fixed {
						l.phase = p.rng.Float64()
					}
					l.fixed, l.boundary = true, l.instant
					p.forgetBefore(earliest(l.boundary, now))
				}
			}
		}
		used, _, ok := p.countOf(s)
		same := !l.anchor.IsZero() && at.Sub(l.anchor) <= instantSlack && l.anchor.Sub(at) <= instantSlack
		l.stayed = same && l.far && ok && p.hasUsed && used >= p.used
		l.far = (same && l.far) || s.Reset >= minReading
		if !same {
			l.anchor, l.namedAt, l.namedUsed = at, now, used
		} else if l.stayed && l.fixed && l.period > 0 && now.Sub(l.namedAt) >= l.period/4 && !l.namedAt.Before(l.boundary) {
			l.confirmed = true
		}
		l.clocked = clocked
		l.instant, l.reading = at, s.Reset
		if l.stayed && now.Sub(l.namedAt) >= 2*instantSlack {
			l.stayedLong = true
		}
		pin := at.Sub(l.pinAt).Abs() < time.Millisecond
		if used, lim, ok := p.countOf(s); ok && pin && used-l.pinUsed >= max(2, lim/2) {
			l.pinned = true
		} else if !pin {
			l.pinAt, l.pinUsed = at, used
		}
		if ns := at.UnixNano() % int64(time.Second); ns < int64(time.Millisecond) || ns > int64(time.Second-time.Millisecond) {
			l.onGrid++
		} else {
			l.offGrid = true
		}
		l.heldOver = false
	} else {
		l.stayed, l.far = false, false
	}
	p.bucketLike(now, s)
	p.secondsBucket(now, s)
	if s.RetryAfter > 0 {
		l.retryAfter = true
	}
	if d := max(reading, s.RetryAfter); d >= minReading && d > l.longest {
		l.longest = d
	}
	if p.winSet {
		return
	}
	if u, lim, ok := p.countOf(s); ok && lim > 0 && u >= lim {
		l.sawFull = true
	}
	if used, _, ok := p.countOf(s); ok && s.Reset >= minReading {
		l.perCall = max(l.perCall, time.Duration(float64(s.Reset)/max(used, 1)))
	}
	if used, _, ok := p.countOf(s); ok && (s.HasReset || s.Reset > 0) && used >= 2 {
		if hi := time.Duration(float64(s.Reset+instantSlack) / (used - 1)); l.perCallHi == 0 || hi < l.perCallHi {
			l.perCallHi = hi
		}
	}
	if l.resets && l.wholeSeconds() && p.perCallFits() && !l.pinned && !l.stayedLong && l.period == 0 && !l.fixed {
		// Resets written to the second, rounded down, every one: the
		// longest read falls short of the window by up to a second, by
		// a different amount for each client, and a bucket that
		// refills faster than its clients first call keeps its resets
		// short, so that some clients read 1.6 s of a 2 s window and
		// others 1.9 s, and their shares differ as much. The window is
		// the round one just above the longest reading (within a
		// second), the same for every client; neither the own calls
		// leaving the count nor a refusal move it: the resets read it
		// (20/2 s bucket, N=4: J 0.88 -> 0.96, with the probe).
		l.rounded = true
		p.setWindow(roundUp(l.longest))
		return
	}
	l.rounded = false
	if b, ok := p.drained(now, s); ok && !l.bucket && !l.tokensFull() && l.period == 0 && !l.fixed && (b <= p.window/4 || !p.othersSeen(now)) && (l.bound == 0 || b < l.bound) {
		// On a key others use, only a bound far below the window moves
		// it: a bound comes to each client at its own time, and clients
		// whose windows differ by less than that no longer agree on
		// their shares.
		l.bound = b
	}
	p.departures(now, s, sent, landed)
	p.probe(now, s)
	w := p.cfg.window
	switch {
	case l.resets:
		// The default is a guess; a reset is the server's word.
		w = max(l.longest, l.period)
	case l.longest > w:
		// Retry-After alone (no reset ever): a lower bound, above the
		// default only when it says so.
		w = l.longest
	}
	if l.period == 0 {
		if l.short > 0 && l.longest < minReading {
			w = min(w, l.short)
		}
		if l.bound > 0 {
			// Own calls gone from the count: the window is no longer
			// than their age, whatever the default (nor shorter than the
			// longest reset).
			w = max(l.longest, min(w, l.bound))
		}
		if l.floor > 0 && now.Sub(l.bumpedAt) >= floorLapse*l.floor {
			// Provisional: a bucket never turns over, and a client
			// refused once would keep a longer window than the others
			// for good, and a smaller share.
			l.floor = 0
		}
		if l.resets || l.bound > 0 {
			// Until the structure of the resets confirms it.
			w = max(w, l.floor)
		}
	}
	keep := l.ownPace
	l.ownPace = false
	if p.pr.hit {
		// The window read from a burst leaving the count: the rate was
		// set reading the count as calls of a longer window, a share of
		// them spread over it. Start again from a newcomer's share of
		// the count (or the calls per second it made, if more), and let
		// the loop settle it.
		p.pr.hit = false
		r := p.rate
		p.setWindow(w)
		if used, _, ok := p.countOf(s); ok && r > 0 {
			p.rate = math.Max(r, math.Max(p.cfg.target*p.limit-used, newcomerShare*used)/p.window.Seconds())
			p.clampRate()
		}
		return
	}
	if keep && w != p.window {
		// A bound from calls leaving the count comes to each client
		// at its own time, not to all at once as a reset does: keep
		// this client's own calls per second (the others' rate, read
		// from the count as calls of the old window, scales), so that
		// the clients still to read it see the calls leave too.
		r := p.rate
		p.setWindow(w)
		if r > 0 {
			p.rate = r
			p.clampRate()
		}
		return
	}
	p.setWindow(w)
}

// shortResets reports whether the server sends resets but none has read
// half a second (minReading): a token bucket whose reset names its next
// token (or one never more than a few calls from full). The other
// algorithms name an instant about a window away now and then: a fixed
// window's or a counter's end, a sliding log's oldest call on a key that
// was idle.
func (l *learner) shortResets() bool {
	return !l.resets && !l.instant.IsZero()
}

// tokensFull reports whether the server's resets are all short (see
// shortResets) and a response reported the count at the limit: a token
// bucket naming its next token, emptied once. Its count is the tokens
// missing, refilled at limit per window whoever spent them, not calls of
// a window: it drops below this client's own recent calls as soon as the
// others slow down, and says nothing of when those calls came. Read as
// calls leaving it (drained), it cut one client's window to a quarter of
// the others', its rate four times theirs (300/30 s bucket, N=16: J
// 0.311 on seeds 31-36); read as the others' calls, a count below this
// client's own set their rate to zero.
func (l *learner) tokensFull() bool {
	return l.shortResets() && l.sawFull
}

// floorLapse is how many of the windows a refusal doubled to pass, with no
// refusal doubling it again, before the doubling lapses.
const floorLapse = 6

// slidesMin is how many turnovers in a row, without the count dropping,
// make a server a sliding-window counter; heldMin is how many responses
// must name the instant before each (a token bucket paced to one call a
// window moves its instant by a window at every call).
const (
	slidesMin = 2
	heldMin   = 3
)

// slid takes in a turnover at now that moved the reset instant by jump,
// held responses having named the instant before it, and dropped the
// count or not. It must be called before period is updated.
func (l *learner) slid(now time.Time, jump time.Duration, held int, dropped bool) {
	regular := l.period > 0 && jump-l.period <= instantSlack && l.period-jump <= instantSlack &&
		now.Sub(l.turnAt) <= jump+instantSlack && held >= heldMin
	if dropped || !regular {
		l.slides = 0
	} else {
		l.slides++
	}
	l.turnAt = now
}

// counter reports whether the server is a sliding-window counter: its
// reset instant is the end of a fixed window, moving on by a window at
// each turnover, but its count does not drop there (it weighs the
// previous fixed window's count by the part of it still inside a window
// ending now, so that those calls leave evenly over the current one,
// whenever they came).
func (l *learner) counter() bool {
	return l.slides >= slidesMin && !l.fixed
}

// probeEvery is the span, in windows, of the slots of the wall clock in
// which probe may shorten the window once each: the shortening restarts
// the reconstruction of the others' calls, and the estimate of their rate
// settles again within two of its time constants (smoothing). (A quarter
// window, longer than that, took the clients of a 20-per-2 s bucket half
// of a 40 s run to learn the window: utilisation 0.72 at N=4.)
const probeEvery = 2 * smoothing

// probeShrink is the factor by which probe shortens the window.
const probeShrink = 4

// probeCeiling is the fraction of the most its window allows (L/W) above
// which a client's rate counts as at its ceiling for probe.
const probeCeiling = 0.8

// probe shortens the window by probeShrink, at most once in each slot of
// probeEvery windows of the wall clock, while this client calls at about
// the most the window it believes in allows (L/W), has to wait for it, and
// the server counts less than a quarter of the limit and fewer calls than
// this client alone made in that window, with no reset that reads a
// window: the window is shorter than believed (a bucket refilling faster
// than the default window assumes keeps itself nearly full, and its resets
// then read nothing). Every client at its ceiling sees the same low count;
// the slots, read on the clock every client shares, make them shorten
// together rather than each at its own time, when the first to shorten
// would take the bucket while the others still wait at the default
// window's pace. Once the count rises the resets and the own calls
// leaving it take over. It must be called with p.mu held.
func (p *Pacer) probe(now time.Time, s Signal) {
	l := &p.lw
	used, limit, ok := p.countOf(s)
	if !ok || limit <= 0 || used >= limit/4 || used >= p.own.counted() || l.period > 0 || l.fixed || l.longest >= minReading {
		return
	}
	if p.rate < probeCeiling*limit/p.window.Seconds() || p.waited().Before(now.Add(-p.window/periods)) {
		return
	}
	if slot := time.Duration(probeEvery * float64(p.window)); slot > 0 && !l.shortAt.IsZero() && now.UnixNano()/int64(slot) <= l.shortAt.UnixNano()/int64(slot) {
		return
	}
	l.short, l.shortAt = max(p.window/probeShrink, minReading), now
}

// secMatchesMin is how many successive responses must read as a bucket's
// time to full, to the second, before secondsBucket takes the server for
// one.
const secMatchesMin = 8

// secondsBucket recognises a token bucket whose reset, its time to full,
// is written to the second, rounded down (see wholeSeconds), and too short
// for bucketLike (a bucket of a window of a few seconds). Such a reset
// read as r on a count of used whole tokens (rounded up) says the bucket
// refills a token every W/limit between r/used and (r+1 s)/(used−1): on
// secMatchesMin successive responses with a count of at least a quarter of
// the limit, over twice instantSlack at least, those ranges must all
// overlap. A fixed window's or a counter's reset moves with the clock, not
// the count (long when the count is low, short when it is high), and the
// ranges part within a window; a turnover (fixed) cancels the reading for
// good. It needs no
// window: a client that joins a busy key reads it as soon as the others
// do. It must be called with p.mu held, after the reset instant is
// recorded.
func (p *Pacer) secondsBucket(now time.Time, s Signal) {
	l := &p.lw
	if l.fixed || l.offGrid || l.stayedLong || l.pinned || !l.resets {
		l.secBucket, l.secMatches = false, 0
		return
	}
	used, limit, ok := p.countOf(s)
	if !ok || limit <= 0 || used < max(2, limit/4) || !s.HasReset || l.secBucket {
		return
	}
	r := s.Reset.Seconds()
	lo, hi := r/used, (r+instantSlack.Seconds())/(used-1)
	// A bucket's instant (now plus the count times the interval) moves
	// on with the clock from the first response of the run, and by an
	// interval for every token the count gained since, or back for every
	// one it lost, to the second; a window's end stays put while its
	// count rises, then jumps by a window.
	at := now.Add(s.Reset)
	moved := (at.Sub(l.secAt) - now.Sub(l.secFrom)).Seconds()
	dc := used - l.secUsed
	a, b := dc*min(l.secLo, lo), dc*max(l.secHi, hi)
	jumped := l.secMatches > 0 && (moved > max(a, b)+instantSlack.Seconds() || moved < min(a, b)-instantSlack.Seconds())
	if l.secMatches > 0 && lo <= l.secHi && hi >= l.secLo && !jumped {
		l.secLo, l.secHi = max(l.secLo, lo), min(l.secHi, hi)
		l.secMatches++
	} else {
		l.secLo, l.secHi, l.secMatches = lo, hi, 1
		l.secFrom, l.secAt, l.secUsed = now, at, used
	}
	l.secBucket = l.secMatches >= secMatchesMin && now.Sub(l.secFrom) >= 2*instantSlack
}

// bucketMatches is how many successive responses, over at least four
// times the slack of a reset in whole seconds or while the count moved
// the reset by twice that, must report a reset that is the time a
// token bucket takes to refill their count before the server is taken
// for one.
const bucketMatches = 8

// bucketLike recognises a token bucket whose reset is the time until it
// is full: on a count of at least a quarter of the limit, the reset is
// the count times the same interval W/limit, and longer than the slack of
// a reset in whole seconds, on bucketMatches successive responses over
// four times that slack (a counter's reset, at the start of its window,
// has moved on by then) or while the count moved the reset by twice it.
// (A sliding log's reset at a high count
// is the time until its oldest call leaves, mostly short; a fixed
// window's and a counter's move with the clock, not the count, and their
// turnover says what they are.) On such a
// bucket, reset × limit / count reads the window. It must be called with
// p.mu held.
func (p *Pacer) bucketLike(now time.Time, s Signal) {
	l := &p.lw
	if l.period > 0 || l.fixed {
		l.bucket, l.matches, l.interval = false, 0, 0
		return
	}
	used, limit, ok := p.countOf(s)
	if !ok || limit <= 0 || used < limit/4 || s.Reset < 2*instantSlack {
		return
	}
	q := time.Duration(float64(s.Reset) / used)
	if d := s.Reset - time.Duration(used*float64(l.interval)); l.interval > 0 && d <= instantSlack+l.interval && d >= -instantSlack-l.interval {
		if l.matches == 0 {
			l.matchAt, l.matchQ = now, time.Duration(used*float64(l.interval))
		}
		l.matches++
	} else {
		l.matches = 0
	}
	l.interval = max(l.interval, q)
	moved := time.Duration(used*float64(l.interval)) - l.matchQ
	if !l.bucket && l.matches >= bucketMatches && (now.Sub(l.matchAt) >= 4*instantSlack || moved >= 2*instantSlack || moved <= -2*instantSlack) {
		l.bucket = true
		if p.rate > 0 {
			// The rate was set reading the count as calls of a window:
			// start again from a share among a handful of clients, as
			// a newcomer on a busy key does, and let the loop settle it.
			p.rate = min(p.rate, newcomerShare*p.cfg.target*limit/p.window.Seconds())
		}
	}
	if l.bucket {
		l.longest = max(l.longest, time.Duration(float64(s.Reset)*limit/used))
	}
}

// drained returns an upper bound on the window from a count below this
// client's own calls: the server reports used calls, this one among them
// if it was accepted, so that of this client's earlier counted calls at
// most used are still in its window, and the one before them has left
// it, a window after the server counted it. (That holds for sliding
// windows and buckets; a fixed window or a counter that has turned over
// says nothing here, hence the caller's checks.) It returns false when the
// count leaves every such call in.
func (p *Pacer) drained(now time.Time, s Signal) (time.Duration, bool) {
	used, limit, ok := p.countOf(s)
	if !ok || used < limit/4 {
		// A low count says little: a bucket refilling faster than the
		// calls come drops them from its count at once.
		return 0, false
	}
	t, ok := p.own.answeredNth(int64(used) + 1)
	if !ok || now.Sub(t) < minReading {
		return 0, false
	}
	return snap(now.Sub(t)), true
}

// departures records the count s reports, its call sent at sent (landed
// false when unknown), and bounds the window from above when more calls
// left the count since an earlier one than an earlier count held (see
// departed). Only while no response carried a reset: a server that sends
// a count and no reset is read as a sliding log, and a bucket or a fixed
// window says what it is through its resets. (Its own calls alone rarely
// bound the window of a key others share: they are a share of the count,
// and the bound they give is about as many windows long as there are
// clients.) It must be called with p.mu held, before this response's call
// is counted.
func (p *Pacer) departures(now time.Time, s Signal, sent time.Time, landed bool) {
	l := &p.lw
	used, limit, ok := p.countOf(s)
	if !ok || limit <= 0 || l.resetSent {
		return
	}
	// The count less this client's counted calls, and less its calls in
	// flight, which the count may hold already.
	v := used - p.ownAll - float64(p.own.flying)
	// Of the calls counted, those that came by the time this call was
	// sent: all but this call, if it was counted.
	before := used
	if !s.Throttled {
		v-- // this call, counted after
		before--
	}
	if b, ok := p.probeRead(now, v); ok && !l.bucket && l.period == 0 && !l.fixed && (l.bound == 0 || b < l.bound) {
		l.bound = b
		p.pr.hit = true
	}
	if b, ok := p.dep.bound(now, v); ok && b >= minReading && !l.bucket && l.period == 0 && !l.fixed && (l.bound == 0 || snap(b) < l.bound) {
		l.bound = snap(b)
		l.ownPace = true
	}
	p.dep.add(now, sent, landed, before, v, p.window)
}

// roundWindows are the windows servers are configured with.
var roundWindows = []time.Duration{
	time.Second, 2 * time.Second, 3 * time.Second, 5 * time.Second, 10 * time.Second,
	15 * time.Second, 20 * time.Second, 30 * time.Second, time.Minute, 2 * time.Minute,
	5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute, time.Hour,
}

// snap returns the round window just below a bound b that exceeds it by
// less than a quarter, and b otherwise. A bound from calls leaving the
// count overshoots the window by up to the client's own gap, a different
// amount for each client; snapped, the clients agree on the window, and
// so on their shares.
func snap(b time.Duration) time.Duration {
	for i := len(roundWindows) - 1; i >= 0; i-- {
		if r := roundWindows[i]; r <= b {
			if b < r+r/4 {
				return r
			}
			break
		}
	}
	return b
}

// countOf returns the count s reports and the limit it applies to (s's
// or, without one, the latest known), and false when s carries no count.
func (p *Pacer) countOf(s Signal) (used, limit float64, ok bool) {
	limit = float64(s.Limit)
	if limit <= 0 {
		limit = p.limit
	}
	switch {
	case s.HasUsed:
		return float64(s.Used), limit, true
	case s.HasRemaining && limit > 0:
		return limit - float64(s.Remaining), limit, true
	}
	return 0, limit, false
}

// bucketReading returns what a short reset says about the window: a token
// bucket's time until it is full is used × W/limit, so that the window is
// reset × limit/used; the other algorithms' resets, and a bucket's time to
// its next token, come out no longer than the window that way too (a
// bound, never an overestimate), but mostly below minReading. It returns
// zero when s carries no count.
func (p *Pacer) bucketReading(s Signal) time.Duration {
	used, limit, ok := p.countOf(s)
	if !ok || limit <= 0 || used < max(1, limit/4) {
		// On a bucket nearly full, a reset to the next token would read
		// as a window up to limit/used times too long.
		return 0
	}
	return time.Duration(float64(s.Reset) * limit / used)
}

// refused takes in a refusal at now: a window shorter than the default,
// read from resets that no turnover has confirmed (see period),
// may be a misreading (a token bucket whose reset names the next token,
// not the full bucket), so it doubles, at most once a window, up to the
// default (or to three times the longest reading, when the refusal's
// Retry-After reads a window). It must be called with p.mu held.
func (p *Pacer) refused(now time.Time, s Signal) {
	l := &p.lw
	if p.winSet || l.period > 0 || l.rounded || p.window >= p.cfg.window || (!l.bumpedAt.IsZero() && now.Sub(l.bumpedAt) < p.window) {
		return
	}
	if s.RetryAfter <= 0 && (p.heldFull(now) || p.noRetryAfter(s)) {
		// No Retry-After, and a reset that has named the same instant
		// while the count rose to the limit (a full fixed window), or
		// from a server that never sends one, whose reset the client
		// waits for (see Observe): not a misreading.
		return
	}
	if s.RetryAfter > 0 && p.fullUntilHeld(now, s) {
		// A Retry-After that ends at the instant the resets have named
		// while the count rose: a full window until then, not a
		// misreading. The client is held past the instant, and its next
		// response is the first that can show the turnover.
		l.heldOver = true
		return
	}
	if s.Reset >= minReading && s.Reset >= p.window*9/10 && s.Reset <= p.window && s.RetryAfter >= s.Reset/2 {
		// The refusal itself reads the window believed, and asks to
		// wait about as long: the window is full, not misread. (A
		// bucket's refusal asks to wait for its next token, far less
		// than its reset.)
		return
	}
	ceiling := p.cfg.window
	if l.bound > 0 {
		// Own calls that left the count bound the window: a refusal
		// does not move it past that.
		ceiling = min(ceiling, l.bound)
	}
	if l.longest >= minReading && s.RetryAfter >= minReading {
		// A Retry-After that reads a window: the server names when
		// its window ends, and a bucket misread asks for its next
		// token instead. Refusals before the first turnover would
		// otherwise double the window again at each window.
		ceiling = min(ceiling, 3*l.longest)
	}
	if p.window >= ceiling {
		return
	}
	l.floor, l.bumpedAt = min(2*p.window, ceiling), now
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
	u := float64(p.queue.countUntil(t) - p.queue.countUntil(l.instant))
	u += p.aheadUntil(t) - p.aheadUntil(l.instant)
	others := p.othersRate() * t.Sub(l.instant).Seconds()
	return u + float64(p.own.flyingFrom(l.instant)) + others, true
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

// heldFull reports whether the latest response named the reset instant
// this client's responses have named, with the count rising, for at least
// twice instantSlack: a fixed window full until that instant. (A token
// bucket's time to full, written to the second, names the same second
// for a moment as its count rises, never that long.)
func (p *Pacer) heldFull(now time.Time) bool {
	return p.lw.stayed && now.Sub(p.lw.namedAt) >= 2*instantSlack
}

// fullUntilHeld reports whether a refusal s at now says the window is
// full until the reset instant the responses have named: its Retry-After
// ends at that instant (each written in whole seconds, one may be rounded
// down and the other up: within twice instantSlack), and the instant stayed
// put while the count rose, for twice instantSlack (see heldFull) or by
// more calls than the window admits in that time. (A token bucket's time
// to full moves on by W/limit with every call it counts: held while the
// count rose by that many, it would have moved by twice instantSlack.) A
// fixed window, and a sliding-window counter in its first window, refuse
// so until they turn over; a bucket misread names its next token instead.
func (p *Pacer) fullUntilHeld(now time.Time, s Signal) bool {
	l := &p.lw
	d := now.Add(s.RetryAfter).Sub(l.anchor)
	if !l.stayed || d > 2*instantSlack || d < -2*instantSlack {
		return false
	}
	used, limit, _ := p.countOf(s)
	return p.heldFull(now) || used-l.namedUsed > 2*instantSlack.Seconds()*limit/p.window.Seconds()
}

// fixedSure reports whether the window is known to be fixed, with a
// period longer than the rounding of whole-second resets can fake (twice
// instantSlack): a sliding window of a second or two, its reset written
// in whole seconds, shows jumps of its instant and drops of its count
// that look like a fixed window's turnovers.
func (p *Pacer) fixedSure() bool {
	return p.lw.fixed && p.lw.period > 2*instantSlack
}

// forgetBefore drops this client's counted calls made before t, when a
// fixed window turned over at t.
func (p *Pacer) forgetBefore(t time.Time) {
	if t.After(p.lw.before) {
		p.lw.before, p.lw.beforeOthers, p.lw.beforeOwn = t, p.othersUsed, p.own.counted()
	}
	p.own.forgetBefore(t)
	p.hist.valid = false
}

// othersSeen reports whether another client's calls were counted within
// the last two windows: the key is in use, and an idle-key burst would
// take what the others are about to spend.
func (p *Pacer) othersSeen(now time.Time) bool {
	return !p.lw.othersAt.IsZero() && now.Sub(p.lw.othersAt) < 2*p.window
}

// earliest returns the earlier of a and b.
func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// probeStep is how many calls per window a client that learned its rate
// from refusals alone adds, every window without a refusal: the share
// it read may have been small (a newcomer took the window) or the key
// may have lost a client, and only a refusal says how far it may go.
const probeStep = 0.1

// floorStep is probeStep for a reading that rests on no accepted call
// (see refusalsOnly.rate): a whole call per window, every window.
const floorStep = 1

// refusalsOnly is what a server that reports no count, only a Retry-After
// on refusals, taught a Pacer: the calls accepted since from (the first
// after a refusal), and the rate the latest refusal allowed this client, in
// calls per second over a window of span, read at at (zero: none yet). It
// is owned by one Pacer and used under its lock.
type refusalsOnly struct {
	streak  float64
	from    time.Time
	implied float64
	span    time.Duration
	at      time.Time
	first   float64 // the calls behind the reading, if it is the first (zero otherwise)
	floor   bool    // the reading rests on no accepted call (see rate)
}

const (
	// burstCalls is how many calls a first reading must rest on to be
	// a burst that may have taken others' share (see observe).
	burstCalls = 10
	// burstCutPower sets how much further a contradicted burst reading
	// falls: by (new/old)^burstCutPower on top of the new reading. The
	// client paced at old and made new while the others made the rest of
	// the window (about old - new): they call at about old·(old/new - 1)
	// a window, which leaves it old·(2 - old/new). At new/old = 0.55 that
	// is a fifth of old, and so is (new/old)^2.75; unlike the difference,
	// the power does not fall to nothing at new/old = 0.5 (the others'
	// estimate is rough: the window allowed the burst about old, not
	// exactly).
	burstCutPower = 1.75
	// keptSpans: a reading that held for keptSpans times the span of the
	// next one does not fall with it (see observe).
	keptSpans = 3
)

// observe learns how many calls the server's window allows this client:
// the calls accepted since the previous refusal, over the time from the
// first of them to the end of this refusal's Retry-After (when the window
// that refused them ends). One accepted call is a reading too, and so is
// none when the client has no reading yet: refused before any call of its
// own got in, the others had filled the window, and it reads one call per
// Retry-After (at most what that window would have left it). Without a
// reading it would call back to back again at the next window, fill it
// before the clients that have one, and take their share. Each refusal
// replaces the reading, so that a
// client that got more than its share learns the lower rate at its next
// refusal. A newcomer's first burst reads the share the others left it as
// its own, and a greedy start can take nearly a whole window: when a
// first reading of burstCalls or more is contradicted within two of its
// spans (the client refused again, reading less), it was a share taken
// from others, and the client gives way further, to about the headroom
// the others leave it. A client whose reading held for several windows
// and falls at once was crowded out by such a burst, not over its share:
// it keeps its reading, the burst's client giving way at its next refusal
// (a second refusal within a few windows is believed).
func (r *refusalsOnly) observe(now time.Time, s Signal) {
	if !s.Throttled {
		if r.streak == 0 {
			r.from = now
		}
		r.streak++
		return
	}
	calls, span := r.streak, now.Add(s.RetryAfter).Sub(r.from)
	floor := calls == 0 && r.implied <= 0
	if floor {
		calls, span = 1, s.RetryAfter
	}
	if s.RetryAfter > 0 && calls >= 1 && span > 0 {
		implied := calls / span.Seconds()
		switch {
		case r.implied <= 0:
		case r.first >= burstCalls && now.Sub(r.at) < 2*r.span && implied < r.implied:
			implied *= math.Pow(implied/r.implied, burstCutPower)
		case r.span >= keptSpans*span:
			implied = max(implied, r.implied)
		}
		r.first = 0
		if r.implied <= 0 {
			r.first = calls
		}
		r.implied, r.span, r.at, r.floor = implied, span, now, floor
	}
	r.streak = 0
}

// rate is the rate refusals alone allow at now, in calls per second: the
// latest reading, plus probeStep calls per window for every window since
// (zero before any reading). A reading that rests on no accepted call is
// a floor, not a share: the client was refused before any call of its own
// got in, because another client's burst had filled the window. The burst's
// client paces at what it read, nearly the whole window, and gives way
// only when refused; a floor that grew by probeStep alone would take tens
// of windows to reach a fair share, and the starved client would stay at
// one call a window while the burst's client kept the rest. Until its
// next refusal, which reads the rate the window really allowed, such a
// client adds floorStep calls per window every window.
func (r *refusalsOnly) rate(now time.Time) float64 {
	if r.implied <= 0 {
		return 0
	}
	w := r.span.Seconds()
	if r.floor {
		return r.implied + floorStep*now.Sub(r.at).Seconds()/(w*w)
	}
	return r.implied + probeStep*now.Sub(r.at).Seconds()/(w*w)
}

// refilled reports whether s, observed at now with the reset instant
// moved on by jump, shows a fixed window turned over on a limit of a few
// calls (below sparseCalls) and resets of more than twice instantSlack:
// the count is below the one before, or, for an accepted call, no higher
// than this client's own calls within the window (which a sliding window
// would still count), and the instant moved by about a window, the
// response coming less than a window after the instant passed. A sliding
// log moves its instant by about a window only when its calls leave it
// all but at once, as a fixed window's do. It must be called with p.mu
// held, before the count is learned.
func (p *Pacer) refilled(now time.Time, s Signal, jump time.Duration) bool {
	l := &p.lw
	used, _, ok := p.countOf(s)
	if !ok || l.instant.IsZero() || l.longest <= 2*instantSlack || p.limit <= 0 || p.limit >= sparseCalls || !p.hasUsed {
		return false
	}
	lower := used < p.used || (!s.Throttled && used <= p.own.counted())
	return lower && jump >= l.longest/2 && jump < 2*l.longest-instantSlack && now.Sub(l.instant) < jump
}

// onWindowGrid recognises a fixed window from refusals alone: on a limit
// of a few calls (below sparseCalls), or to a client that calls about
// once a window (see onceAWindowFull), refusals at the limit whose reset
// instants are one or two windows apart, each named exactly, are the
// ends of a fixed window: the spacing within a tenth of instantSlack
// below the longest reset read, or a sixteenth of it above (the longest
// reading is short of the window by how late in its window the call it
// answered came: clients that start together a 60th of a window apart
// read 9.86 s of a 10 s window, which a tenth of instantSlack missed),
// though this client never saw its count drop (it always came after the
// window had filled). A sliding log names when its oldest call leaves,
// anywhere. The period is the spacing, and the window turned over a
// period before the instant named. It must be called with p.mu held,
// with at the instant s names.
func (p *Pacer) onWindowGrid(now time.Time, s Signal, at time.Time) {
	l := &p.lw
	used, limit, ok := p.countOf(s)
	if !s.Throttled || !ok || limit <= 0 || used < limit || (limit >= sparseCalls && !p.onceAWindowFull(now, s, at)) {
		return
	}
	last := l.limitAt
	l.limitAt = at
	clocked := s.Reset <= instantSlack && s.Reset == l.reading
	if last.IsZero() || l.fixed || l.longest <= 2*instantSlack || clocked {
		return
	}
	d := at.Sub(last)
	k := math.Round(float64(d) / float64(l.longest))
	if k < 1 || k > 2 {
		return
	}
	if per := time.Duration(float64(d) / k); per >= l.longest-instantSlack/10 && per <= l.longest+max(instantSlack/10, l.longest/16) {
		l.period, l.fixed, l.boundary = per, true, at.Add(-per)
		l.phase = p.rng.Float64()
		p.forgetBefore(earliest(l.boundary, now))
	}
}

// noRetryAfter reports whether the refusal s, without Retry-After, came
// from a server that never sent one, with a reset longer than twice
// instantSlack: the reset is then the server's only word on when calls go
// again. (A Retry-After written as a date, to the second, reads nothing
// when it names the second that is ending; a shorter reset may be a
// bucket's next token or time to full, misread as a window, see refused.)
func (p *Pacer) noRetryAfter(s Signal) bool {
	return s.RetryAfter <= 0 && s.Reset > 2*instantSlack && !p.lw.retryAfter
}

// onceAWindowFull reports whether the refusal s, observed at now with at
// the instant it names, came to a client that calls about once a window
// (onceAWindow calls at most, at its rate), with a Retry-After that ends
// at that instant (each written in whole seconds: within instantSlack).
// Such a client calls late in a fixed window as often as early, and late
// it never sees the count drop at a turnover (the others filled the
// window before it called): it never learned that the window was fixed,
// kept calling a window apart at the same late point, and was refused at
// nearly every call, at the floor rate (30/3 s, N=16: one to three such
// clients in most runs). A sliding-window counter's refusal waits for the
// previous window's weight to fade, not for its reset. It must be called
// with p.mu held.
func (p *Pacer) onceAWindowFull(now time.Time, s Signal, at time.Time) bool {
	if s.RetryAfter <= 0 || p.rate*p.window.Seconds() > onceAWindow {
		return false
	}
	d := now.Add(s.RetryAfter).Sub(at)
	return d <= instantSlack && d >= -instantSlack
}

// othersBefore returns the others' rate that the latest count of the
// window before a fixed window's latest turnover showed, while the window
// after it runs and when this client had at least 1/settle calls counted
// in it (a count every quarter window at least), else zero. The estimate
// of the others restarts at a turnover from the count since, which holds
// nearly nothing of theirs: clients held by a Retry-After written in whole
// seconds come back up to a second apart, and the first back read the
// window as its own and filled its hole alone, keeping the larger share
// for windows (30/3 s, N=4: Jain's index over the first five windows 0.93).
// A client that calls fewer times a window reads the others' part from one
// count at a random point of the window, which says little of their rate.
// It must be called with p.mu held.
func (p *Pacer) othersBefore(now time.Time) float64 {
	l := &p.lw
	if !p.fixedSure() || l.before.IsZero() || now.Sub(l.before) >= p.window || l.beforeOwn < 1/settle {
		return 0
	}
	return l.beforeOthers / p.window.Seconds()
}
