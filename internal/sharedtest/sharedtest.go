// Package sharedtest runs the scenarios that check pace.Shared on a real
// store: the pace held across replicas, the forger, several limits, the
// local tier counted at the server, and the fallback through a dead backend.
//
// The root module runs them on a store held in process memory, with the
// replicas as goroutine groups; redisstore and pgstore run them on their
// servers with each replica an OS process of its own (the test binary,
// executed again with the scenario's role in its environment).
package sharedtest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/driver"
	"github.com/ratepace/pace/internal/progress"
	"github.com/ratepace/pace/storetest"
)

// Backend is a store under test.
type Backend struct {
	// Setup, run once in the test's own process (never in a replica it
	// starts), starts what the store needs and returns what Open needs to
	// reach it from any process: addresses, a URL. Nil means "".
	Setup func(t *testing.T) string
	// Open returns a Store on what Setup described, in namespace ns: two
	// stores opened with one ns, in one process or two, share their state.
	// It is closed by the test's cleanup.
	Open func(t testing.TB, config, ns string) storetest.TakeStore
	// Processes runs the replicas of a scenario as OS processes. Without
	// it, they run as goroutine groups of this process, on one store opened
	// once (a store in process memory has no other way to be shared).
	Processes bool
	// Calls, when set, returns how many store calls the server has served
	// in namespace ns, from the server's own statistics: script calls
	// (Redis: one per round trip) or keys decided (PostgreSQL: take_all,
	// which take_many calls once per key). LocalTier calls it once before
	// and once after the attack, after closing its store.
	Calls func(t testing.TB, config, ns string) int64
}

// envSpec holds, in a replica process, the JSON of its spec.
const envSpec = "PACE_SHAREDTEST_SPEC"

// spec is what a replica runs.
type spec struct {
	Role   string        // "hammer", "forger" or "honest"
	Config string        // from Backend.Setup
	NS     string        // the store's namespace
	Key    string        // the key the role decides on
	Rate   float64       // the Shared's pace
	For    time.Duration // how long the role runs
}

// report is what a replica did.
type report struct {
	Admitted, Refused, Errors int64
	ByPath                    map[string]int64
	FirstErr                  string
	Start, End                int64 // wall clock, ns since the Unix epoch: before the first decision, after the last
}

// Run runs every scenario on b, each as a subtest.
func Run(t *testing.T, b Backend) {
	cfg := setup(t, b)
	t.Run("Admitted", func(t *testing.T) { Admitted(t, b, cfg) })
	t.Run("Forger", func(t *testing.T) { Forger(t, b, cfg) })
	t.Run("Shapes", func(t *testing.T) { Shapes(t, b, cfg) })
}

// setup returns the backend's configuration: the one the test process
// passed down in a replica, else Setup's.
func setup(t *testing.T, b Backend) string {
	if s, ok := replicaSpec(t); ok {
		return s.Config
	}
	if b.Setup == nil {
		return ""
	}
	return b.Setup(t)
}

var nsSeq atomic.Int64

