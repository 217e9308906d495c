package pacersim

import (
	"math"
	"time"
)

// suggested is the simplest adaptive baseline, as measured here: the barrier
// (see barrier) with greedy = 1 (gap W / (g·(L − U))) whose gain g is
// adjusted by AIMD once per W/60 (additive increase while the count is below
// the target and the client waits on the pacer, exponential decrease while
// above), an initial burst on an idle key, gaps bounded by half a window,
// and Retry-After honoured (with the gain cut by 0.7). Its proportional
// response to the count, which integrates a whole window, is what makes it
// ring with a period of about a window.
type suggested struct {
	window   time.Duration
	limit    float64
	used     float64
	have     bool
	gain     float64
	ctlAt    time.Duration
	last     time.Duration
	waited   time.Duration
	h        hold
	inflight float64
}

// Gains of the suggested algorithm: the best pair found in a small sweep
// (1 per window up, e^-1 per window down), target 0.93, burst below a
// quarter of the target.
const (
	sugIncrease = 1.0
	sugDecrease = 1.0
	sugTarget   = 0.93
)

// NewSuggested returns the suggested baseline (see suggested).
func NewSuggested(_ int, _ uint64, cfg Config) Policy {
	return &suggested{window: cfg.Window, gain: 1, ctlAt: -1}
}

func (s *suggested) control(now time.Duration) {
	period := s.window / 60
	if s.ctlAt < 0 {
		s.ctlAt = now
		return
	}
	for now >= s.ctlAt+period {
		if s.have && s.limit > 0 {
			switch r := s.used / s.limit; {
			case r > 1: // the limit moved; the count drains by itself
			case r > sugTarget:
				s.gain = math.Max(0.01, s.gain*math.Exp(-sugDecrease/60))
			case s.waited >= s.ctlAt:
				s.gain = math.Min(100, s.gain+sugIncrease/60)
			}
		}
		s.ctlAt += period
	}
}

func (s *suggested) Next(now time.Duration) time.Duration {
	s.control(now)
	var gap time.Duration
	if s.have && s.limit > 0 {
		u := s.used + s.inflight
		if u >= 0.25*sugTarget*s.limit {
			gap = s.window / 2
			if head := s.limit - u; head > 0 {
				gap = min(gap, time.Duration(float64(s.window)/(s.gain*head)))
			}
		}
	}
	at := max(now, s.last+gap, s.h.until)
	if at > now {
		s.waited = at
	}
	s.last = at
	s.inflight = 1
	return at - now
}

func (s *suggested) Observe(now time.Duration, r Response) {
	s.control(now)
	s.h.observe(now, r)
	s.limit, s.used, s.have, s.inflight = float64(r.Limit), float64(r.Used), true, 0
	if !r.Accepted {
		s.gain = math.Max(0.01, s.gain*0.7)
	}
}
