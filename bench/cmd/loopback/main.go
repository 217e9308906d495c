// Command loopback is the load test of what a user's server sees: a real
// net/http server on a loopback port, the trivial handler behind each
// middleware of bench.Middlewares (none, pace's per IP, pace's Shared on
// Redis, go-chi/httprate, sethvargo/go-limiter), and keep-alive clients on 1
// and 64 concurrent connections, each from an address of its own. It
// measures requests per second and the p50 and p99 latency of each, the
// configurations alternated within every round, and writes the section
// "Over loopback" of docs/benchmarks.md (cmd/report keeps that section when
// it writes the rest).
//
// From the repository root:
//
//	go run ./bench/cmd/loopback            # 40 rounds of 100 ms per configuration, under 2 minutes
//	go run ./bench/cmd/loopback -short     # a smoke test; prints the section, writes nothing
//
// Redis is the one at -redis (default 127.0.0.1:6379; "off" leaves Shared
// out); every instance writes under a key prefix of its own, and its keys
// expire within seconds.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ratepace/pace/bench"
	"github.com/redis/go-redis/v9"
)

type options struct {
	rounds   int
	duration time.Duration
	warmup   int
	conns    []int
	redis    string
	short    bool
	write    bool
}

func main() {
	var o options
	conns := flag.String("conns", "1,64", "comma-separated numbers of concurrent connections")
	flag.IntVar(&o.rounds, "rounds", 40, "rounds; every configuration runs once a round, in the opposite order every other round")
	flag.DurationVar(&o.duration, "duration", 100*time.Millisecond, "time each configuration runs each round")
	flag.IntVar(&o.warmup, "warmup", 20, "untimed requests per connection before each run")
	flag.StringVar(&o.redis, "redis", "127.0.0.1:6379", `Redis for pace's Shared, or "off"`)
	flag.BoolVar(&o.short, "short", false, "smoke test: 2 rounds of 50ms; prints the section and writes nothing")
	flag.BoolVar(&o.write, "write", true, "write the section into docs/benchmarks.md (not with -short)")
	flag.Parse()
	for _, f := range strings.Split(*conns, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			fmt.Fprintln(os.Stderr, "loopback: -conns:", err)
			os.Exit(2)
		}
		o.conns = append(o.conns, n)
	}
	if o.short {
		o.rounds, o.duration, o.write = 2, 50*time.Millisecond, false
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "loopback:", err)
		os.Exit(1)
	}
}

// cell is one configuration: a middleware, a number of connections and a
// path.
type cell struct {
	impl   string
	conns  int
	refuse bool
}

func run(o options) error {
	var c *redis.Client
	if o.redis != "off" {
		c = redis.NewClient(&redis.Options{Addr: o.redis, PoolSize: 128, ContextTimeoutEnabled: true})
		defer c.Close()
		if err := c.Ping(context.Background()).Err(); err != nil {
			return fmt.Errorf("redis at %s: %w (-redis off leaves Shared out)", o.redis, err)
		}
	}
	ms := bench.Middlewares(c)
	loadBefore := loadAverage()
	start := time.Now()
	results := map[cell][]bench.LoadResult{}
	for _, conns := range o.conns {
		if err := measure(o, ms, conns, results); err != nil {
			return err
		}
	}
	took := time.Since(start)
	section := document(o, ms, results, loadBefore, loadAverage(), took)
	if !o.write {
		os.Stdout.Write(section)
		return nil
	}
	root, err := bench.RepoRoot()
	if err != nil {
		return err
	}
	path := filepath.Join(root, "docs", "benchmarks.md")
	doc, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, bench.SetLoopbackSection(doc, section), 0o644); err != nil {
		return err
	}
	logf("wrote the section of %s", path)
	return nil
}

