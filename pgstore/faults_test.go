package pgstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// cluster is a PostgreSQL cluster of the test's own, in a temporary
// directory, listening on a free loopback port.
type cluster struct {
	t       *testing.T
	bin     string // directory of initdb, pg_ctl
	dir     string // the temporary directory (data/, the socket, the log)
	port    int
	asUser  string // run the binaries as this user ("" = as ourselves)
	started bool
}

// newCluster runs initdb in a fresh temporary directory. It skips the test
// (fails it under CI) when the PostgreSQL server binaries are not installed.
func newCluster(t *testing.T) *cluster {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(bins) == 0 {
		unavailable(t, "PostgreSQL server binaries not found (/usr/lib/postgresql/*/bin/initdb): "+
			"install the postgresql package (Debian: apt-get install postgresql) to run the fault tests")
	}
	sort.Slice(bins, func(i, j int) bool { // highest major version
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(bins[i]))))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(bins[j]))))
		return vi > vj
	})
	c := &cluster{t: t, bin: filepath.Dir(bins[0])}
	dir, err := os.MkdirTemp("", "pgstore-faults-")
	if err != nil {
		t.Fatal(err)
	}
	c.dir = dir
	t.Cleanup(func() {
		if c.started {
			_ = c.ctl("stop", "-m", "immediate")
		}
		if t.Failed() {
			if log, err := os.ReadFile(filepath.Join(dir, "log")); err == nil {
				t.Logf("server log:\n%s", log)
			}
		}
		os.RemoveAll(dir)
	})
	// initdb refuses to run as root: run the binaries as the postgres user,
	// in a directory it owns.
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			unavailable(t, "running as root and there is no postgres user to run initdb as: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		c.asUser = "postgres"
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c.port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	if out, err := c.run(2*time.Minute, "initdb", "-D", c.data(), "-U", "postgres", "--auth=trust", "-N", "-E", "UTF8", "--locale=C"); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	return c
}

func (c *cluster) data() string { return filepath.Join(c.dir, "data") }

// run runs one of the cluster's binaries, as c.asUser when set.
func (c *cluster) run(timeout time.Duration, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	path := filepath.Join(c.bin, name)
	var cmd *exec.Cmd
	if c.asUser != "" {
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", c.asUser, "--", path}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, path, args...)
	}
	cmd.Dir = c.dir
	return cmd.CombinedOutput()
}

func (c *cluster) ctl(args ...string) error {
	out, err := c.run(time.Minute, "pg_ctl", append([]string{"-D", c.data()}, args...)...)
	if err != nil {
		return fmt.Errorf("pg_ctl %v: %v\n%s", args, err, out)
	}
	return nil
}

// start starts the server on loopback only and waits until it accepts
// connections.
func (c *cluster) start() {
	c.t.Helper()
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=30", c.port, c.dir)
	if err := c.ctl("start", "-w", "-t", "60", "-l", filepath.Join(c.dir, "log"), "-o", opts); err != nil {
		c.t.Fatal(err)
	}
	c.started = true
}

// kill stops the server the hard way: every backend is terminated at once
// without a checkpoint, as in a crash.
func (c *cluster) kill() {
	c.t.Helper()
	if err := c.ctl("stop", "-m", "immediate", "-w"); err != nil {
		c.t.Fatal(err)
	}
	c.started = false
}

// signal sends sig to the server's postmaster and every process it forked
// (its backends and auxiliary processes), all started by this test.
func (c *cluster) signal(sig syscall.Signal) {
	c.t.Helper()
	b, err := os.ReadFile(filepath.Join(c.data(), "postmaster.pid"))
	if err != nil {
		c.t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pm, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		c.t.Fatalf("postmaster.pid: %v", err)
	}
	pids := []int{pm}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // exited meanwhile
		}
		// pid (comm) state ppid ...; comm may contain spaces and parentheses.
		rest := string(b[strings.LastIndexByte(string(b), ')')+1:])
		fields := strings.Fields(rest)
		if len(fields) > 1 && fields[1] == strconv.Itoa(pm) {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
			pids = append(pids, pid)
		}
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, sig)
	}
}

func (c *cluster) url() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

// outcome is one operation under load.
type outcome struct {
	took time.Duration
	err  error
	down bool // the server was known to be down for the whole call
}

