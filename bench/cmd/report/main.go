// Command report runs the whole comparison of pace with its peers (package
// bench: the in-process limiters, the HTTP middlewares, the limiters on
// Redis, and the memory each holds) and writes docs/benchmarks.md and the
// chart docs/benchmarks.svg from that one run.
//
// From the repository root:
//
//	go run ./bench/cmd/report           # the full run, some 30 minutes on 2 cores
//	go run ./bench/cmd/report -short    # a smoke test of all of it, written to a temporary directory
//
// It builds the benchmark binary once and runs it -count times, the
// implementations of each benchmark side by side and in the opposite order
// every other run, so that each ratio to pace comes from measurements taken
// within seconds of each other. For Redis it starts a private redis-server
// (no persistence, on a free port of 127.0.0.1) when one is installed, so
// that the server's own time per call counts only these calls; -redis ADDR
// uses a running server instead and -redis off skips Redis. The memory of
// each implementation is measured in a process of its own.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/ratepace/pace/bench"
)

type options struct {
	short     bool
	count     int
	benchtime string
	out       string
	redis     string
	keys      int
	horizon   time.Duration
	save      string
	from      string
}

func main() {
	var o options
	child := flag.String("memory-child", "", "internal: measure the memory of this implementation and print it as JSON")
	flag.BoolVar(&o.short, "short", false, "smoke-test everything quickly (one run of 1x, small key sets); writes to a temporary directory unless -out is given")
	flag.IntVar(&o.count, "count", 5, "runs of every benchmark")
	flag.StringVar(&o.benchtime, "benchtime", "500ms", "time (or NNNx iterations) per benchmark per run")
	flag.StringVar(&o.out, "out", "", "directory for benchmarks.md and benchmarks.svg (default: the repository's docs/)")
	flag.StringVar(&o.redis, "redis", "private", `"private" (start a redis-server of our own), an address, or "off"`)
	flag.IntVar(&o.keys, "keys", 1_000_000, "keys for the memory measurement")
	flag.StringVar(&o.save, "save", "", "also save what was measured to this JSON file")
	flag.StringVar(&o.from, "from", "", "write the page from a file of -save instead of measuring")
	flag.DurationVar(&o.horizon, "horizon", 30*time.Second, "the memory measurement's horizon: one event per horizon per key, and an idle wait of two horizons")
	flag.Parse()
	if *child != "" {
		if err := memoryChild(*child, o.keys, o.horizon); err != nil {
			fmt.Fprintln(os.Stderr, "report:", err)
			os.Exit(1)
		}
		return
	}
	if o.short {
		setDefault("count", &o.count, 1)
		setDefault("benchtime", &o.benchtime, "1x")
		setDefault("keys", &o.keys, 10_000)
		setDefault("horizon", &o.horizon, time.Second)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}

// setDefault sets *p to v unless the flag was given on the command line.
func setDefault[T any](name string, p *T, v T) {
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	if !given {
		*p = v
	}
}

// record is everything a page is written from: what run measured, kept by
// -save so that -from can write the page again without measuring.
type record struct {
	Command   string
	Short     bool
	Count     int
	Benchtime string
	Keys      int
	Horizon   time.Duration
	Machine   machine
	Versions  map[string]string
	Rounds    []string // the benchmark binary's output, one per run
	Memory    map[string]bench.Memory
	RedisNote string
	Redis     bool
}

func run(o options) error {
	root, err := bench.RepoRoot()
	if err != nil {
		return err
	}
	if o.out == "" {
		if o.short {
			if o.out, err = os.MkdirTemp("", "pace-bench-report-"); err != nil {
				return err
			}
		} else {
			o.out = filepath.Join(root, "docs")
		}
	}
	var rec record
	if o.from != "" {
		b, err := os.ReadFile(o.from)
		if err != nil {
			return err
		}
		if err := json.Unmarshal(b, &rec); err != nil {
			return fmt.Errorf("%s: %w", o.from, err)
		}
	} else if rec, err = measure(o, filepath.Join(root, "bench")); err != nil {
		return err
	}
	if o.save != "" {
		b, err := json.MarshalIndent(rec, "", "\t")
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.save, b, 0o644); err != nil {
			return err
		}
	}
	doc := document{rec: rec, rs: newResults()}
	if old, err := os.ReadFile(filepath.Join(o.out, "benchmarks.md")); err == nil {
		doc.loopback = bench.LoopbackSection(old)
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for i, out := range rec.Rounds {
		if err := doc.rs.parse(i, strings.NewReader(out)); err != nil {
			return err
		}
	}
	if err := checkPace(doc.rs, rec.Redis); err != nil {
		for _, out := range rec.Rounds {
			os.Stderr.WriteString(out)
		}
		return err
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	md, svg := doc.markdown(), doc.chart()
	if err := os.WriteFile(filepath.Join(o.out, "benchmarks.md"), md, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(o.out, "benchmarks.svg"), svg, 0o644); err != nil {
		return err
	}
	logf("wrote %s and %s", filepath.Join(o.out, "benchmarks.md"), filepath.Join(o.out, "benchmarks.svg"))
	return nil
}

// measure builds and runs the benchmarks and measures the memory.
func measure(o options, benchDir string) (record, error) {
	rec := record{Command: commandLine(), Short: o.short, Count: o.count, Benchtime: o.benchtime, Keys: o.keys, Horizon: o.horizon, Machine: describeMachine()}
	start := time.Now()
	tmp, err := os.MkdirTemp("", "pace-bench-")
	if err != nil {
		return rec, err
	}
	defer os.RemoveAll(tmp)
	logf("building the benchmarks in %s", benchDir)
	bin := filepath.Join(tmp, "bench.test")
	if err := command(benchDir, nil, "go", "test", "-c", "-o", bin, ".").Run(); err != nil {
		return rec, fmt.Errorf("building the benchmarks: %w", err)
	}
	if rec.Versions, err = moduleVersions(benchDir); err != nil {
		return rec, err
	}

	env := os.Environ()
	pattern := "^Benchmark(Local|HTTP|Redis)$"
	note, addr, stop, err := redisServer(o.redis, tmp)
	if err != nil {
		return rec, err
	}
	defer stop()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() { // stop the private server on an interrupt too
		<-sig
		stop()
		os.Exit(1)
	}()
	rec.RedisNote, rec.Redis = note, addr != ""
	if addr == "" {
		pattern = "^Benchmark(Local|HTTP)$"
	} else {
		env = append(env, "PACE_REDIS_ADDR="+addr)
		rec.Machine.Redis = redisVersion(addr)
	}
	for round := range o.count {
		logf("run %d of %d", round+1, o.count)
		args := []string{"-test.run", "^$", "-test.bench", pattern, "-test.benchtime", o.benchtime, "-test.count", "1"}
		if o.short {
			args = append(args, "-test.short")
		}
		renv := append(env[:len(env):len(env)], fmt.Sprintf("PACE_BENCH_REVERSE=%d", round%2))
		var out bytes.Buffer
		cmd := command(benchDir, renv, bin, args...)
		cmd.Stdout = &out
		if err := cmd.Run(); err != nil {
			logf("run %d: %v (a failed benchmark; the page lists it)", round+1, err)
		}
		rec.Rounds = append(rec.Rounds, out.String())
	}
	logf("measuring memory: %d keys, one event per %v", o.keys, o.horizon)
	if rec.Memory, err = measureMemory(o); err != nil {
		return rec, err
	}
	rec.Machine.LoadAfter = loadAverage()
	rec.Machine.Took = time.Since(start)
	return rec, nil
}

// commandLine returns the command line that made the page, without -out,
// -save and -from.
func commandLine() string {
	args := []string{"go run ./bench/cmd/report"}
	skip := false
	for _, a := range os.Args[1:] {
		name := strings.TrimLeft(a, "-")
		switch {
		case skip:
			skip = false
		case strings.HasPrefix(name, "out") || strings.HasPrefix(name, "save") || strings.HasPrefix(name, "from"):
			skip = !strings.Contains(a, "=")
		default:
			args = append(args, a)
		}
	}
	return strings.Join(args, " ")
}

// checkPace returns an error unless every benchmark of pace ran without
// failing: a peer's failure is a finding for the report, pace's a bug.
func checkPace(rs *results, redis bool) error {
	ran := 0
	for _, name := range rs.names {
		s := rs.byName[name]
		_, impl, ok := split(name)
		if !ok || impl != "pace" {
			continue
		}
		if len(s.failures) > 0 {
			return fmt.Errorf("%s failed: %s", name, s.failures[0].msg)
		}
		ran++
	}
	if ran == 0 {
		return errors.New("no benchmark of pace ran")
	}
	if redis && !strings.Contains(strings.Join(rs.names, "\n"), "BenchmarkRedis/") {
		return errors.New("no Redis benchmark ran")
	}
	return nil
}

// measureMemory measures every in-process implementation, each in a child
// process of its own. The next child starts when the previous one has
// decided on its keys and waits (the heap of one process is not the
// other's, but the flood of keys must not share the cores).
func measureMemory(o options) (map[string]bench.Memory, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	type child struct {
		name string
		cmd  *exec.Cmd
		out  *bufio.Reader
		err  bytes.Buffer
	}
	var children []*child
	defer func() {
		for _, c := range children {
			c.cmd.Process.Kill()
			c.cmd.Wait()
		}
	}()
	failed := func(c *child, err error) error {
		return fmt.Errorf("memory of %s: %v: %s", c.name, err, strings.TrimSpace(c.err.String()))
	}
	for _, impl := range bench.Local() {
		c := &child{name: impl.Name}
		c.cmd = exec.Command(self, "-memory-child", impl.Name, "-keys", fmt.Sprint(o.keys), "-horizon", o.horizon.String())
		c.cmd.Stderr = &c.err
		stdout, err := c.cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		c.out = bufio.NewReader(stdout)
		if err := c.cmd.Start(); err != nil {
			return nil, err
		}
		children = append(children, c)
		if line, err := c.out.ReadString('\n'); err != nil || line != floodedLine {
			return nil, failed(c, fmt.Errorf("%q, %v", line, err))
		}
	}
	mem := map[string]bench.Memory{}
	for _, c := range children {
		var m bench.Memory
		if err := json.NewDecoder(c.out).Decode(&m); err != nil {
			return nil, failed(c, err)
		}
		if err := c.cmd.Wait(); err != nil {
			return nil, failed(c, err)
		}
		mem[c.name] = m
	}
	children = nil
	return mem, nil
}

// floodedLine is what a memory child prints once its keys are decided on.
const floodedLine = "flooded\n"

// memoryChild measures one implementation, prints floodedLine when its keys
// are decided on, then the result as JSON.
func memoryChild(name string, keys int, horizon time.Duration) error {
	for _, impl := range bench.Local() {
		if impl.Name == name {
			m, err := bench.MeasureMemory(impl, keys, horizon, func() { os.Stdout.WriteString(floodedLine) })
			if err != nil {
				return err
			}
			return json.NewEncoder(os.Stdout).Encode(m)
		}
	}
	return fmt.Errorf("no implementation named %q", name)
}

// moduleVersions returns the version of every module an implementation
// comes from, as the bench module resolves it.
func moduleVersions(dir string) (map[string]string, error) {
	out, err := command(dir, nil, "go", "list", "-m", "-f", "{{.Path}} {{.Version}}", "all").Output()
	if err != nil {
		return nil, fmt.Errorf("go list -m all: %w", err)
	}
	v := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if path, version, ok := strings.Cut(line, " "); ok {
			v[path] = version
		}
	}
	return v, nil
}

func command(dir string, env []string, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(context.Background(), name, args...)
	cmd.Dir, cmd.Env, cmd.Stderr = dir, env, os.Stderr
	return cmd
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "report: "+format+"\n", args...)
}
