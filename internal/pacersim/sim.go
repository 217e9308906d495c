// Package pacersim is a deterministic, discrete-event simulation of
// greedy clients sharing one rate-limited API key, used to measure the
// pacer against baselines.
package pacersim

import (
	"container/heap"
	"math"
	"math/rand/v2"
	"net/http"
	"time"
)

// Response is what the simulated server tells a client about one call.
type Response struct {
	Accepted   bool
	Limit      int
	Used       int           // calls counted in the window after this one
	Remaining  int           // max(0, Limit-Used)
	RetryAfter time.Duration // whole seconds, set on refusals

	// Status and Header are the HTTP response, on the server kinds of
	// the zoo (Config.Kind); nil Header otherwise.
	Status int
	Header http.Header
}

// Policy is one client's pacing strategy. The simulation calls Next after
// every response (and once at start) and sends the next call after the
// returned delay; Observe is called with each response. now is the time
// since the start of the run.
type Policy interface {
	Next(now time.Duration) time.Duration
	Observe(now time.Duration, r Response)
}

// NewPolicy builds the policy of client id; seed is derived from the run's
// seed and the id.
type NewPolicy func(id int, seed uint64, cfg Config) Policy

// Config describes one run.
type Config struct {
	Seed     uint64
	Clients  int           // clients present from the start
	Join     time.Duration // when one more client joins; zero for none
	Leave    time.Duration // when client 0 leaves; zero for none
	Duration time.Duration
	Window   time.Duration
	RTT      time.Duration // mean round trip; each is drawn within ±10%
	// StartSpread spreads the clients present from the start over
	// [0, StartSpread).
	StartSpread time.Duration
	// Limit returns the server's limit (calls per Window) at t.
	Limit func(t time.Duration) int
	// Kind is the server's algorithm and header format; nil is the
	// sliding log of Scenario, which reports its state as plain numbers.
	Kind *Kind
	// Demand, when set, is the earliest time at or after t at which
	// client wants to call: a client without demand sends nothing and
	// asks its policy nothing until then. Nil is a greedy client.
	Demand func(client int, t time.Duration) time.Duration
}

// Scenario returns the reference scenario: a 30-minute run, a 60 s sliding
// window, 120 calls a minute dropping to 40 during minutes 10–20, 0.2 s
// round trips. With churn, one client joins at minute 5 and one leaves at
// minute 25.
func Scenario(clients int, churn bool, seed uint64) Config {
	c := Config{
		Seed:     seed,
		Clients:  clients,
		Duration: 30 * time.Minute,
		Window:   time.Minute,
		RTT:      200 * time.Millisecond,
		Limit:    StepLimit,

		StartSpread: time.Second,
	}
	if churn {
		c.Join, c.Leave = 5*time.Minute, 25*time.Minute
	}
	return c
}

// StepLimit is the limit of the reference scenario: 120, or 40 during
// minutes 10 to 20.
func StepLimit(t time.Duration) int {
	if t >= 10*time.Minute && t < 20*time.Minute {
		return 40
	}
	return 120
}

// Decision is one call as the server decided it.
type Decision struct {
	At       time.Duration
	Client   int
	Accepted bool
	Used     int
	Limit    int
	// Remaining is what the server reports as left (limit − used for a
	// counter, the whole tokens for a bucket).
	Remaining int
	// Reset is the time until the algorithm's reset (see each algorithm).
	Reset time.Duration
	// RetryAfter is the time until a call would be accepted, on refusals
	// (whole seconds for Server; formats round the others as real
	// servers do).
	RetryAfter time.Duration
}

// Trace is everything a run produced, in time order.
type Trace struct {
	Config    Config
	Decisions []Decision
	Clients   int // total distinct clients
	Start     []time.Duration
	Stop      []time.Duration // Duration for clients that never leave
	// Early counts calls sent before a Retry-After that the same client
	// had received (as the server wrote it: seconds from the response, or
	// a date).
	Early int
}

type event struct {
	at     time.Duration
	seq    int
	kind   int
	client int
	sent   time.Duration
}

const (
	evSend = iota
	evArrive
	evRespond
)

type queue []event

