package pacer

import (
	"testing"
	"time"

	"github.com/ratepace/pace/internal/fakeclock"
)

// crowdLog is a sliding log of limit calls in window: a call is accepted
// while fewer than limit accepted calls came within the window before it,
// and a refused call is not counted. Its responses carry the limit, the
// count, the window (as a policy does) and, on a refusal, a Retry-After of
// the whole seconds, rounded up, until the oldest call leaves.
type crowdLog struct {
	limit  int
	window time.Duration
	calls  []time.Time
}

func (m *crowdLog) call(now time.Time) Signal {
	for len(m.calls) > 0 && !m.calls[0].Add(m.window).After(now) {
		m.calls = m.calls[1:]
	}
	ok := len(m.calls) < m.limit
	if ok {
		m.calls = append(m.calls, now)
	}
	s := Signal{Limit: int64(m.limit), Used: int64(len(m.calls)), HasUsed: true, Window: m.window, Throttled: !ok}
	if !ok {
		wait := m.calls[0].Add(m.window).Sub(now)
		s.RetryAfter = max(time.Second, (wait + time.Second - 1).Truncate(time.Second))
	}
	return s
}

// crowdStart runs n clients, each with a Pacer of its own (seeds seed to
// seed+n-1), against a crowdLog of 50 calls in 5 s, the clients starting
// 1 ms apart from ownT0, each call answered 10 ms after it goes, for two
// windows. It returns the calls accepted and refused.
func crowdStart(n int, seed uint64) (accepted, refused int) {
	const rtt = 10 * time.Millisecond
	const w = 5 * time.Second
	m := &crowdLog{limit: 50, window: w}
	type client struct {
		c          *fakeclock.Clock
		p          *Pacer
		send, resp time.Time
		answer     Signal
	}
	cs := make([]*client, n)
	for i := range cs {
		c := fakeclock.New(ownT0)
		cs[i] = &client{c: c, p: New(WithClock(c), WithSeed(seed+uint64(i))), send: ownT0.Add(time.Duration(i) * time.Millisecond)}
	}
	for {
		var next *client
		var at time.Time
		isSend := false
		for _, cl := range cs {
			if !cl.send.IsZero() && (next == nil || cl.send.Before(at)) {
				next, at, isSend = cl, cl.send, true
			}
			if !cl.resp.IsZero() && (next == nil || cl.resp.Before(at)) {
				next, at, isSend = cl, cl.resp, false
			}
		}
		if !at.Before(ownT0.Add(2 * w)) {
			return accepted, refused
		}
		next.c.Set(at)
		if isSend {
			next.answer = m.call(at)
			if next.answer.Throttled {
				refused++
			} else {
				accepted++
			}
			next.send, next.resp = time.Time{}, at.Add(rtt)
			continue
		}
		next.p.Observe(next.answer)
		next.resp, next.send = time.Time{}, at.Add(next.p.Reserve())
	}
}

// TestCrowdedStartHeldBack: sixteen clients start together, 1 ms apart,
// on a quiet sliding log of 50 calls in 5 s. Each read its first count as
// a quiet key and started at the whole target: the window was full a
// third of a second in, the clients were refused there, and all came back
// together when the first calls left (seeds 1 to 10: 23 to 27 refusals in
// the first two windows, 251 in all). The count reaches half the target
// within a twentieth of a window: each client now calls at its share of
// the headroom until the first calls leave, and comes back at its own
// point after that (13 to 17, 154 in all). Four clients, whom the loop
// brings down in time, and a lone client are not held (4 refusals each
// for four clients, none for one, as before).
func TestCrowdedStartHeldBack(t *testing.T) {
	total := 0
	for seed := uint64(1); seed <= 10; seed++ {
		acc, ref := crowdStart(16, seed)
		total += ref
		if acc < 95 {
			t.Errorf("seed %d, 16 clients: %d calls accepted in two windows; want at least 95", seed, acc)
		}
		if acc, ref := crowdStart(1, seed); ref > 0 || acc < 95 {
			t.Errorf("seed %d, 1 client: %d calls accepted and %d refused in two windows; want at least 95 and none", seed, acc, ref)
		}
	}
	if total > 200 {
		t.Errorf("seeds 1 to 10, 16 clients: %d calls refused in the first two windows; want at most 200", total)
	}
}
