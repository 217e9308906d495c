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
//     none is refused. When they are more, each calls in a share q of the
//     windows (credit that accrues q at every turnover), q set so that the
//     regular calls of a window come to the limit.
//   - Extra calls. The client whose regular call was counted first (the
//     count says nobody called before it) takes what the regular calls
//     leave, in the last part of the window, one call at a time until the
//     count reaches the limit: nobody else does, so the extra calls never
//     collide. Unless the regular calls may fill the window by themselves:
//     a call of the last crowdWindows windows was refused, or a regular
//     call was counted at the limit, or the regular calls a window,
//     estimated, are within half a call of the limit. A client that has
//     seen no other client's calls takes them at once.
//
// The others' regular calls a window are read from the count at this
// client's regular calls: the calls before it, over the part of the
// regular span gone by, summed over the last few windows (a refused
// regular call counts the limit before it, a lower bound). Above the
// limit by a tenth (the noise of a few counts), q falls in proportion;
// below it, q grows by the same step for every client, a window at a time:
// additive increase and multiplicative decrease even the shares out. A
// refused regular call cuts q by throttleCut at once.
//
// It is owned by one Pacer and used under its lock.
type sparse struct {
	on bool
	// accepted and refused count this client's calls before the plan
	// began.
	accepted, refused float64
	q                 float64   // the share of windows with a regular call of this client, up to 1
	credit            float64   // regular calls owed, net of those booked
	end               time.Time // end of the window the plan is at
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
	// sparseGain is the power of limit/estimate by which q falls at a
	// count above the limit: half the way, since one count is a handful
	// of calls.
	sparseGain = 0.5
	// sparseBand: q falls only when the regular calls a window are
	// estimated above the limit by this factor. With as many clients as
	// the limit, every estimate is noise around the limit, and q would
	// fall on half of them.
	sparseBand = 1.1
	// sparseStep is how much q grows a window, per unit of the fraction
	// of the limit the regular calls leave unused: the same for every
	// client.
	sparseStep = 0.2
	// minPhases is how much of a regular span the counts must cover
	// before they move q or allow extra calls: a third of a window's
	// worth.
	minPhases = 0.3
	// crowdWindows is how many windows after a refusal (or a regular
	// call counted at the limit) a client takes no extra calls: about
	// the memory of the estimate (sparseDecay), which is what says the
	// clients are fewer than the limit again.
	crowdWindows = 8
	// minShare is the lowest q: a regular call at least every 256
	// windows, as the rate's floor (see clampRate).
	minShare = 1.0 / ownBuckets
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
		p.sp = sparse{on: true, q: q}
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
		return sp.q, false
	}
	return sp.q + sp.others/sp.phases, true
}

// sparseRoll brings the plan to the window holding now: every turnover
// since grows q (while the regular calls leave part of the limit unused)
// and adds it to the credit, which holds at most one regular call beyond
// the next. It must be called with p.mu held.
func (p *Pacer) sparseRoll(now time.Time) {
	sp := &p.sp
	e := p.sparseEnd(now)
	if sp.end.IsZero() {
		sp.end, sp.credit = e, 1
		return
	}
	k := math.Round(float64(e.Sub(sp.end)) / float64(p.window))
	if k < 1 {
		return // the same window, named a millisecond apart
	}
	total := sp.q
	if sp.phases > 0 {
		total += sp.others / sp.phases
	}
	if total < p.limit {
		sp.q = math.Min(1, sp.q+k*sparseStep*(p.limit-total)/p.limit)
	}
	sp.credit = math.Min(sp.credit+k*sp.q, 1+sp.q)
	d := math.Pow(sparseDecay, k)
	sp.others *= d
	sp.phases *= d
	sp.end, sp.full, sp.first, sp.mine = e, false, false, 0
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
	if !sp.full && sp.credit >= 1 && !booked && from.Before(span) {
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
	e, c := sp.end.Add(p.window), math.Min(sp.credit+sp.q, 1+sp.q)
	for i := 0; i < ownBuckets && (c < 1 || !e.After(from)); i++ {
		e = e.Add(p.window)
		c = math.Min(c+sp.q, 1+sp.q)
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
	if !p.othersSeen(sp.end) {
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
	sp.credit--
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
	sp.credit++
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
	if s.Throttled {
		// Refused, a regular call or an extra one: the regular calls
		// filled the window.
		sp.full, sp.crowdedAt = true, sp.end
		if regular {
			sp.booked = time.Time{}
			sp.q = math.Max(sp.q*throttleCut, minShare)
			// The limit came before it: a lower bound.
			sp.others += limit
			sp.phases += phase / regularSpan
			p.sparseControl(limit)
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
		sp.credit--
		sp.booked = sp.end
	}
	if used >= limit {
		sp.crowdedAt = sp.end
	}
	sp.first = used <= 1
	sp.others += math.Max(0, used-1)
	sp.phases += phase / regularSpan
	p.sparseControl(limit)
}

// sparseControl cuts q in proportion when the regular calls a window are
// estimated above the limit by more than sparseBand. It must be called
// with p.mu held.
func (p *Pacer) sparseControl(limit float64) {
	sp := &p.sp
	total, ok := p.sparseEstimate()
	if !ok {
		return
	}
	if total > sparseBand*limit {
		sp.q = math.Max(sp.q*math.Pow(limit/total, sparseGain), minShare)
	}
	p.rate = sp.q / p.window.Seconds()
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
// then a random point of the regular span of the next window. It returns
// false when the rule does not apply (see sparseWait for a count that
// showed others). It must be called with p.mu held.
func (p *Pacer) sparseFirst(now time.Time) (time.Time, bool) {
	l := &p.lw
	if p.limit <= 0 || p.limit >= sparseCalls || l.fixed || l.longest <= 2*instantSlack || !p.hasUsed || !l.instant.After(now) || l.instant.Sub(now) > p.window {
		return time.Time{}, false
	}
	if p.used-p.own.counted() >= 1 {
		return time.Time{}, false
	}
	if p.used >= p.limit || p.own.flying > 0 || p.ahead.len() > 0 {
		return p.randomIn(l.instant, l.instant.Add(time.Duration(regularSpan*float64(p.window)))), true
	}
	return latest(now, l.instant.Add(-time.Duration((1-regularSpan)*float64(p.window)))), true
}