// namespace returns a namespace no other scenario of this run uses.
func namespace() string {
	return fmt.Sprintf("sharedtest%d_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9, nsSeq.Add(1))
}

// newShared returns a Shared of rate per second on s.
func newShared(t testing.TB, s driver.Taker, rate float64, opts ...pace.Option) *pace.Shared {
	t.Helper()
	p, err := pace.NewShared(s, rate, opts...)
	if err != nil {
		t.Fatalf("NewShared(%v): %v", rate, err)
	}
	return p
}

// Admitted: two replicas of 16 goroutines each decide on one key for 3 s.
// The events admitted must not exceed rate × T + capacity, T the time from
// the first decision to the last, and must reach 95% of it: the local tier
// never refuses longer than the store would.
func Admitted(t *testing.T, b Backend, config string) {
	const rate = 200.0
	if replica(t, b) {
		return
	}
	const run = 3 * time.Second
	a, c := pair(t, b, config,
		spec{Role: "hammer", Key: "hot", Rate: rate, For: run},
		spec{Role: "hammer", Key: "hot", Rate: rate, For: run})
	for _, r := range []report{a, c} {
		if r.Errors > 0 {
			t.Fatalf("a replica had %d errors, the first: %s", r.Errors, r.FirstErr)
		}
	}
	// The bound counts from the first decision to the end of the last; the
	// floor only over the 3 s every goroutine decided without a pause (a
	// last decision descheduled past its end stretches the span, not the
	// time anyone was asking).
	span := time.Duration(max(a.End, c.End) - min(a.Start, c.Start))
	admitted := a.Admitted + c.Admitted
	bound := rate*span.Seconds() + rate
	floor := 0.95 * (rate*run.Seconds() + rate)
	t.Logf("admitted %d (%d + %d) in %v: bound %.1f, floor %.1f; decisions by path %v and %v", admitted, a.Admitted, c.Admitted, span, bound, floor, a.ByPath, c.ByPath)
	if float64(admitted) > bound {
		t.Fatalf("admitted %d in %v at %v/s with a bucket of %v: over the bound %.1f", admitted, span, rate, rate, bound)
	}
	if float64(admitted) < floor {
		t.Fatalf("admitted %d in %v: under 95%% of the %v run's %.1f", admitted, span, run, rate*run.Seconds()+rate)
	}
	if a.Admitted == 0 || c.Admitted == 0 {
		t.Fatalf("one replica admitted nothing (%d, %d)", a.Admitted, c.Admitted)
	}
}

// Forger: an honest client asks at 4 a second under a pace of 5 a second,
// alone and then while a forger in another replica presents its id 300
// times a second and returns every reservation: every honest request is
// admitted.
func Forger(t *testing.T, b Backend, config string) {
	if replica(t, b) {
		return
	}
	const d = 3 * time.Second
	alone, _ := pair(t, b, config, spec{Role: "honest", Key: "client-1", Rate: 5, For: d}, spec{})
	honest, forger := pair(t, b, config,
		spec{Role: "honest", Key: "client-1", Rate: 5, For: d},
		spec{Role: "forger", Key: "client-1", Rate: 5, For: d})
	t.Logf("honest alone %+v; under attack %+v; forger %+v", alone, honest, forger)
	for _, r := range []report{alone, honest, forger} {
		if r.Errors > 0 {
			t.Fatalf("%d errors, the first: %s", r.Errors, r.FirstErr)
		}
	}
	if alone.Refused > 0 || honest.Refused > 0 || honest.Admitted < 10 {
		t.Fatalf("honest client refused %d times alone, %d times (admitted %d) under attack; want never", alone.Refused, honest.Refused, honest.Admitted)
	}
	if forger.Admitted < 300 {
		t.Fatalf("the forger made only %d presentations: the attack did not happen", forger.Admitted)
	}
}

// Shapes: a key limited to 5 a second and 20 a minute admits exactly what
// both allow (5 at once, one every 200 ms until the minute's 20, then the
// one the minute refilled after 3 s: 21 in the first 6 s), and a refusal by
// either limit debits neither. Refusals are asked of the store by fresh
// Shareds, whose local tiers know nothing.
func Shapes(t *testing.T, b Backend, config string) {
	if replica(t, b) {
		return
	}
	s := b.Open(t, config, namespace())
	limit := pace.WithQuota(20, time.Minute)
	p := newShared(t, s, 5, limit)
	ctx := context.Background()
	first := time.Now()
	admitted := 0
	// refuse asks fresh Shareds until the instant until which the shapes
	// must refuse (the store's clock reads no later than ours at each
	// answer, so an answer back before until was decided before it); an
	// answer back later may rightly admit, and is counted, so a slow machine
	// weakens the check but cannot fail it.
	refuse := func(why string, until time.Time) {
		t.Helper()
		for range 100 {
			ok, err := newShared(t, s, 5, limit).Allow(ctx, "k")
			if err != nil {
				t.Fatalf("%s: %v", why, err)
			}
			back := time.Now()
			if ok {
				if back.Before(until) {
					t.Fatalf("%s: admitted %v after the first take; want refused before %v", why, back.Sub(first), until.Sub(first))
				}
				admitted++
				return
			}
			if !back.Before(until) {
				return
			}
		}
	}
	for i := range 5 {
		if ok, err := p.Allow(ctx, "k"); !ok || err != nil {
			t.Fatalf("take %d of a fresh key = %v, %v; want admitted", i, ok, err)
		}
		admitted++
	}
	// The minute limit would admit a sixth take; the second's refuses it
	// until 200 ms after the first take, and must not be debited.
	refuse("a sixth take at once", first.Add(200*time.Millisecond))
	for time.Since(first) < 5*time.Second {
		r, err := p.Reserve(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if r.OK() {
			admitted++
			continue
		}
		time.Sleep(min(r.RetryAfter(), time.Until(first.Add(5*time.Second)))) // a client honouring Retry-After
	}
	if admitted != 21 {
		t.Fatalf("admitted %d in the first 5 s of 5/s and 20/min; want 21", admitted)
	}
	// The per-second limit would admit; the minute's refuses until its next
	// token, 6 s after the first take.
	refuse("a take the minute limit refuses", first.Add(6*time.Second))
	if admitted > 21 {
		return // the minute's next take was admitted by refuse, after 6 s: nothing was debited
	}
	time.Sleep(time.Until(first.Add(6500 * time.Millisecond)))
	if ok, err := newShared(t, s, 5, limit).Allow(ctx, "k"); !ok || err != nil {
		t.Fatalf("the minute limit's next take (after 6 s) = %v, %v; want admitted: the refusals debited the per-second limit", ok, err)
	}
}

// LocalTier: one replica refused 100,000 times on one key, by 16 goroutines
// at once, makes at most a handful of store calls, counted by the server,
// beyond the first burst (the 16 goroutines' first decisions, which reach
// the store together before any answer is known: one round trip alone, then
// one with the other 15). It reports the calls per refused decision.
func LocalTier(t *testing.T, b Backend, config string) {
	if replica(t, b) {
		return
	}
	const refusals = 100_000
	ns := namespace()
	s := b.Open(t, config, ns)
	before := b.Calls(t, config, ns)
	p := newShared(t, s, 2)
	ctx := context.Background()
	var refused, errs atomic.Int64
	var admitted atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for refused.Load() < refusals {
				r, err := p.Reserve(ctx, "hot")
				switch {
				case err != nil:
					errs.Add(1)
				case r.OK():
					admitted.Add(1)
				default:
					refused.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	calls := b.Calls(t, config, ns) - before
	t.Logf("%d refusals and %d admissions in %v: %d store calls at the server, %.6f per refused decision",
		refused.Load(), admitted.Load(), elapsed, calls, float64(calls)/float64(refused.Load()))
	if errs.Load() > 0 {
		t.Fatalf("%d errors", errs.Load())
	}
	// 2 events a second: two at once, then one every 500 ms, each one call;
	// every refusal is local but in the first burst.
	if want := 16 + 3 + int64(2*elapsed.Seconds()); calls > want || calls < admitted.Load() {
		t.Fatalf("%d store calls for %d admissions and %d refusals in %v; want between %d and %d", calls, admitted.Load(), refused.Load(), elapsed, admitted.Load(), want)
	}
}

// Fallback: under load on a few keys, the store's server is killed (kill),
// decisions go on, with no error, at the fallback's per-replica pace, and
// go back to the store once the server is restarted (restart). Each key has
// two goroutines: the one decision that probes the dead store every timeout
// waits for it, and a key's pace is measured while its other one goes on.
func Fallback(t *testing.T, b Backend, config string, kill, restart func()) {
	if replica(t, b) {
		return
	}
	const (
		rate = 100.0 // the Shared's pace; the fallback keeps half, for one replica of two
		keys = 4
	)
	s := b.Open(t, config, namespace())
	fb, err := pace.New(rate / 2)
	if err != nil {
		t.Fatal(err)
	}
	const timeout = 100 * time.Millisecond // a store call's deadline before the fallback decides
	p := newShared(t, s, rate, pace.WithFallback(fb, timeout))
	ctx := context.Background()
	type keyStats struct {
		fbAdmitted        atomic.Int64
		fbFirst, fbLast   atomic.Int64 // wall clock: before its earliest fallback decision, after its latest
		storeAfterRestart atomic.Int64
	}
	var (
		stats     [keys]keyStats
		byPath    [5]atomic.Int64
		errs      atomic.Int64
		firstErr  atomic.Value
		restarted atomic.Bool
		load      = progress.New()
	)
	for g := range 2 * keys {
		k := g % keys
		load.Go(func() {
			key := "key" + strconv.Itoa(k)
			st := &stats[k]
			for !load.Stopping() {
				asked := time.Now().UnixNano()
				r, err := p.Reserve(ctx, key)
				if err != nil {
					if errs.Add(1) == 1 {
						firstErr.Store(err.Error())
					}
				} else {
					byPath[r.Source()].Add(1)
					switch {
					case r.Source() == pace.SourceFallback && !restarted.Load():
						lower(&st.fbFirst, asked) // the key's two goroutines race: keep the earliest ask
						raise(&st.fbLast, time.Now().UnixNano())
						if r.OK() {
							st.fbAdmitted.Add(1)
						}
					case r.Source() == pace.SourceStore && restarted.Load():
						st.storeAfterRestart.Add(1)
					}
				}
				load.Notify()
			}
		})
	}
	defer load.Stop()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		load.WaitFor(t, 30*time.Second, what, cond, func() string {
			return fmt.Sprintf("decisions by store %d, local %d, fallback %d; errors %d",
				byPath[pace.SourceStore].Load(), byPath[pace.SourceHeld].Load(), byPath[pace.SourceFallback].Load(), errs.Load())
		})
	}
	waitFor("store decisions", func() bool { return byPath[pace.SourceStore].Load() >= 200 })
	kill()
	killed := time.Now()
	waitFor("2 s of fallback decisions", func() bool {
		return byPath[pace.SourceFallback].Load() >= 200 && time.Since(killed) > 2*time.Second
	})
	restarted.Store(true)
	restart()
	waitFor("store decisions after the restart", func() bool {
		for k := range stats {
			if stats[k].storeAfterRestart.Load() < 10 {
				return false
			}
		}
		return true
	})
	if n := errs.Load(); n > 0 {
		t.Fatalf("%d errors, the first: %v", n, firstErr.Load())
	}
	for k := range stats {
		st := &stats[k]
		d := time.Duration(st.fbLast.Load() - st.fbFirst.Load())
		n := st.fbAdmitted.Load()
		// d runs from before the first ask to after the last answer, so it
		// bounds from above the time the fallback decided in; its first
		// decision came up to a store deadline after the ask, so d less
		// that deadline bounds it from below.
		bound := rate/2*d.Seconds() + rate/2
		floor := 0.9 * (rate/2*(d-timeout).Seconds() + rate/2)
		t.Logf("key %d: %d admitted by the fallback in %v (bound %.1f, floor %.1f)", k, n, d, bound, floor)
		if float64(n) > bound || float64(n) < floor {
			t.Fatalf("key %d: %d admitted by the fallback in %v; want at most %.1f and at least %.1f", k, n, d, bound, floor)
		}
	}
}

// lower sets v to x if x is below it or v is 0.
func lower(v *atomic.Int64, x int64) {
	for o := v.Load(); (o == 0 || x < o) && !v.CompareAndSwap(o, x); o = v.Load() {
	}
}

// raise sets v to x if x is above it.
func raise(v *atomic.Int64, x int64) {
	for o := v.Load(); x > o && !v.CompareAndSwap(o, x); o = v.Load() {
	}
}

// pair runs a and c (c.Role "" for none) at once, each as a replica of its
// own, and returns their reports.
func pair(t *testing.T, b Backend, config string, a, c spec) (ra, rc report) {
	t.Helper()
	ns := namespace()
	a.Config, a.NS, c.Config, c.NS = config, ns, config, ns
	s := b.Open(t, config, ns)
	start := make(chan struct{})
	if c.Role == "" {
		close(start)
		return play(t, s, a, start), report{}
	}
	if !b.Processes {
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			rc = play(t, s, c, start)
		}()
		close(start)
		ra = play(t, s, a, start)
		wg.Wait()
		return ra, rc
	}
	child := spawn(t, c)
	child.await("ready")
	child.send("go")
	close(start)
	ra = play(t, s, a, start)
	return ra, child.result()
}

// play runs the role of sp on a Shared of its own over s, from when start
// is closed.
func play(t testing.TB, s storetest.TakeStore, sp spec, start <-chan struct{}) report {
	p := newShared(t, s, sp.Rate)
	var (
		mu  sync.Mutex
		rep = report{ByPath: map[string]int64{}}
	)
	note := func(r *pace.SharedReservation, err error) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil:
			rep.Errors++
			if rep.FirstErr == "" {
				rep.FirstErr = err.Error()
			}
			return
		case r.OK():
			rep.Admitted++
		default:
			rep.Refused++
		}
		rep.ByPath[r.Source().String()]++
	}
	<-start
	rep.Start = time.Now().UnixNano()
	end := time.Now().Add(sp.For)
	ctx := context.Background()
	switch sp.Role {
	case "hammer":
		var wg sync.WaitGroup
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(end) {
					r, err := p.Reserve(ctx, sp.Key)
					note(&r, err)
				}
			}()
		}
		wg.Wait()
	case "forger", "honest":
		every := 250 * time.Millisecond // 4 a second
		if sp.Role == "forger" {
			every = time.Second / 300
		}
		tick := time.NewTicker(every)
		defer tick.Stop()
		for now := time.Now(); now.Before(end); now = <-tick.C {
			r, err := p.Reserve(ctx, sp.Key)
			note(&r, err)
			if sp.Role == "forger" && err == nil {
				if err := r.Return(ctx); err != nil {
					note(&r, err)
				}
			}
		}
	default:
		t.Fatalf("sharedtest: unknown role %q", sp.Role)
	}
	rep.End = time.Now().UnixNano()
	return rep
}

