package pacersim

import (
	"fmt"
	"io"
	"math"
	"runtime"
	"sync"
	"time"
)

// Kind is one kind of server met in the wild: an algorithm, a header
// format, a window, a limit and the round trip to it.
type Kind struct {
	Name   string
	New    func(window time.Duration) Algorithm
	Format Format
	Window time.Duration
	Limit  int
	RTT    time.Duration
	// Burst says the algorithm allows a full bucket on top of its refill
	// (a token bucket): the capacity a run is measured against is then
	// limit + limit × duration / window.
	Burst bool

	// The fields below describe the validation kinds (Validation); the
	// zoo's kinds leave them zero.

	// LimitAt, when set, is the limit the server applies at t (run time);
	// what its headers say is up to its algorithm.
	LimitAt func(t time.Duration) int
	// Demand, when set, is Config.Demand: clients that call only some of
	// the time.
	Demand func(client int, t time.Duration) time.Duration
	// Together starts every client at the same instant (StartSpread 0).
	Together bool
}

// Zoo lists the server kinds the pacer is held to: every algorithm and
// header format at least once, windows from 1 s to 1 h, limits from 5 to
// 10,000 per window, round trips from 1 ms to 500 ms. Each pairing lets a
// lone greedy client call at least twice as often as the limit allows, so
// that the pacer, not the round trip, sets the pace.
var Zoo = []Kind{
	{Name: "sliding log", New: slidingLog(false),
		Format: Format{Fields: IETF}, Window: 10 * time.Second, Limit: 100, RTT: 20 * time.Millisecond},
	{Name: "sliding log, refused counted", New: slidingLog(true),
		Format: Format{Reset: ResetDelta}, Window: time.Second, Limit: 20, RTT: 5 * time.Millisecond},
	{Name: "sliding log", New: slidingLog(false),
		Format: Format{Reset: NoReset}, Window: 20 * time.Second, Limit: 200, RTT: 20 * time.Millisecond},
	{Name: "sliding counter", New: slidingCounter(false),
		Format: Format{Reset: ResetEpoch}, Window: time.Minute, Limit: 600, RTT: 50 * time.Millisecond},
	{Name: "sliding counter", New: slidingCounter(false),
		Format: Format{Reset: ResetAsctime}, Window: 5 * time.Second, Limit: 50, RTT: 10 * time.Millisecond},
	{Name: "sliding counter, refused counted", New: slidingCounter(true),
		Format: Format{Reset: ResetEpochMillis}, Window: 2 * time.Second, Limit: 200, RTT: 2 * time.Millisecond},
	{Name: "fixed window (clock)", New: fixedWindow(false, false),
		Format: Format{Reset: ResetEpoch}, Window: 3 * time.Second, Limit: 30, RTT: 10 * time.Millisecond},
	{Name: "fixed window (clock)", New: fixedWindow(false, false),
		Format: Format{Reset: ResetEpochMillis, Retry: NoRetry}, Window: 10 * time.Second, Limit: 5, RTT: time.Millisecond},
	{Name: "fixed window (clock), refused counted", New: fixedWindow(false, true),
		Format: Format{Fields: RetryOnly}, Window: 2 * time.Second, Limit: 40, RTT: 5 * time.Millisecond},
	{Name: "fixed window (first call)", New: fixedWindow(true, false),
		Format: Format{Fields: IETF, Retry: RetryDateGMT}, Window: 5 * time.Minute, Limit: 3000, RTT: 50 * time.Millisecond},
	{Name: "fixed window (first call), refused counted", New: fixedWindow(true, true),
		Format: Format{Reset: ResetDelta}, Window: time.Hour, Limit: 1000, RTT: 500 * time.Millisecond},
	{Name: "token bucket", New: tokenBucket(false), Burst: true,
		Format: Format{Reset: ResetDateUTC, Retry: RetryDateUTC}, Window: 2 * time.Second, Limit: 20, RTT: 10 * time.Millisecond},
	{Name: "token bucket", New: tokenBucket(false), Burst: true,
		Format: Format{Reset: ResetDateGMT}, Window: time.Minute, Limit: 10000, RTT: time.Millisecond},
	{Name: "token bucket, reset to next token", New: tokenBucket(true), Burst: true,
		Format: Format{Reset: ResetRFC850, Retry: RetryDateGMT}, Window: 30 * time.Second, Limit: 300, RTT: 20 * time.Millisecond},
}

func slidingLog(countRefused bool) func(time.Duration) Algorithm {
	return func(w time.Duration) Algorithm { return &Server{Window: w, CountRefused: countRefused} }
}

func slidingCounter(countRefused bool) func(time.Duration) Algorithm {
	return func(w time.Duration) Algorithm { return &SlidingCounter{Window: w, CountRefused: countRefused} }
}

func fixedWindow(firstCall, countRefused bool) func(time.Duration) Algorithm {
	return func(w time.Duration) Algorithm {
		return &FixedWindow{Window: w, FirstCall: firstCall, CountRefused: countRefused}
	}
}