// TestFaults kills the store's server in the middle of a load and restarts
// it. It checks that every call, including those in flight at the kill,
// returns within its context deadline (plus a margin for a loaded machine);
// that every call made while the server is down fails; that nothing panics
// or hangs; and that the same Store, on the same pool, makes exact decisions
// again once the server is back. Then it freezes every server process
// (SIGSTOP, connections left open) and checks that calls return
// context.DeadlineExceeded at their deadline, and work again after SIGCONT.
func TestFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("starts its own PostgreSQL cluster; skipped with -short")
	}
	c := newCluster(t)
	c.start()

	cfg, err := pgxpool.ParseConfig(c.url())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 8
	cfg.ConnConfig.ConnectTimeout = time.Second
	ctx := context.Background()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s, err := New(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}

	const (
		workers  = 6
		deadline = 500 * time.Millisecond
		margin   = 2 * time.Second // scheduling delays on a loaded 2-core machine
	)
	var (
		down       atomic.Bool // set once the server has been killed, cleared before restart
		successes  atomic.Int64
		stop       = make(chan struct{})
		warm       = make(chan struct{}) // closed after enough successes
		warmOnce   sync.Once
		downSeen   atomic.Int64
		downEnough = make(chan struct{}) // closed after enough failures while down
		downOnce   sync.Once
		mu         sync.Mutex
		outcomes   []outcome
		wg         sync.WaitGroup
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				wasDown := down.Load()
				opCtx, cancel := context.WithTimeout(ctx, deadline)
				start := time.Now()
				var err error
				key := fmt.Sprintf("w%d-%d", w, i%50)
				if i%2 == 0 {
					_, _, err = s.TokenBucket(opCtx, key, 100, 10, 1)
				} else {
					_, _, err = s.AcquireSlotBurst(opCtx, key, 10, 20, time.Minute, time.Minute)
				}
				took := time.Since(start)
				cancel()
				stillDown := down.Load()
				mu.Lock()
				outcomes = append(outcomes, outcome{took: took, err: err, down: wasDown && stillDown})
				mu.Unlock()
				if wasDown && stillDown && downSeen.Add(1) >= 5*workers {
					downOnce.Do(func() { close(downEnough) })
				}
				if err == nil && successes.Add(1) >= 100 {
					warmOnce.Do(func() { close(warm) })
				}
				if err != nil && wasDown {
					// Do not spin on a refused connection faster than a real
					// client would retry.
					select {
					case <-stop:
						return
					case <-time.After(20 * time.Millisecond):
					}
				}
			}
		}()
	}
	finish := func() {
		close(stop)
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(deadline + margin + 5*time.Second):
			t.Fatalf("load goroutines still running long after their deadlines: a call hangs")
		}
	}

	select {
	case <-warm:
	case <-time.After(30 * time.Second):
		finish()
		t.Fatalf("no 100 successful calls within 30s before the fault")
	}
	c.kill()
	down.Store(true)
	// Let the workers run into the dead server for a while.
	select {
	case <-downEnough:
	case <-time.After(30 * time.Second):
		t.Errorf("fewer than %d calls completed in 30s while the server was down: calls hang", 5*workers)
	}
	down.Store(false)
	c.start()

	// The same Store and pool recover: poll until a call succeeds.
	var recovered bool
	for waited := time.Duration(0); waited < 30*time.Second; waited += 50 * time.Millisecond {
		opCtx, cancel := context.WithTimeout(ctx, deadline)
		_, _, err := s.AcquireSlot(opCtx, "probe", 1000, time.Minute)
		cancel()
		if err == nil {
			recovered = true
			break
		}
		time.Sleep(50 * time.Millisecond) // the server is restarting, not a goroutine to wait for
	}
	before := successes.Load()
	finish()
	if !recovered {
		t.Fatalf("the store did not work again within 30s of the restart")
	}

	mu.Lock()
	var nDown, slow int
	var worst time.Duration
	for _, o := range outcomes {
		worst = max(worst, o.took)
		if o.took > deadline+margin {
			slow++
		}
		if o.down {
			nDown++
			if o.err == nil {
				t.Errorf("a call made while the server was down succeeded")
			}
		}
	}
	total := len(outcomes)
	mu.Unlock()
	t.Logf("%d calls, %d while the server was down, slowest %v (deadline %v)", total, nDown, worst, deadline)
	if slow > 0 {
		t.Errorf("%d calls took longer than the deadline %v plus %v (slowest %v)", slow, deadline, margin, worst)
	}
	if before < 100 {
		t.Errorf("only %d successful calls", before)
	}

	// Exact again after the restart: 20 callers, 5 slots.
	var admitted atomic.Int64
	var rg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		rg.Add(1)
		go func() {
			defer rg.Done()
			// A pooled connection that died with the server fails once,
			// before anything reaches the new server: retry a few times.
			var err error
			for range 3 {
				var ok bool
				if ok, _, err = s.AcquireSlot(ctx, "after-restart", 5, time.Minute); err == nil {
					if ok {
						admitted.Add(1)
					}
					return
				}
			}
			errs <- err
		}()
	}
	rg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("AcquireSlot after restart: %v", err)
	}
	if got := admitted.Load(); got != 5 {
		t.Fatalf("after restart 20 callers got %d of 5 slots", got)
	}

	// A frozen server (every process stopped, connections open): calls
	// return at their context deadline.
	c.signal(syscall.SIGSTOP)
	frozen := func() {
		defer c.signal(syscall.SIGCONT)
		var fg sync.WaitGroup
		for i := range 4 {
			fg.Add(1)
			go func() {
				defer fg.Done()
				opCtx, cancel := context.WithTimeout(ctx, deadline)
				defer cancel()
				start := time.Now()
				_, _, err := s.TokenBucket(opCtx, fmt.Sprintf("frozen-%d", i), 1, 1, 1)
				took := time.Since(start)
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("TokenBucket on a frozen server = %v, want an error wrapping context.DeadlineExceeded", err)
				}
				if took > deadline+margin {
					t.Errorf("TokenBucket on a frozen server took %v, deadline %v", took, deadline)
				}
				t.Logf("frozen server: TokenBucket returned after %v: %v", took, err)
			}()
		}
		fg.Wait()
	}
	frozen()
	var thawed bool
	for waited := time.Duration(0); waited < 30*time.Second; waited += 50 * time.Millisecond {
		opCtx, cancel := context.WithTimeout(ctx, deadline)
		_, _, err := s.TokenBucket(opCtx, "thawed", 1000, 1, 1)
		cancel()
		if err == nil {
			thawed = true
			break
		}
		time.Sleep(50 * time.Millisecond) // the server's processes resuming
	}
	if !thawed {
		t.Fatalf("the store did not work again within 30s of thawing the server")
	}
}