// InReplica reports whether this process is a replica that a scenario
// started: a Backend's Open may leave the cleaning up of shared state (a
// schema, say) to the test's own process.
func InReplica() bool { return os.Getenv(envSpec) != "" }

// replicaSpec returns the spec this process was started with, if it is a
// replica.
func replicaSpec(t *testing.T) (spec, bool) {
	v := os.Getenv(envSpec)
	if v == "" {
		return spec{}, false
	}
	var s spec
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		t.Fatalf("sharedtest: %s: %v", envSpec, err)
	}
	return s, true
}

// replica reports whether this process is a replica started by a scenario,
// and if so plays its role: it opens the store, says "ready", waits for
// "go" on its standard input, and writes its report to its standard output.
func replica(t *testing.T, b Backend) bool {
	sp, ok := replicaSpec(t)
	if !ok {
		return false
	}
	s := b.Open(t, sp.Config, sp.NS)
	fmt.Println(marker + "ready")
	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() || in.Text() != "go" {
		t.Fatalf("sharedtest: replica waited for go, read %q (%v)", in.Text(), in.Err())
	}
	start := make(chan struct{})
	close(start)
	rep := play(t, s, sp, start)
	out, _ := json.Marshal(rep)
	fmt.Println(marker + "result " + string(out))
	return true
}

