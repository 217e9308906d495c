package pacersim

import (
	"math"
	"net/http"
	"time"

	"github.com/ratepace/pace/pacer"
)

// Policies lists every policy the comparison runs, the pacer first.
var Policies = []struct {
	Name string
	New  NewPolicy
}{
	{"pacer", NewPacer},
	{"naive", NewNaive},
	{"barrier-g1", NewBarrier(1)},
	{"barrier-g2", NewBarrier(2)},
	{"feedback", NewFeedback},
	{"aws-cubic", NewAWSAdaptive},
	{"suggested", NewSuggested},
}

// epoch anchors simulated durations to wall-clock values for the pacer.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// simClock is the pacer's clock inside the simulation: the simulation
// sets now before every call. After is never used, because the adapter
// calls Reserve, not Wait.
type simClock struct{ now time.Duration }

func (c *simClock) Now() time.Time { return epoch.Add(c.now) }
func (c *simClock) After(time.Duration) (<-chan time.Time, func()) {
	return nil, func() {}
}

type pacerPolicy struct {
	clock *simClock
	p     *pacer.Pacer
}

// NewPacer is the policy of package pacer with its defaults (its default
// window, a minute, is also the window of Scenario).
func NewPacer(id int, seed uint64, cfg Config) Policy {
	return NewPacerWith()(id, seed, cfg)
}

// NewPacerWith is NewPacer with extra options, for tuning. It panics on
// an invalid option: a simulation set up wrong has nothing to measure.
func NewPacerWith(opts ...pacer.Option) NewPolicy {
	return func(id int, seed uint64, cfg Config) Policy {
		c := &simClock{}
		all := append([]pacer.Option{pacer.WithClock(c), pacer.WithSeed(seed)}, opts...)
		p, err := pacer.New(all...)
		if err != nil {
			panic(err)
		}
		return &pacerPolicy{clock: c, p: p}
	}
}

func (pp *pacerPolicy) Next(now time.Duration) time.Duration {
	pp.clock.now = now
	return pp.p.Reserve()
}

func (pp *pacerPolicy) Observe(now time.Duration, r Response) {
	pp.clock.now = now
	if r.Header != nil {
		// A server of the zoo: the pacer reads the response as it would
		// over HTTP.
		pp.p.Observe(pacer.FromResponse(&http.Response{StatusCode: r.Status, Header: r.Header}, epoch.Add(now)))
		return
	}
	pp.p.Observe(pacer.Signal{
		Limit:        int64(r.Limit),
		Used:         int64(r.Used),
		HasUsed:      true,
		Remaining:    int64(r.Remaining),
		HasRemaining: true,
		RetryAfter:   r.RetryAfter,
		Throttled:    !r.Accepted,
	})
}

// hold implements "honour Retry-After" for the baselines.
type hold struct{ until time.Duration }

func (h *hold) observe(now time.Duration, r Response) {
	if !r.Accepted && r.RetryAfter > 0 {
		h.until = max(h.until, now+r.RetryAfter)
	}
}

func (h *hold) delay(now time.Duration) time.Duration { return max(0, h.until-now) }

// naive sends as fast as it can and honours Retry-After.
type naive struct{ h hold }

// NewNaive is the naive policy: no pacing; after a refusal, wait
// Retry-After.
func NewNaive(int, uint64, Config) Policy { return &naive{} }

func (n *naive) Next(now time.Duration) time.Duration  { return n.h.delay(now) }
func (n *naive) Observe(now time.Duration, r Response) { n.h.observe(now, r) }

// barrier is the fixed barrier method: after each response, the next
// call waits W / max(1, limit − used)^greedy.
type barrier struct {
	greedy float64
	window time.Duration
	next   time.Duration
	h      hold
}

// NewBarrier returns the barrier method with the given greedy exponent (it
// also honours Retry-After).
func NewBarrier(greedy float64) NewPolicy {
	return func(_ int, _ uint64, cfg Config) Policy {
		return &barrier{greedy: greedy, window: cfg.Window}
	}
}

func (b *barrier) Next(now time.Duration) time.Duration {
	return max(b.next-now, b.h.delay(now), 0)
}

func (b *barrier) Observe(now time.Duration, r Response) {
	b.h.observe(now, r)
	head := math.Max(1, float64(r.Limit-r.Used))
	b.next = now + time.Duration(float64(b.window)/math.Pow(head, b.greedy))
}

// feedback is a feedback controller: local and external rate estimates (the
// maximum of a long-term and a short-term one each, the local one inflated
// by 10% for fairness), compared with a target band of 80–90% of the limit;
// the gap between calls is scaled by 1.1 above the band and 0.9 below it.
type feedback struct {
	window   time.Duration
	sends    []time.Duration // own calls within the window
	delta    time.Duration
	prevUsed int
	prevAt   time.Duration
	havePrev bool
	lastSend time.Duration
	h        hold
	limit    int
	used     int

	shortExternal float64
}

// NewFeedback returns the feedback controller (it also honours
// Retry-After).
func NewFeedback(_ int, _ uint64, cfg Config) Policy {
	return &feedback{window: cfg.Window, delta: cfg.Window / 120, lastSend: -time.Hour}
}

func (f *feedback) Next(now time.Duration) time.Duration {
	cut := now - f.window
	for len(f.sends) > 0 && f.sends[0] <= cut {
		f.sends = f.sends[1:]
	}
	if f.limit > 0 {
		w := f.window.Seconds()
		var local float64
		if n := len(f.sends); n >= 2 {
			long := float64(n-1) / (f.sends[n-1] - f.sends[0]).Seconds()
			short := 1 / (f.sends[n-1] - f.sends[n-2]).Seconds()
			local = math.Max(long, short)
		}
		local *= 1.1
		external := math.Max(0, float64(f.used-len(f.sends))) / w
		if f.havePrev && now > f.prevAt {
			// the short-term external rate comes from the change in used
			// since the previous response (set in Observe)
			external = math.Max(external, f.shortExternal)
		}
		total := local + external
		limit := float64(f.limit) / w
		switch {
		case total > 0.9*limit:
			f.delta = time.Duration(float64(f.delta) * 1.1)
		case total < 0.8*limit:
			f.delta = time.Duration(float64(f.delta) * 0.9)
		}
		f.delta = min(max(f.delta, time.Millisecond), f.window)
	}
	at := max(now, f.lastSend+f.delta, f.h.until)
	f.lastSend = at
	f.sends = append(f.sends, at)
	return at - now
}

func (f *feedback) Observe(now time.Duration, r Response) {
	f.h.observe(now, r)
	f.limit = r.Limit
	if f.havePrev && now > f.prevAt {
		f.shortExternal = math.Max(0, float64(r.Used-f.prevUsed-1)) / (now - f.prevAt).Seconds()
	}
	f.used = r.Used
	f.prevUsed, f.prevAt, f.havePrev = r.Used, now, true
}
