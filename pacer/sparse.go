package pacer

import (
	"math"
	"time"
)

// sparse is how a Pacer paces a fixed window that holds fewer calls than
// sparseCalls. A client there sees a handful of counts a window, or fewer
// than one: too few to read the others' rate from one count to the next,
// and a call that comes after the window is full is refused whatever the
// rate. The count still tells, at each call, how many calls came before it
// in the window, and that is enough to take turns:
//
//   - Regular calls. A client makes at most one regular call a window, at
//     a random point of its first part (regularSpan): a new point every
//     window, so that no client is always the one that comes last. While
//     the clients are fewer than the limit, each calls every window and
//     none is refused. When they are more, each holds one window in a
//     period of a few (the windows whose index is its residue modulo the
//     period) and keeps it while its calls there are accepted: a
//     reservation, as in reservation ALOHA, so that the windows' regular
//     calls stay where they fit instead of colliding anew every window.
//   - Extra calls. The client whose regular call was counted first (the
//     count says nobody called before it) takes what the regular calls
//     leave, in the last part of the window, one call at a time until the
//     count reaches the limit: nobody else does, so the extra calls never
//     collide. Unless the regular calls may fill the window by themselves:
//     a call of the last crowdWindows windows was refused, or a regular
//     call was counted at the limit, or the regular calls a window,
//     estimated, are within half a call of the limit. A client that has
//     seen no other client's calls for crowdWindows windows (or two of its
//     periods) takes them at once.
//
// The others' regular calls a window are read from the count at this
// client's regular calls: the calls before it, over the part of the
// regular span gone by, summed over the last few windows (a refused
// regular call counts the limit before it, a lower bound); in a period,
// that is the regular calls of the windows this client holds. A refused
// regular call gives its window up for another of the period, at random;
// refusals that come about as fast as its calls (a count halved at each
// accepted call, reaching 1.5) double the period, as does any refusal
// with a period of one. The period halves when twice the regular calls
// of its windows would still leave half a call of the limit (what they
// would hold were every client to halve it; at most every two periods,
// never within crowdWindows of a refusal). Periods are powers of two
// (see sparseSetPeriod). The period starts at the inverse of the share
// of its calls the server took before the plan, and, if refused, at
// least the regular calls a window the first count of the plan reads,
// over the limit.
//
// It is owned by one Pacer and used under its lock.
type sparse struct {
	on bool
	// accepted and refused count this client's calls before the plan
	// began.
	accepted, refused float64
	q                 float64   // the share of windows with a regular call of this client: 1/period
	end               time.Time // end of the window the plan is at
	// period and res are the windows this client holds: those whose
	// index (counted from ref, the end of the plan's first window) is res
	// modulo period. misses counts its regular calls refused, halved at
	// each one accepted; periodAt is the end of the window when period
	// last changed; fresh says the next count is the plan's first, of a
	// client refused before it.
	period, res   int
	misses        float64
	ref, periodAt time.Time
	fresh         bool
	// booked is the end of the window of the latest regular call booked,
	// extra the latest extra call's slot handed out; first reports
	// whether this window's regular call was counted first, mine how many
	// of this client's calls the window counted, full whether the window
	// was seen full or refused a call.
	booked time.Time
	extra  time.Time
	first  bool
	mine   float64
	full   bool
	// crowdedAt is the end of the latest window whose regular calls were
	// seen to reach the limit (a regular call counted at the limit, or
	// refused).
	crowdedAt time.Time
	// others and phases are the others' calls counted before this
	// client's regular calls and the fractions of the regular span gone
	// by at them, decayed by sparseDecay a window: others/phases is the
	// others' regular calls a window.
	others, phases float64
}

const (
	// regularSpan is the part of a window in which regular calls go; the
	// rest is for the extra calls, which must come after every regular
	// call.
	regularSpan = 0.9
	// sparseDecay is how much of the others' calls and phases seen a
	// window keeps: about the last seven windows count.
	sparseDecay = 0.85
	// minPhases is how much of a regular span the counts must cover
	// before they move the period or allow extra calls: a third of a
	// window's worth.
	minPhases = 0.3
	// crowdWindows is how many windows after a refusal (or a regular
	// call counted at the limit) a client takes no extra calls: about
	// the memory of the estimate (sparseDecay), which is what says the
	// clients are fewer than the limit again.
	crowdWindows = 8
	// freshPhase is how much of the regular span must have gone by at
	// the plan's first count for it to set the period: a fifth, enough
	// for the others' calls before it to say how many call a window.
	freshPhase = 0.2
)

