package pacer

import (
	"context"
	"hash/fnv"
	"slices"
	"time"
)

// costKey is the context key of a call's cost.
type costKey struct{}

// WithCost returns a copy of ctx that says the call it is the context of
// costs tokens tokens, for a Pacer that paces a limit of tokens beside one
// of requests (an LLM API's, see ObserveLimits): Wait, and so Transport,
// plan the call with it, and the counts the server reports correct the
// plan afterwards. Every call costs one of each limit counted in requests
// whatever its context; without WithCost, it costs zero tokens. A
// negative tokens is taken as zero.
func WithCost(ctx context.Context, tokens int) context.Context {
	return context.WithValue(ctx, costKey{}, cost{tokens: clampTokens(tokens)})
}

// cost is what one call costs of every limit.
type cost struct {
	tokens int64
}

func clampTokens(n int) int64 {
	return min(max(int64(n), 0), maxCount)
}

// costOf returns the cost ctx carries (see WithCost).
func costOf(ctx context.Context) cost {
	c, _ := ctx.Value(costKey{}).(cost)
	return c
}

// in returns the call's cost in a limit counted in u.
func (c cost) in(u Unit) int64 {
	switch u {
	case Requests:
		return 1
	case Tokens:
		return c.tokens
	}
	return 0 // input or output tokens alone: see InputTokens
}

// limits is what a Pacer keeps of the limits beyond its own: one Pacer
// per further limit a response reported (see ObserveLimits), each
// learning its limit with the machinery of a single one, from calls
// weighted by their cost in its unit. It is created on the first response
// that reports several limits, or one not counted in requests, and
// used under the owner's lock; each child is locked after the owner,
// never before.
type limits struct {
	unit     Unit   // what the owner's own limit counts
	name     string // the owner's own limit's name (see Signal.Name)
	children []*Pacer
	names    []string
}

// child returns the Pacer of the limit named name, counted in u,
// creating it on first sight (nil past maxLimits).
func (p *Pacer) child(name string, u Unit) *Pacer {
	for i, n := range p.lim.names {
		if n == name {
			return p.lim.children[i]
		}
	}
	if len(p.lim.children) >= maxLimits {
		return nil
	}
	cfg := p.cfg
	h := fnv.New64a()
	h.Write([]byte(name))
	cfg.seed = p.rng.Uint64() ^ h.Sum64()
	cfg.seeded = true
	c := newPacer(cfg)
	c.lim = &limits{unit: u} // never children of its own
	p.lim.children = append(p.lim.children, c)
	p.lim.names = append(p.lim.names, name)
	return c
}

// planLocked returns the earliest time a call of cost c may go: the
// latest of every limit's own plan for it, whichever binds. It must be
// called with p.mu held; it locks each child in turn.
func (p *Pacer) planLocked(now time.Time, c cost) time.Time {
	slot := p.slotLocked(now, p.weightOf(c))
	for _, ch := range p.lim.children {
		ch.mu.Lock()
		t := ch.slotLocked(ch.advanceLocked(now), ch.weightOf(c))
		ch.mu.Unlock()
		slot = latest(slot, t)
	}
	return slot
}

// markBinding records, in every limit whose own plan for a call of cost c
// is slot (the one that binds), that a caller waits for it: the control
// loop grows the rate only of a limit that calls wait for (see control).
// It must be called with p.mu held.
func (p *Pacer) markBinding(now, slot time.Time, c cost) {
	if t := p.slotLocked(now, p.weightOf(c)); !t.Before(slot) {
		p.markWaited(slot)
	}
	for _, ch := range p.lim.children {
		ch.mu.Lock()
		if t := ch.slotLocked(ch.advanceLocked(now), ch.weightOf(c)); !t.Before(slot) {
			ch.markWaited(slot)
		}
		ch.mu.Unlock()
	}
}

// markWaited records that a caller waits for slot, as the queue does for
// its callers (see waited). It must be called with p.mu held.
func (p *Pacer) markWaited(slot time.Time) {
	if slot.After(p.waitedUntil) && p.rateBound(slot) {
		p.waitedUntil = slot
	}
}

// bookAllLocked books slot for a call of cost c in every limit. It must be
// called with p.mu held.
func (p *Pacer) bookAllLocked(now, slot time.Time, c cost) {
	p.bookLocked(now, slot, p.weightOf(c))
	for _, ch := range p.lim.children {
		ch.mu.Lock()
		ch.bookLocked(ch.advanceLocked(now), slot, ch.weightOf(c))
		ch.mu.Unlock()
	}
}