// measure runs the rounds at conns connections: every configuration (each
// middleware on each path) has its server and connections from the start,
// and each round runs them one after the other for o.duration, in the
// opposite order every other round, so that the ratio of a configuration to
// the bare handler comes from moments a second apart at most.
func measure(o options, ms []bench.Middleware, conns int, results map[cell][]bench.LoadResult) error {
	type setup struct {
		cell
		srv *bench.LoadServer
		cs  *bench.LoadClients
	}
	var setups []setup
	defer func() {
		for _, s := range setups {
			s.cs.Close()
			s.srv.Close()
		}
	}()
	for _, refuse := range []bool{false, true} {
		for _, m := range ms {
			if refuse && m.Baseline {
				continue
			}
			l := bench.LoadAdmit
			if refuse {
				l = bench.Refuse
			}
			srv, err := bench.NewLoadServer(m, l)
			if err != nil {
				return fmt.Errorf("%s: %w", m.Name, err)
			}
			cs, err := bench.DialLoad(srv.Addr(), conns, o.warmup)
			if err != nil {
				srv.Close()
				return fmt.Errorf("%s, %d connections: %w", m.Name, conns, err)
			}
			setups = append(setups, setup{cell{m.Name, conns, refuse}, srv, cs})
		}
	}
	for round := range o.rounds {
		order := slices.Clone(setups)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		if round%10 == 0 {
			logf("%d connections: round %d of %d", conns, round+1, o.rounds)
		}
		for _, s := range order {
			res, err := s.cs.Run(math.MaxInt, o.duration)
			if err != nil {
				return fmt.Errorf("%s, %d connections: %w", s.impl, conns, err)
			}
			results[s.cell] = append(results[s.cell], res)
		}
	}
	for _, s := range setups {
		s.cs.Close()
		if err := s.srv.Close(); err != nil {
			return err
		}
	}
	setups = nil
	return nil
}

// peers are the middlewares pace's loss of throughput is compared with.
var peers = []string{"httprate", "golimiter"}

