package pacersim

import (
	"math/rand/v2"
	"time"
)

// Validation lists the server kinds the pacer is only measured on, never
// tuned on (docs/pacer.md, "Tuning and validation"): behaviours the zoo
// lacks. Each is small (windows of 2 to 6 s) so that a run takes little
// time to simulate.
var Validation = []Kind{
	{Name: "limit 30/10/30 (header says)", New: slidingLog(false), LimitAt: swingingLimit(3 * time.Second),
		Format: Format{Reset: ResetDelta}, Window: 3 * time.Second, Limit: 30, RTT: 5 * time.Millisecond},
	{Name: "limit 30/10/30 (header silent)", New: hiddenLimit(30, slidingLog(false)), LimitAt: swingingLimit(3 * time.Second),
		Format: Format{Reset: ResetDelta}, Window: 3 * time.Second, Limit: 30, RTT: 5 * time.Millisecond},
	{Name: "3 replicas, fixed window (clock) each", New: replicas(3, fixedWindow(false, false)),
		Format: Format{Reset: ResetEpoch}, Window: 2 * time.Second, Limit: 60, RTT: 5 * time.Millisecond},
	{Name: "secondary sliding log under a 5000/h quota", New: secondary(5000, time.Hour),
		Format: Format{Reset: ResetEpoch}, Window: 2 * time.Second, Limit: 20, RTT: 5 * time.Millisecond},
	{Name: "sliding counter, demand 3 windows on, 2 off", New: slidingCounter(false), Demand: onOff(6*time.Second, 3, 2),
		Format: Format{Reset: ResetEpoch}, Window: 6 * time.Second, Limit: 60, RTT: 10 * time.Millisecond},
	{Name: "sliding log, clients start together", New: slidingLog(false), Together: true,
		Format: Format{Fields: IETF}, Window: 4 * time.Second, Limit: 80, RTT: 5 * time.Millisecond},
}

// swingingLimit is 30 calls a window, 10 from window 4 to 8, 30 from 8 to
// 12, and so on: the seed's limit that moves with the server's load.
func swingingLimit(w time.Duration) func(time.Duration) int {
	return func(t time.Duration) int {
		if (t/w/4)%2 == 1 {
			return 10
		}
		return 30
	}
}

// onOff is demand that comes and goes: every client wants to call for on
// windows, then not for off windows, all at the same times.
func onOff(w time.Duration, on, off int) func(int, time.Duration) time.Duration {
	period := time.Duration(on+off) * w
	return func(_ int, t time.Duration) time.Duration {
		if t%period < time.Duration(on)*w {
			return t
		}
		return t - t%period + period
	}
}

// hidden applies the limit it is given but reports a nominal one, as a
// server whose limit moves with its load while its headers keep saying the
// advertised figure.
type hidden struct {
	alg     Algorithm
	nominal int
}

func hiddenLimit(nominal int, alg func(time.Duration) Algorithm) func(time.Duration) Algorithm {
	return func(w time.Duration) Algorithm { return &hidden{alg: alg(w), nominal: nominal} }
}

func (h *hidden) Decide(at time.Duration, limit int) Decision {
	d := h.alg.Decide(at, limit)
	d.Limit = h.nominal
	d.Remaining = max(0, h.nominal-d.Used)
	return d
}

// balanced is n replicas behind a balancer that sends each call to one at
// random; each counts its own calls against limit/n and reports its own
// count, so that the count a client reads jumps between n values.
type balanced struct {
	each []Algorithm
	rng  *rand.Rand
}

func replicas(n int, alg func(time.Duration) Algorithm) func(time.Duration) Algorithm {
	return func(w time.Duration) Algorithm {
		b := &balanced{rng: rand.New(rand.NewPCG(uint64(n), 0xba1))}
		for range n {
			b.each = append(b.each, alg(w))
		}
		return b
	}
}

func (b *balanced) Decide(at time.Duration, limit int) Decision {
	return b.each[b.rng.IntN(len(b.each))].Decide(at, limit/len(b.each))
}

// second is a binding secondary limit (a sliding log of the run's limit
// per window) under a primary quota that never binds: its headers describe
// the quota, and the secondary shows only as a 429 with a Retry-After.
type second struct {
	quota      *FixedWindow
	quotaLimit int
	burst      *Server
}

func secondary(quota int, period time.Duration) func(time.Duration) Algorithm {
	return func(w time.Duration) Algorithm {
		return &second{quota: &FixedWindow{Window: period, FirstCall: true}, quotaLimit: quota, burst: &Server{Window: w}}
	}
}

func (s *second) Decide(at time.Duration, limit int) Decision {
	b := s.burst.Decide(at, limit)
	d := s.quota.Decide(at, s.quotaLimit)
	if !b.Accepted {
		d.Accepted, d.RetryAfter = false, b.RetryAfter
	}
	return d
}