func (q queue) Len() int { return len(q) }
func (q queue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q queue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *queue) Push(x any)   { *q = append(*q, x.(event)) }
func (q *queue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// Run simulates cfg with every client using a policy from newPolicy. The
// same configuration and seed always give the same trace.
func Run(cfg Config, newPolicy NewPolicy) *Trace {
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5eed))
	n := cfg.Clients
	if cfg.Join > 0 {
		n++
	}
	tr := &Trace{Config: cfg, Clients: n, Start: make([]time.Duration, n), Stop: make([]time.Duration, n)}
	policies := make([]Policy, n)
	q := &queue{}
	seq := 0
	push := func(e event) {
		e.seq = seq
		seq++
		heap.Push(q, e)
	}
	for i := 0; i < n; i++ {
		policies[i] = newPolicy(i, cfg.Seed*1000003+uint64(i)+1, cfg)
		start := time.Duration(rng.Float64() * float64(cfg.StartSpread))
		if cfg.Join > 0 && i == n-1 {
			start = cfg.Join
		}
		tr.Start[i] = start
		tr.Stop[i] = cfg.Duration
		if cfg.Leave > 0 && i == 0 {
			tr.Stop[i] = cfg.Leave
		}
		push(event{at: start, kind: evRespond, client: i, sent: -1})
	}
	var server Algorithm = &Server{Window: cfg.Window}
	if cfg.Kind != nil {
		server = cfg.Kind.New(cfg.Window)
	}
	last := make([]int, n)                // each client's latest decision
	notBefore := make([]time.Duration, n) // each client's latest Retry-After
	for q.Len() > 0 {
		e := heap.Pop(q).(event)
		if e.at >= cfg.Duration {
			break
		}
		switch e.kind {
		case evSend:
			if e.at < notBefore[e.client] {
				tr.Early++
			}
			rtt := time.Duration(float64(cfg.RTT) * (0.9 + 0.2*rng.Float64()))
			push(event{at: e.at + rtt/2, kind: evArrive, client: e.client, sent: e.at})
			push(event{at: e.at + rtt, kind: evRespond, client: e.client, sent: e.at})
		case evArrive:
			d := server.Decide(e.at, cfg.Limit(e.at))
			d.Client = e.client
			last[e.client] = len(tr.Decisions)
			tr.Decisions = append(tr.Decisions, d)
		case evRespond:
			p := policies[e.client]
			if e.sent >= 0 {
				d := tr.Decisions[last[e.client]]
				r := Response{
					Accepted:   d.Accepted,
					Limit:      d.Limit,
					Used:       d.Used,
					Remaining:  max(0, d.Limit-d.Used),
					RetryAfter: d.RetryAfter,
				}
				if cfg.Kind != nil {
					var ra retryAt
					r.Status, r.Header, ra = cfg.Kind.Format.Render(d, cfg.Window, epoch.Add(d.At))
					r.Remaining = d.Remaining
					notBefore[e.client] = max(notBefore[e.client], ra.from(e.at))
				}
				p.Observe(e.at, r)
			}
			if e.at >= tr.Stop[e.client] {
				continue
			}
			if cfg.Demand != nil {
				if want := cfg.Demand(e.client, e.at); want > e.at {
					push(event{at: want, kind: evRespond, client: e.client, sent: -1})
					continue
				}
			}
			push(event{at: e.at + p.Next(e.at), kind: evSend, client: e.client})
		}
	}
	return tr
}

// Server is the sliding log, the simulation's first server: a sliding
// window of Window in which at most limit calls are accepted; refused
// calls do not count (with CountRefused they do, so a client that keeps
// calling keeps the window full) and get a Retry-After of the whole
// seconds until the window has room. The reset it reports is when the
// oldest counted call leaves the window. The zero value is not usable:
// set Window. A Server is not safe for concurrent use.
type Server struct {
	Window       time.Duration
	CountRefused bool
	accepted     []time.Duration // counted times, oldest first
}

// Decide decides a call arriving at at (time since the start; calls must
// arrive in time order) under limit.
func (s *Server) Decide(at time.Duration, limit int) Decision {
	cut := at - s.Window
	i := 0
	for i < len(s.accepted) && s.accepted[i] <= cut {
		i++
	}
	s.accepted = s.accepted[i:]
	d := Decision{At: at, Limit: limit}
	if len(s.accepted) < limit {
		s.accepted = append(s.accepted, at)
		d.Accepted = true
	} else if s.CountRefused {
		s.accepted = append(s.accepted, at)
	}
	switch {
	case d.Accepted:
	case limit > 0:
		// The call that must expire first is the (used-limit+1)-th oldest.
		expire := s.accepted[len(s.accepted)-limit] + s.Window
		sec := math.Ceil((expire - at).Seconds())
		d.RetryAfter = time.Duration(max(1, sec)) * time.Second
	default:
		d.RetryAfter = s.Window
	}
	d.Used = len(s.accepted)
	d.Remaining = max(0, limit-d.Used)
	d.Reset = s.Window
	if len(s.accepted) > 0 {
		d.Reset = s.accepted[0] + s.Window - at
	}
	return d
}