// marker starts every line a replica writes for the scenario that started
// it; the test framework's own lines do not.
const marker = "sharedtest: "

// process is a replica process.
type process struct {
	t     *testing.T
	stdin io.WriteCloser
	lines chan string     // its marker lines; closed at the end of its output
	other strings.Builder // everything else it wrote; read once lines is closed
	done  chan error
}

// runPattern returns the -test.run pattern that selects exactly the test t.
func runPattern(t *testing.T) string {
	parts := strings.Split(t.Name(), "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

// spawn starts this test binary again as a replica playing sp, for the
// current test only.
func spawn(t *testing.T, sp spec) *process {
	t.Helper()
	js, err := json.Marshal(sp)
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run="+runPattern(t), "-test.count=1", "-test.timeout=2m")
	cmd.Env = append(os.Environ(), envSpec+"="+string(js))
	pr := &process{t: t, lines: make(chan string, 4), done: make(chan error, 1)}
	if pr.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout // one stream: the framework's lines and ours, in order
	if err := cmd.Start(); err != nil {
		t.Fatalf("sharedtest: starting a replica: %v", err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<16), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if rest, ok := strings.CutPrefix(line, marker); ok {
				pr.lines <- rest
				continue
			}
			pr.other.WriteString(line + "\n")
		}
		close(pr.lines)
		pr.done <- cmd.Wait() // after every read, as Wait closes the pipe
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		for range pr.lines { // drain, so that the reader reaches Wait
		}
	})
	return pr
}