// weightOf is a call's weight in p's own limit.
func (p *Pacer) weightOf(c cost) int64 { return c.in(p.lim.unit) }

// waitLimits is Wait for a Pacer of several limits, for a call of cost c.
// A caller sleeps until the latest of the limits' plans, then plans again,
// and goes once no limit holds it: callers that wake together go one by
// one, each planned after the one before.
func (p *Pacer) waitLimits(ctx context.Context, c cost) error {
	for {
		p.mu.Lock()
		now := p.nowLocked()
		slot := p.planLocked(now, c)
		if !slot.After(now) {
			p.bookAllLocked(now, slot, c)
			p.mu.Unlock()
			return nil
		}
		if beyondDeadline(ctx, slot) {
			p.mu.Unlock()
			return errWouldExceedDeadline()
		}
		p.markBinding(now, slot, c)
		p.mu.Unlock()
		ch, stop := p.clock.After(slot.Sub(now))
		select {
		case <-ch:
		case <-ctx.Done():
			stop()
			return ctx.Err()
		}
	}
}

// reserveLimitsLocked books a call of cost c at the latest of the limits'
// plans at now, and returns its slot. It must be called with p.mu held.
func (p *Pacer) reserveLimitsLocked(now time.Time, c cost) time.Time {
	slot := p.planLocked(now, c)
	if slot.After(now) {
		p.markBinding(now, slot, c)
	}
	p.bookAllLocked(now, slot, c)
	return slot
}

// Reservation is one call booked by ReserveN: when it may go, and what
// to tell the Pacer once it has. The zero Reservation (and one of a nil
// Pacer) has no delay, and its Settle does nothing.
type Reservation struct {
	p      *Pacer
	delay  time.Duration
	tokens int64
}

// ReserveN books the next call, which costs tokens tokens (see WithCost),
// at now, and returns its Reservation. It is Reserve for a call of a
// known cost: it never blocks, the slot does not move, and a now before
// one the Pacer has seen is taken as that one. A negative tokens is taken
// as zero.
func (p *Pacer) ReserveN(now time.Time, tokens int) Reservation {
	c := cost{tokens: clampTokens(tokens)}
	p.mu.Lock()
	defer p.mu.Unlock()
	now = p.advanceLocked(now)
	var slot time.Time
	if p.lim != nil {
		slot = p.reserveLimitsLocked(now, c)
	} else {
		slot = p.slotLocked(now, 1)
		p.bookLocked(now, slot, 1)
	}
	return Reservation{p: p, delay: slot.Sub(now), tokens: c.tokens}
}

// Delay is how long after the now of ReserveN the call may go (zero: at
// once).
func (r Reservation) Delay() time.Duration { return r.delay }

// Settle is ObserveLimits for the reserved call, at now: ls is what its
// response said (LimitsFromResponse), and tokens what it cost in fact
// (the usage the response body reports), which replaces the estimate in
// the Pacer's record of its own calls; a negative tokens keeps the
// estimate. Call it once per Reservation, after the call.
func (r Reservation) Settle(now time.Time, ls []Signal, tokens int) {
	if r.p == nil {
		return
	}
	c := cost{tokens: r.tokens}
	if tokens >= 0 {
		c.tokens = clampTokens(tokens)
	}
	first, more := splitLimits(ls)
	r.p.settle(now, first, more, &c)
}

// ObserveLimits is ObserveAt for a response that reported several limits
// (ParseLimits, LimitsFromResponse): each limit is learned on its own, by
// name, from calls weighted by their cost in its unit (see WithCost), and
// the Pacer paces on whichever binds. The first limit it is given is its
// own; each other name gets a limit of its own on first sight, up to
// eight. An empty ls is a call that said nothing.
func (p *Pacer) ObserveLimits(now time.Time, ls []Signal) {
	first, more := splitLimits(ls)
	p.settle(now, first, more, nil)
}

func splitLimits(ls []Signal) (Signal, []Signal) {
	if len(ls) == 0 {
		return Signal{}, nil
	}
	return ls[0], ls[1:]
}

