package pacersim

import (
	"math"
	"time"
)

// Algorithm is a server's rule for one key: it decides each call as it
// arrives and says what the server would report about the key after it.
// Calls must arrive in time order; at is the time since the start of the
// run, which starts on a boundary of every window the zoo uses (so that
// windows aligned to the clock are aligned to the run as well).
// Implementations are not safe for concurrent use.
type Algorithm interface {
	Decide(at time.Duration, limit int) Decision
}

var (
	_ Algorithm = (*Server)(nil)
	_ Algorithm = (*SlidingCounter)(nil)
	_ Algorithm = (*FixedWindow)(nil)
	_ Algorithm = (*TokenBucket)(nil)
)

// SlidingCounter is the sliding-window counter: two fixed windows aligned
// to the clock, the previous one weighted by the part of it still inside
// a sliding window ending now, so that the estimate is
// prev·(1 − elapsed/W) + cur. A call is accepted while that estimate plus
// the call stays within the limit. The reset it reports is the end of the
// current fixed window, as most implementations do. With CountRefused a
// refused call is counted as well (a client that keeps calling keeps the
// estimate up). The zero value is not usable: set Window.
type SlidingCounter struct {
	Window       time.Duration
	CountRefused bool

	start     time.Duration // start of the current fixed window
	prev, cur int
}

func (s *SlidingCounter) roll(at time.Duration) {
	start := at - at%s.Window
	switch {
	case start == s.start:
	case start == s.start+s.Window:
		s.prev, s.cur = s.cur, 0
	default:
		s.prev, s.cur = 0, 0
	}
	s.start = start
}

// estimate is the weighted count at at, within the current fixed window.
func (s *SlidingCounter) estimate(at time.Duration) float64 {
	frac := 1 - float64(at-s.start)/float64(s.Window)
	return float64(s.prev)*frac + float64(s.cur)
}

// Decide decides a call arriving at at under limit.
func (s *SlidingCounter) Decide(at time.Duration, limit int) Decision {
	s.roll(at)
	d := Decision{At: at, Limit: limit}
	if s.estimate(at)+1 <= float64(limit) {
		s.cur++
		d.Accepted = true
	} else {
		if s.CountRefused {
			s.cur++
		}
		d.RetryAfter = s.retryAfter(at, limit)
	}
	est := s.estimate(at)
	d.Used = int(math.Ceil(est - 1e-9))
	d.Remaining = max(0, int(math.Floor(float64(limit)-est+1e-9)))
	d.Reset = s.start + s.Window - at
	return d
}

// retryAfter is how long until a call would be accepted: while the
// previous window's weight fades within the current one, or in the next.
func (s *SlidingCounter) retryAfter(at time.Duration, limit int) time.Duration {
	w := float64(s.Window)
	need := float64(limit) - 1 // the estimate must fall to this
	if need < 0 {
		return s.start + 2*s.Window - at
	}
	if s.prev > 0 && float64(s.cur) <= need {
		// prev·(1 − e/W) + cur = need
		e := (1 - (need-float64(s.cur))/float64(s.prev)) * w
		if t := s.start + time.Duration(math.Ceil(e)); t < s.start+s.Window {
			return max(t-at, 0)
		}
	}
	// In the next window the current count becomes the previous one.
	next := s.start + s.Window
	e := 0.0
	if float64(s.cur) > need {
		e = (1 - need/float64(s.cur)) * w
	}
	return next + time.Duration(math.Ceil(e)) - at
}

// FixedWindow is the fixed-window counter: at most limit calls per window,
// the count starting from zero at each window's start. The windows are
// aligned to the clock (multiples of Window) or, with FirstCall, start at
// the first call after the previous window ended (a counter that expires
// Window after the call that created it). With CountRefused refused calls
// are counted too (increment, then compare), so the reported count can
// exceed the limit. The reset it reports is the end of the window; a
// refusal's Retry-After is the same. The zero value is not usable: set
// Window.
type FixedWindow struct {
	Window       time.Duration
	FirstCall    bool
	CountRefused bool

	start   time.Duration
	count   int
	started bool
}

// Decide decides a call arriving at at under limit.
func (f *FixedWindow) Decide(at time.Duration, limit int) Decision {
	start := at - at%f.Window
	if f.FirstCall {
		start = f.start
		if !f.started || at >= f.start+f.Window {
			start = at
		}
	}
	if !f.started || start != f.start {
		f.start, f.count, f.started = start, 0, true
	}
	d := Decision{At: at, Limit: limit}
	if f.count < limit {
		f.count++
		d.Accepted = true
	} else if f.CountRefused {
		f.count++
	}
	d.Used = f.count
	d.Remaining = max(0, limit-f.count)
	d.Reset = f.start + f.Window - at
	if !d.Accepted {
		d.RetryAfter = d.Reset
	}
	return d
}

// TokenBucket is GCRA, the token bucket in one number: a bucket of limit
// tokens refilled at limit per Window, full at the start. It keeps the
// theoretical arrival time tat; a call at t is accepted when
// t ≥ tat + Window/limit − Window, which moves tat one interval on. The
// reset it reports is the time until the bucket is full again (tat − t),
// or, with ResetNext, until the next token comes. A refused call is not
// counted. The zero value is not usable: set Window.
type TokenBucket struct {
	Window    time.Duration
	ResetNext bool

	tat time.Duration
}

// Decide decides a call arriving at at under limit.
func (b *TokenBucket) Decide(at time.Duration, limit int) Decision {
	d := Decision{At: at, Limit: limit}
	if limit <= 0 {
		d.RetryAfter = b.Window
		return d
	}
	interval := b.Window / time.Duration(limit)
	tat := max(b.tat, at)
	if allowAt := tat + interval - b.Window; at >= allowAt {
		b.tat = tat + interval
		d.Accepted = true
	} else {
		d.RetryAfter = allowAt - at
	}
	tat = max(b.tat, at)
	// Tokens left: how many intervals the bucket is below its top.
	d.Remaining = max(0, min(limit, int((b.Window-(tat-at))/interval)))
	d.Used = limit - d.Remaining
	d.Reset = tat - at
	if b.ResetNext {
		// Until the bucket holds one token more than now.
		d.Reset = (tat - at) % interval
		if d.Reset == 0 && tat > at {
			d.Reset = interval
		}
	}
	return d
}