func document(o options, ms []bench.Middleware, results map[cell][]bench.LoadResult, loadBefore, loadAfter string, took time.Duration) []byte {
	var w bytes.Buffer
	p := func(format string, args ...any) { fmt.Fprintf(&w, format, args...) }
	p("%s## Over loopback: what a server sees\n\n", bench.LoopbackBegin)
	p("Generated by `%s` on %s (%d rounds of %v per configuration; %d cores, %s; load average %s at the start, %s at the end; %v in all). ",
		commandLine(), time.Now().UTC().Format("2006-01-02 15:04 MST"), o.rounds, o.duration, runtime.NumCPU(), runtime.Version(), loadBefore, loadAfter, took.Round(time.Second))
	p("A real `net/http` server on a loopback port serves a trivial handler (a 200 with three bytes) behind each middleware, keyed by the connection's IP address; ")
	p("keep-alive clients send one request at a time on each of 1 or 64 connections, connection *i* from the address 127.0.0.(2+*i*), so each connection is a client of its own. ")
	p("The client is a minimal HTTP/1.1 writer and reader that allocates nothing, in the same process, so that its share of the cores it shares with the server is small. ")
	p("Every configuration (middleware and path) has its server and connections from the start; each round runs every configuration for %v, one after the other, in the opposite order every other round, so that a ratio to the bare handler compares moments about a second apart. ", o.duration)
	p("*admit*: %s requests a second per client with a bucket of one second (go-limiter, which refills in full only below 31,622 a second with such a bucket, gets the same rate in steps of %v), about twice what one connection reaches: a run fails unless every response is a 200. ", thousands(int(bench.LoadAdmit.Rate)), bench.LoadAdmit.Step)
	p("*refuse*: one request per 1000 s, spent during the warmup: a run fails unless every response is a 429 (pace's with its problem body and fields). ")
	p("`× none` is the median over the rounds of the configuration's requests per second ÷ the bare handler's in the same round (lowest and highest in brackets); `lost` is 1 − that median. ")
	p("`CPU/req` is the median of the process's CPU time per request, client and server together (Redis's own is not counted), which other work on the machine moves less than the wall time; `CPU × none` its median ratio to the bare handler's in the same round. ")
	p("p50 and p99 are the medians over the rounds of each run's percentiles of the time from writing a request to reading its response.")
	if o.short {
		p(" **Smoke test (`-short`): these figures measure nothing.**")
	}
	p("\n\n| connections | path | middleware | requests/s | × none | lost | CPU/req | CPU × none | p50 | p99 |\n|---:|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
	type loss struct {
		lost, cpu float64
		ok        bool
	}
	losses := map[int]map[string]loss{}
	for _, conns := range o.conns {
		losses[conns] = map[string]loss{}
		base := results[cell{"bare", conns, false}]
		for _, refuse := range []bool{false, true} {
			path := "admit"
			if refuse {
				path = "refuse"
			}
			for _, m := range ms {
				rs := results[cell{m.Name, conns, refuse}]
				if len(rs) == 0 {
					continue
				}
				var rps, ratios, cpu, cpuRatios, p50, p99 []float64
				wrong := 0
				for i, r := range rs {
					rps = append(rps, r.PerSecond())
					cpu = append(cpu, r.CPUPerRequest().Seconds())
					if i < len(base) {
						ratios = append(ratios, r.PerSecond()/base[i].PerSecond())
						cpuRatios = append(cpuRatios, r.CPUPerRequest().Seconds()/base[i].CPUPerRequest().Seconds())
					}
					p50 = append(p50, r.P50.Seconds())
					p99 = append(p99, r.P99.Seconds())
					if refuse {
						wrong += r.Admitted
					} else {
						wrong += r.Refused
					}
				}
				ratio, lost, cpuRatio := "—", "—", "—"
				if !m.Baseline && len(ratios) > 0 {
					med := median(ratios)
					ratio = fmt.Sprintf("%.3f× (%.2f–%.2f)", med, slices.Min(ratios), slices.Max(ratios))
					lost = fmt.Sprintf("%.1f%%", 100*(1-med))
					cpuRatio = fmt.Sprintf("%.3f×", median(cpuRatios))
					if !refuse {
						losses[conns][m.Name] = loss{1 - med, median(cpuRatios) - 1, wrong == 0}
					}
				}
				note := ""
				if wrong > 0 {
					note = fmt.Sprintf(" **(%d responses off the path: fails)**", wrong)
				}
				p("| %d | %s | %s%s | %s | %s | %s | %s | %s | %s | %s |\n", conns, path, m.Title, note, thousands(int(median(rps))), ratio, lost, dur(median(cpu)), cpuRatio, dur(median(p50)), dur(median(p99)))
			}
		}
	}
	p("\n**Goal: pace's loss of throughput against no middleware at most half the best peer's**, on the admit path, pace's per-process Pace against the in-process peers (Shared on Redis makes a round trip per request and is shown for what it costs, not held to it):\n\n")
	for _, conns := range o.conns {
		pl, ok := losses[conns]["pace"]
		if !ok {
			continue
		}
		best, bestName := math.Inf(1), ""
		for _, name := range peers {
			if l, ok := losses[conns][name]; ok && l.ok && l.lost < best {
				best, bestName = l.lost, name
			}
		}
		verdict := "not met"
		switch {
		case !pl.ok:
			verdict = "not measured (pace refused requests on the admit path)"
		case bestName == "":
			verdict = "not measured (no peer ran)"
		case pl.lost <= best/2:
			verdict = "met"
		case best <= 0:
			verdict = "not measurable (the best peer lost nothing beyond the noise)"
		}
		cpuBest := math.Inf(1)
		for _, name := range peers {
			if l, ok := losses[conns][name]; ok && l.ok {
				cpuBest = min(cpuBest, l.cpu)
			}
		}
		p("- %d connection%s: pace lost %.1f%%, the best peer (%s) %.1f%%: %s. In CPU per request, pace added %.1f%% to the bare handler's, the thriftiest peer %.1f%%.\n", conns, plural(conns), 100*pl.lost, bestName, 100*best, verdict, 100*pl.cpu, 100*cpuBest)
	}
	p("\n%s", bench.LoopbackEnd)
	return w.Bytes()
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return math.NaN()
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func dur(sec float64) string {
	d := time.Duration(sec * float64(time.Second))
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%.1f µs", sec*1e6)
	default:
		return fmt.Sprintf("%.2f ms", sec*1e3)
	}
}

func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// commandLine returns the command that made the section.
func commandLine() string {
	return strings.Join(append([]string{"go run ./bench/cmd/loopback"}, os.Args[1:]...), " ")
}

// loadAverage returns the 1, 5 and 15 minute load averages, or "?".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], ", ")
	}
	return "?"
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "loopback: "+format+"\n", args...)
}