// ownResource reports whether s is of the resource p learns (see
// Signal.Resource), adopting s's when p has none yet and s carries
// counts. It must be called with p.mu held.
func (p *Pacer) ownResource(s Signal) bool {
	if s.Resource == "" {
		return true
	}
	if p.resource == "" {
		if s.Limit > 0 || s.HasUsed || s.HasRemaining {
			p.resource = s.Resource
		}
		return true
	}
	return s.Resource == p.resource
}

// observeLimitsLocked hands each limit of a response (first, then more)
// to its Pacer (p itself for p's own limit, known by its name), and
// returns what p's own limit observes, with the weight of the call in it
// (negative: its estimate). A refusal is charged to the limits it found
// spent (remaining below the call's cost in them), or to all of them when
// none shows: each of the others takes the call as one that was not
// counted, and keeps its rate. It must be called with p.mu held.
func (p *Pacer) observeLimitsLocked(now time.Time, first Signal, more []Signal, used *cost) (Signal, int64) {
	if p.lim == nil {
		p.lim = &limits{unit: first.Unit, name: first.Name}
	}
	n := 1 + len(more)
	at := func(i int) Signal {
		l := first
		if i > 0 {
			l = more[i-1].clean()
		}
		if l.Name != "" && l.Window <= 0 {
			// A family's limit is per minute and writes no window, and
			// its reset is the time until it is full again, not a
			// window's end: the window is the configured one.
			l.Reset, l.HasReset = 0, false
			l.Window = p.cfg.window
		}
		return l
	}
	// The response's refusal and wait, whichever limit carried them.
	var resp Signal
	for i := 0; i < n; i++ {
		l := at(i)
		resp.Throttled = resp.Throttled || l.Throttled
		resp.RetryAfter = max(resp.RetryAfter, l.RetryAfter)
	}
	known := func(q *Pacer, l Signal) {
		if l.bucket && !q.lw.bucket {
			// Documented as a token bucket: its counts are the tokens
			// missing, drained at the limit per window.
			q.lw.bucket = true
		}
	}
	target := func(l Signal) *Pacer {
		if l.Name == p.lim.name {
			return p
		}
		return p.child(l.Name, l.Unit)
	}
	weight := func(q *Pacer) int64 {
		if used != nil {
			return q.weightOf(*used)
		}
		return -1
	}
	estimate := func(q *Pacer) int64 {
		if used != nil {
			return q.weightOf(*used)
		}
		if q.own.flyN > 0 {
			return q.own.flying / q.own.flyN
		}
		return q.weightOf(cost{})
	}
	spent := func(l Signal, w int64) bool {
		return l.HasRemaining && float64(l.Remaining) < float64(max(w, 1))
	}
	blamed := false
	if resp.Throttled {
		for i := 0; i < n; i++ {
			l := at(i)
			q := target(l)
			if q == nil {
				continue
			}
			if q != p {
				q.mu.Lock()
			}
			blamed = blamed || spent(l, estimate(q))
			if q != p {
				q.mu.Unlock()
			}
		}
	}
	own, ownW, ownSeen := Signal{}, weight(p), false
	seen := make([]*Pacer, 0, n)
	for i := 0; i < n; i++ {
		l := at(i)
		q := target(l)
		if q == nil || slices.Contains(seen, q) {
			continue // past maxLimits, or a name given twice
		}
		seen = append(seen, q)
		if q == p {
			known(p, l)
			own, ownW, ownSeen = charge(resp, l, weight(p), estimate(p), blamed, spent)
			continue
		}
		q.mu.Lock()
		known(q, l)
		l, w, _ := charge(resp, l, weight(q), estimate(q), blamed, spent)
		q.observeLocked(q.advanceLocked(now), l, w)
		q.mu.Unlock()
	}
	if !ownSeen {
		// The response did not report p's own limit: a call that
		// completed, and the response's wait.
		own, ownW, _ = charge(resp, Signal{}, ownW, estimate(p), blamed, spent)
	}
	return own, ownW
}

// charge returns the signal one limit l of a response observes, and the
// weight of the call in it (w), resp holding the response's refusal and
// wait: a refusal it is not blamed for (another limit was spent) is a
// call that was not counted, with no refusal.
func charge(resp, l Signal, w, est int64, blamed bool, spent func(Signal, int64) bool) (Signal, int64, bool) {
	l.Throttled, l.RetryAfter = resp.Throttled, resp.RetryAfter
	if !resp.Throttled || !blamed || spent(l, est) {
		return l, w, true
	}
	l.Throttled, l.RetryAfter = false, 0
	return l, 0, true
}