// sparseOn reports whether the Pacer plans its calls window by window
// (see sparse): on a window known to be fixed, of a limit below
// sparseCalls. It starts the plan the first time. It must be called with
// p.mu held.
func (p *Pacer) sparseOn() bool {
	if !p.fixedSure() || p.limit <= 0 || p.limit >= sparseCalls || p.lw.instant.IsZero() {
		return false
	}
	if !p.sp.on {
		q := 1.0
		if p.sp.refused > 0 {
			// The share of its calls the server took so far is the
			// share of windows it may expect to get into (counting one
			// more accepted, so that a client refused at its first call
			// or two does not give up).
			q = (p.sp.accepted + 1) / (p.sp.accepted + p.sp.refused + 1)
		}
		p.sp = sparse{on: true}
		p.sparseSetPeriod(int(math.Round(1 / q)))
		// Refused before: the count at the first call of the plan says
		// how many call a window (see sparseObserve).
		p.sp.fresh = p.sp.period > 1
	}
	return true
}

// sparseCount counts a response before the plan began.
func (p *Pacer) sparseCount(s Signal) {
	if p.sp.on {
		return
	}
	if s.Throttled {
		p.sp.refused++
	} else {
		p.sp.accepted++
	}
}

// sparseEnd returns the end of the fixed window holding t, from the
// latest instant the server named and the window.
func (p *Pacer) sparseEnd(t time.Time) time.Time {
	e := p.lw.instant
	if e.After(t) {
		// The instant may be a day ahead of a window of milliseconds:
		// step back by whole windows at once, not one by one.
		k := (e.Sub(t) - 1) / p.window
		return e.Add(-k * p.window)
	}
	k := t.Sub(e)/p.window + 1
	return e.Add(k * p.window)
}

// sameWindow reports whether a and b name the end of the same window
// (named a millisecond apart, or less).
func (p *Pacer) sameWindow(a, b time.Time) bool {
	d := a.Sub(b)
	return d < p.window/2 && d > -p.window/2
}

// sparseEstimate returns the regular calls a window, this client's and
// the others' as counted, and false while the counts cover less than
// minPhases of a regular span.
func (p *Pacer) sparseEstimate() (float64, bool) {
	sp := &p.sp
	if sp.phases < minPhases {
		return 1, false
	}
	return 1 + sp.others/sp.phases, true
}

// sparseRoll brings the plan to the window holding now: every turnover
// since grows q (while the regular calls leave part of the limit unused)
// and adds it to the credit, which holds at most one regular call beyond
// the next. It must be called with p.mu held.
func (p *Pacer) sparseRoll(now time.Time) {
	sp := &p.sp
	e := p.sparseEnd(now)
	if sp.end.IsZero() {
		sp.end, sp.ref, sp.periodAt = e, e, e
		return
	}
	k := math.Round(float64(e.Sub(sp.end)) / float64(p.window))
	if k < 1 {
		return // the same window, named a millisecond apart
	}
	d := math.Pow(sparseDecay, k)
	sp.others *= d
	sp.phases *= d
	sp.end, sp.full, sp.first, sp.mine = e, false, false, 0
	if h, ok := p.sparseEstimate(); ok && sp.period > 1 && e.Sub(sp.periodAt) >= time.Duration(2*sp.period)*p.window &&
		(sp.crowdedAt.IsZero() || e.Sub(sp.crowdedAt) > crowdWindows*p.window) &&
		2*h <= p.limit-0.5 {
		p.sparseSetPeriod(sp.period / 2)
	}
}

// sparseSetPeriod makes this client hold one window in n (rounded up to
// a power of two, at most ownBuckets), a random one of them, and scales
// the estimate of the others in its windows by the change. Periods that
// are powers of two nest: the windows of one period are a fixed part of
// those of a shorter one, so that clients of different periods that fit
// together keep fitting, where periods of 3 and 4 would meet in a
// different pattern every window. It must be called with p.mu held.
func (p *Pacer) sparseSetPeriod(n int) {
	sp := &p.sp
	k := 1
	for k < n && k < ownBuckets {
		k *= 2
	}
	n = k
	if sp.period > 0 && sp.phases > 0 {
		h := (1 + sp.others/sp.phases) * float64(sp.period) / float64(n)
		sp.others = math.Max(0, h-1) * sp.phases
	}
	sp.period, sp.res, sp.misses = n, p.rng.IntN(n), 0
	sp.q = 1 / float64(n)
	sp.periodAt = sp.end
	p.rate = sp.q / p.window.Seconds()
}

