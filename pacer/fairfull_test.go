package pacer

import (
	"testing"
	"time"

	"github.com/ratepace/pace/internal/fakeclock"
)

// clockWindowModel is a fixed window of limit calls on the clock: windows
// start at multiples of window from ownT0, and each counts the calls it
// accepted, a refused call not. Its reset is the time to the end of the
// current window, exact (an epoch in seconds, the windows ending on whole
// seconds), and a refusal's Retry-After the same in whole seconds rounded
// up.
type clockWindowModel struct {
	limit  int
	window time.Duration
	end    time.Time
	used   int
}

func (m *clockWindowModel) call(now time.Time) Signal {
	if m.end.IsZero() {
		m.end = ownT0.Add(m.window)
	}
	for !now.Before(m.end) {
		m.end, m.used = m.end.Add(m.window), 0
	}
	ok := m.used < m.limit
	if ok {
		m.used++
	}
	reset := m.end.Sub(now)
	s := Signal{Limit: int64(m.limit), Remaining: int64(m.limit - m.used), HasRemaining: true, Reset: reset, Throttled: !ok}
	if !ok {
		s.RetryAfter = max(time.Second, (reset + time.Second - 1).Truncate(time.Second))
	}
	return s
}

// joinFixedWindow runs four clients, each with a Pacer of its own (seeds
// seed to seed+3), against a clockWindowModel of 30 calls in 3 s from
// ownT0, starting 1 ms apart, and a fifth (seed seed+4) that joins at the
// turnover of window 5; each call is answered 10 ms after it goes. It
// returns the calls each client had accepted in each twelfth of windows 0
// to 14.
func joinFixedWindow(seed uint64) [][]float64 {
	const rtt = 10 * time.Millisecond
	const w = 3 * time.Second
	m := &clockWindowModel{limit: 30, window: w}
	type client struct {
		c      *fakeclock.Clock
		p      *Pacer
		send   time.Time
		resp   time.Time
		answer Signal
	}
	starts := []time.Time{ownT0, ownT0.Add(time.Millisecond), ownT0.Add(2 * time.Millisecond), ownT0.Add(3 * time.Millisecond), ownT0.Add(5 * w)}
	cs := make([]*client, len(starts))
	for i, start := range starts {
		c := fakeclock.New(ownT0)
		cs[i] = &client{c: c, p: MustNew(WithClock(c), WithSeed(seed+uint64(i))), send: start}
	}
	took := make([][]float64, len(cs))
	for i := range took {
		took[i] = make([]float64, 15*12)
	}
	for {
		var next *client
		at, isSend, who := time.Time{}, false, 0
		for i, cl := range cs {
			if !cl.send.IsZero() && (next == nil || cl.send.Before(at)) {
				next, at, isSend, who = cl, cl.send, true, i
			}
			if !cl.resp.IsZero() && (next == nil || cl.resp.Before(at)) {
				next, at, isSend, who = cl, cl.resp, false, i
			}
		}
		if !at.Before(ownT0.Add(15 * w)) {
			break
		}
		next.c.Set(at)
		if isSend {
			next.answer = m.call(at)
			if !next.answer.Throttled {
				took[who][at.Sub(ownT0)/(w/12)]++
			}
			next.send, next.resp = time.Time{}, at.Add(rtt)
			continue
		}
		next.p.Observe(next.answer)
		next.resp, next.send = time.Time{}, at.Add(next.p.Reserve())
	}
	return took
}

// TestFullFixedWindowLargerShareGivesWay: a client joins four others of a
// 30-call fixed window of 3 s exactly at a turnover, reads the window as
// a quiet key and takes half of it; from then on the window fills to the
// limit every window, the count is what every client's loop reads, and
// every client cut by the same factor: the newcomer kept about twice the
// others' share (Jain's index over windows 6 to 14 0.866 and 0.924 for
// these seeds; now 0.945 and 0.958). A client that calls a few times a
// window and holds more than a quarter of a window filled to the target
// now pays the fairness penalty on the count too.
func TestFullFixedWindowLargerShareGivesWay(t *testing.T) {
	for _, seed := range []uint64{1, 41} {
		if took, j := sharesAfterJoin(seed); j < 0.93 {
			t.Errorf("seed %d: calls accepted in windows 6 to 14 %v, Jain's index %.3f; want at least 0.93", seed, took, j)
		}
	}
}

// sharesAfterJoin returns the calls each client of joinFixedWindow(seed)
// had accepted in windows 6 to 14, and Jain's index of them.
func sharesAfterJoin(seed uint64) ([]float64, float64) {
	took := make([]float64, 5)
	for i, ws := range joinFixedWindow(seed) {
		for _, n := range ws[6*12:] {
			took[i] += n
		}
	}
	var sum, sq float64
	for _, n := range took {
		sum += n
		sq += n * n
	}
	return took, sum * sum / (float64(len(took)) * sq)
}

// TestNewcomerAtTurnoverHeldSooner: the newcomer of
// TestFullFixedWindowLargerShareGivesWay reads its first count, just after
// the turnover, as a quiet key: it bursts, then calls at the whole target,
// and was held to a newcomer's share only a quarter window later (three
// time constants of its estimate of the others). The others, seeing its
// calls come in a rush, cut their rates hard, and it kept the larger share
// for the windows that followed (Jain's index over windows 6 to 14 0.906
// and 0.849 for these seeds; now 0.932 and 0.884; most seeds do not hold
// four fifths of the count at a twelfth of the window and are unchanged).
// Holding four fifths of the count while the others call, it is now held
// from one time constant on.
func TestNewcomerAtTurnoverHeldSooner(t *testing.T) {
	for _, c := range []struct {
		seed uint64
		j    float64
	}{{51, 0.92}, {151, 0.87}} {
		if took, j := sharesAfterJoin(c.seed); j < c.j {
			t.Errorf("seed %d: calls accepted in windows 6 to 14 %v, Jain's index %.3f; want at least %.2f", c.seed, took, j, c.j)
		}
	}
}

// TestRefusedAtItsPointComesEarlier: a client of a 30-call fixed window of
// 3 s whose others fill every window 0.3 s after it begins. Refused, it
// came back after the turnover at its own point, drawn once (or later,
// at a random part of its gap after the Retry-After): a point later than
// the others' rush was refused again, every window (sixteen clients on a
// 30/3 s window: one client sat at the floor rate, refused in nearly
// every window, Jain's index 0.89). Over windows 10 to 59 and eight
// seeds, it got in once. Each refusal now moves the point to a random
// part of the one before, so that it comes before the window is full (16
// times; the Retry-After's jitter still sends it late most of the time).
func TestRefusedAtItsPointComesEarlier(t *testing.T) {
	accepted := 0
	for seed := uint64(1); seed <= 8; seed++ {
		// From window 3 on, the others fill the window at 0.3 s.
		_, n := amongFillers(seed, 0, 300*time.Millisecond, 3, 10)
		accepted += n
	}
	if accepted < 8 {
		t.Errorf("over windows 10 to 59 and eight seeds, the client got in %d times; want at least 8", accepted)
	}
}