// send writes one line to the replica's standard input.
func (p *process) send(line string) {
	p.t.Helper()
	if _, err := fmt.Fprintln(p.stdin, line); err != nil {
		p.t.Fatalf("sharedtest: writing to a replica: %v", err)
	}
}

// next returns the replica's next marker line, failing the test when it
// ends first or says nothing for a minute.
func (p *process) next() string {
	p.t.Helper()
	limit := time.NewTimer(time.Minute)
	defer limit.Stop()
	select {
	case line, ok := <-p.lines:
		if ok {
			return line
		}
		p.t.Fatalf("sharedtest: the replica ended (%v) without a word; its output:\n%s", <-p.done, p.other.String())
	case <-limit.C:
		p.t.Fatal("sharedtest: the replica said nothing for a minute")
	}
	return ""
}

// await reads the replica's next marker line, which must be want.
func (p *process) await(want string) {
	p.t.Helper()
	if got := p.next(); got != want {
		p.t.Fatalf("sharedtest: the replica said %q; want %q", got, want)
	}
}

// result reads the replica's report and waits for it to exit.
func (p *process) result() report {
	p.t.Helper()
	line := p.next()
	js, ok := strings.CutPrefix(line, "result ")
	var r report
	if !ok || json.Unmarshal([]byte(js), &r) != nil {
		p.t.Fatalf("sharedtest: the replica said %q; want its result", line)
	}
	for range p.lines {
	}
	if err := <-p.done; err != nil {
		p.t.Fatalf("sharedtest: the replica failed: %v; its output:\n%s", err, p.other.String())
	}
	return r
}