// sparseMine reports whether the window ending at e is one this client
// holds.
func (p *Pacer) sparseMine(e time.Time) bool {
	sp := &p.sp
	k := int64(math.Round(float64(e.Sub(sp.ref)) / float64(p.window)))
	return ((k-int64(sp.res))%int64(sp.period)+int64(sp.period))%int64(sp.period) == 0
}

// sparseSlot returns the slot of the next call: the window's regular call
// at a random point of what is left of its regular span, if it has not
// gone and the credit allows; else an extra call, if this client takes
// them; else the regular call of the first window whose credit reaches a
// call. It must be called with p.mu held.
func (p *Pacer) sparseSlot(now time.Time) time.Time {
	p.sparseRoll(now)
	sp := &p.sp
	from := now
	if l := p.lastSlot(); l.After(from) {
		from = l
	}
	start := sp.end.Add(-p.window)
	span := start.Add(time.Duration(regularSpan * float64(p.window)))
	booked := p.sameWindow(sp.booked, sp.end)
	if !sp.full && p.sparseMine(sp.end) && !booked && from.Before(span) {
		return p.randomIn(latest(from, start), span)
	}
	if booked && sp.first && !sp.full && p.own.flying == 0 && p.ahead.len() == 0 && p.extrasOK() {
		// One extra call at a time: the next is booked once this one's
		// count is known.
		if at := latest(from, span); at.Before(sp.end) {
			sp.extra = at
			return at
		}
	}
	// The next window of this client's that ends after from and holds
	// no regular call booked yet (callers booking at once).
	e := sp.end.Add(p.window)
	if from.After(e) {
		// A slot booked far ahead (behind a long hold): the windows
		// from the one it is in, on the same grid.
		e = e.Add(from.Sub(e) / p.window * p.window)
	}
	for i := 0; i < ownBuckets && (!p.sparseMine(e) || !e.After(from) || p.sameWindow(sp.booked, e)); i++ {
		e = e.Add(p.window)
	}
	s := e.Add(-p.window)
	return p.randomIn(latest(from, s), s.Add(time.Duration(regularSpan*float64(p.window))))
}

// extrasOK reports whether the regular calls leave room in the window:
// no other client's calls were seen, or none of the last crowdWindows
// windows had its regular calls reach the limit and the regular calls a
// window, estimated, are below the limit by more than half a call. It
// must be called with p.mu held.
func (p *Pacer) extrasOK() bool {
	sp := &p.sp
	if p.lw.othersAt.IsZero() || sp.end.Sub(p.lw.othersAt) >= time.Duration(max(crowdWindows, 2*sp.period))*p.window {
		return true
	}
	if !sp.crowdedAt.IsZero() && sp.end.Sub(sp.crowdedAt) <= crowdWindows*p.window {
		return false
	}
	total, ok := p.sparseEstimate()
	return ok && total < p.limit-0.5
}

// randomIn returns a random time in [a, b), or a if b is not after it.
func (p *Pacer) randomIn(a, b time.Time) time.Time {
	if !b.After(a) {
		return a
	}
	return a.Add(time.Duration(p.rng.Float64() * float64(b.Sub(a))))
}

// latest returns the later of a and b.
func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// sparseBook pays for a slot booked: a regular call takes a call of
// credit. It must be called with p.mu held.
func (p *Pacer) sparseBook(slot time.Time) {
	sp := &p.sp
	if slot.Equal(sp.extra) {
		return
	}
	sp.booked = p.sparseEnd(slot)
}

// sparseUnbook gives back a slot booked whose call was observed before
// it came: the call went at another time (its response says when), and a
// regular call of the slot's window is owed again. It must be called with
// p.mu held.
func (p *Pacer) sparseUnbook(slot time.Time) {
	sp := &p.sp
	if slot.Equal(sp.extra) {
		return
	}
	if p.sameWindow(sp.booked, p.sparseEnd(slot)) {
		sp.booked = time.Time{}
	}
}