func tokenBucket(resetNext bool) func(time.Duration) Algorithm {
	return func(w time.Duration) Algorithm { return &TokenBucket{Window: w, ResetNext: resetNext} }
}

// String names the kind in tables: algorithm, format, limit per window,
// round trip.
func (k Kind) String() string {
	return fmt.Sprintf("%s; %v; %d/%v; rtt %v", k.Name, k.Format, k.Limit, k.Window, k.RTT)
}

// zooWindows is the length of a zoo run, in windows; the join and the
// leave of the churn scenario come at windows 5 and 15.
const zooWindows = 20

// ZooScenario is a run of clients greedy clients against k for 20
// windows; with churn one more joins at window 5 and one leaves at 15.
// They start within the first 60th of a window.
func ZooScenario(k Kind, clients int, churn bool, seed uint64) Config {
	c := Config{
		Seed:        seed,
		Clients:     clients,
		Duration:    zooWindows * k.Window,
		Window:      k.Window,
		RTT:         k.RTT,
		StartSpread: k.Window / 60,
		Limit:       func(time.Duration) int { return k.Limit },
		Kind:        &k,
		Demand:      k.Demand,
	}
	if k.LimitAt != nil {
		c.Limit = k.LimitAt
	}
	if k.Together {
		c.StartSpread = 0
	}
	if churn {
		c.Join, c.Leave = 5*k.Window, 15*k.Window
	}
	return c
}

// ZooScenarios are the client counts of the zoo table: N = 1, 4, 16, and
// N = 4 with a join and a leave.
var ZooScenarios = []ScenarioN{{1, false}, {4, false}, {16, false}, {4, true}}

// ZooRow is one line of the zoo table: the worst of each metric over the
// seeds.
type ZooRow struct {
	Kind    Kind
	Clients int
	Churn   bool
	// Utilisation is the lowest, RejectRatio the highest, Fairness the
	// lowest (NaN for a lone client), Early the highest over the seeds.
	Utilisation, RejectRatio, Fairness float64
	Early                              int
	// LateRejected is the most refusals after the first window.
	LateRejected int
}

// ZooWorst runs newPolicy against every kind of the zoo in every zoo
// scenario, for each seed, and keeps the worst figures. Runs go on
// GOMAXPROCS goroutines; the result does not depend on their order.
func ZooWorst(newPolicy NewPolicy, seeds []uint64) []ZooRow {
	return Worst(Zoo, ZooScenarios, newPolicy, seeds)
}

// ScenarioN is one client count of a table, with or without churn.
type ScenarioN = struct {
	Clients int
	Churn   bool
}

// ValidationScenarios are the client counts the validation kinds are
// measured at: N = 1, 4, 16 (their goals, docs/pacer.md).
var ValidationScenarios = []ScenarioN{{1, false}, {4, false}, {16, false}}

// Worst is ZooWorst over kinds and scenarios.
func Worst(kinds []Kind, scenarios []ScenarioN, newPolicy NewPolicy, seeds []uint64) []ZooRow {
	type job struct{ row, seed int }
	var rows []ZooRow
	var jobs []job
	for _, k := range kinds {
		for _, sc := range scenarios {
			for i := range seeds {
				jobs = append(jobs, job{len(rows), i})
			}
			rows = append(rows, ZooRow{Kind: k, Clients: sc.Clients, Churn: sc.Churn})
		}
	}
	ms := make([]Metrics, len(jobs))
	next := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < runtime.GOMAXPROCS(0); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				r := rows[jobs[i].row]
				ms[i] = Measure(Run(ZooScenario(r.Kind, r.Clients, r.Churn, seeds[jobs[i].seed]), newPolicy))
			}
		}()
	}
	for i := range jobs {
		next <- i
	}
	close(next)
	wg.Wait()
	for i := range rows {
		rows[i].Utilisation, rows[i].Fairness = math.Inf(1), math.NaN()
	}
	for i, m := range ms {
		r := &rows[jobs[i].row]
		r.Utilisation = math.Min(r.Utilisation, m.Utilisation)
		r.RejectRatio = math.Max(r.RejectRatio, m.RejectRatio)
		if !math.IsNaN(m.FairnessMin) && !(m.FairnessMin >= r.Fairness) {
			r.Fairness = m.FairnessMin
		}
		r.Early = max(r.Early, m.Early)
		r.LateRejected = max(r.LateRejected, m.LateRejected)
	}
	return rows
}

// WriteZooTable writes rows as a Markdown table.
func WriteZooTable(w io.Writer, rows []ZooRow) {
	fmt.Fprintln(w, "| server | N | util | 429 ratio | J (min) | early calls |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, r := range rows {
		sc := fmt.Sprintf("%d", r.Clients)
		if r.Churn {
			sc += " churn"
		}
		fmt.Fprintf(w, "| %v | %s | %.3f | %.2f%% | %s | %d |\n",
			r.Kind, sc, r.Utilisation, 100*r.RejectRatio, num(r.Fairness, "%.3f"), r.Early)
	}
}