// sparseObserve takes in the response to a call observed at now: a
// regular call's count (the first of the window, in its regular span)
// moves the estimate and q; a refusal, or a count at the limit, ends the
// window's calls. It must be called with p.mu held.
func (p *Pacer) sparseObserve(now time.Time, s Signal) {
	p.sparseRoll(now)
	sp := &p.sp
	used, limit, ok := p.countOf(s)
	if !ok || limit <= 0 {
		return
	}
	phase := math.Min(1, math.Max(0, 1-float64(sp.end.Sub(now))/float64(p.window)))
	regular := phase < regularSpan && sp.mine == 0
	if sp.fresh {
		sp.fresh = false
		if regular && phase/regularSpan >= freshPhase {
			o := math.Max(0, used-1)
			if s.Throttled {
				o = limit
			}
			h := 1 + o/(phase/regularSpan)
			if n := int(math.Ceil(h / limit)); n > sp.period {
				p.sparseSetPeriod(n)
			}
		}
	}
	if s.Throttled {
		// Refused, a regular call or an extra one: the regular calls
		// filled the window.
		sp.full, sp.crowdedAt = true, sp.end
		if regular {
			sp.booked = time.Time{}
			// The limit came before it: a lower bound.
			sp.others += limit
			sp.phases += phase / regularSpan
			// Its window is taken: another one, or one in more.
			sp.misses++
			if sp.period == 1 || sp.misses >= 1.5 {
				p.sparseSetPeriod(2 * sp.period)
			} else {
				sp.res = (sp.res + 1 + p.rng.IntN(sp.period-1)) % sp.period
			}
		}
		return
	}
	sp.mine++
	if used >= limit {
		sp.full = true
	}
	if !regular {
		return
	}
	if !p.sameWindow(sp.booked, sp.end) {
		// A call made before the plan began is this window's regular
		// call.
		sp.booked = sp.end
	}
	sp.misses *= 0.5
	if used >= limit {
		sp.crowdedAt = sp.end
	}
	sp.first = used <= 1
	sp.others += math.Max(0, used-1)
	sp.phases += phase / regularSpan
}

// sparseWait holds a client whose count showed other clients' calls, on a
// limit of a few calls whose window is not known to be fixed yet (its
// resets read more than twice instantSlack), until the reset instant the
// server named, then a random point of the regular span after it: calls
// after that are likely refused (the others may have filled the window,
// and the count says nothing more until a call), and the clients held go
// at different points of the next window, where the count dropping tells
// them the window is fixed. It must be called with p.mu held, after the
// count was learned.
func (p *Pacer) sparseWait(now time.Time) {
	l := &p.lw
	if p.limit <= 0 || p.limit >= sparseCalls || l.fixed || l.longest <= 2*instantSlack || !l.instant.After(now) || l.instant.Sub(now) > p.window {
		return
	}
	if !p.hasUsed || p.used-p.own.counted() < 1 || !l.waitFor.Before(l.instant) {
		return
	}
	l.waitFor = l.instant
	if at := p.randomIn(l.instant, l.instant.Add(time.Duration(regularSpan*float64(p.window)))); at.After(p.hold) {
		p.hold = at
	}
	if !p.last.After(now) {
		p.last = time.Time{}
	}
}

// sparseFirst returns the slot of the next call of a client on a limit of
// a few calls whose window is not known to be fixed yet (its resets read
// more than twice instantSlack), whose count showed nobody else's calls:
// it may be alone, or the first of several. It takes the rest of the
// window as the client counted first does in the plan: in the last part
// of the window, one call at a time, until the count reaches the limit;
// then a random point of the regular span of the next window. Not at
// its first count, though: a client that joins a busy key as the window
// turns over is counted alone before anybody else could call, and the
// others are about to fill the window; it calls next at a random point
// of the regular span of the next window, where the count tells. Calls
// booked at once go one a window. It returns false when the rule does not apply (see sparseWait for a count that
// showed others). It must be called with p.mu held.
func (p *Pacer) sparseFirst(now time.Time) (time.Time, bool) {
	l := &p.lw
	if p.limit <= 0 || p.limit >= sparseCalls || l.fixed || l.longest <= 2*instantSlack || !p.hasUsed || !l.instant.After(now) || l.instant.Sub(now) > p.window {
		return time.Time{}, false
	}
	if p.used-p.own.counted() >= 1 {
		return time.Time{}, false
	}
	if p.used >= p.limit || p.own.flying > 0 || p.ahead.len() > 0 || p.counts <= 1 {
		start := l.instant
		if last := p.lastSlot(); !last.Before(start) {
			// Callers booking at once (Reserve, or Wait, from several
			// goroutines): the next window already holds a call, so
			// this one goes in the window after the latest booked, one
			// a window until a count tells more.
			start = start.Add((last.Sub(start)/p.window + 1) * p.window)
		}
		return p.randomIn(start, start.Add(time.Duration(regularSpan*float64(p.window)))), true
	}
	return latest(now, l.instant.Add(-time.Duration((1-regularSpan)*float64(p.window)))), true
}
