package redisstore

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// server is a redis-server (or valkey-server) child process that a test
// started on a free loopback port, and stops when it ends.
type server struct {
	t    *testing.T
	port int
	args []string
	dir  string
	cmd  *exec.Cmd
}

// redisServerPath returns the server binary of the flavour under test
// (redis-server or valkey-server), or skips the test (fails it under CI)
// when there is none.
func redisServerPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath(target.server)
	if err != nil {
		unavailable(t, "%s not found in PATH (Debian: apt-get install %s; valkey-server is in bookworm-backports)", target.server, target.server)
	}
	return p
}

// freePort returns a loopback TCP port that was free a moment ago, and whose
// port+10000 (the Cluster bus) was too.
func freePort(t *testing.T) int {
	t.Helper()
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if port+10000 > 65535 {
			continue
		}
		bus, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000))
		if err != nil {
			continue
		}
		bus.Close()
		return port
	}
	t.Fatal("no free port pair found")
	return 0
}

// startServer starts the server of the flavour under test on a free port
// with no persistence, plus any extra arguments, and waits until it answers
// PING.
func startServer(t *testing.T, extra ...string) *server {
	t.Helper()
	s := &server{t: t, port: freePort(t), dir: t.TempDir()}
	s.args = append([]string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", s.dir}, extra...)
	s.start()
	t.Cleanup(s.kill)
	return s
}

func (s *server) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// start runs the server process (again, after kill, on the same port) and
// waits until it answers PING, for at most ten seconds.
func (s *server) start() {
	s.t.Helper()
	s.cmd = exec.Command(redisServerPath(s.t), s.args...)
	s.cmd.Dir = s.dir
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start %s: %v", target.server, err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.addr(), MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.kill()
			s.t.Fatalf("%s on %s did not answer: %v", target.server, s.addr(), err)
		}
		time.Sleep(20 * time.Millisecond) // polling the readiness of a child process
	}
}

// kill stops the server with SIGKILL, the way a crash would, and reaps it.
func (s *server) kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// startCluster starts a Redis Cluster of three masters without replicas and
// returns their addresses once the cluster reports state ok.
func startCluster(t *testing.T) []string {
	t.Helper()
	cli, err := exec.LookPath(target.cli)
	if err != nil {
		unavailable(t, "%s not found in PATH (apt-get install redis-tools, or valkey-tools)", target.cli)
	}
	var addrs []string
	for range 3 {
		s := startServer(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000")
		addrs = append(addrs, s.addr())
	}
	out, err := exec.Command(cli, append(append([]string{"--cluster", "create"}, addrs...), "--cluster-yes")...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		for {
			info, err := c.ClusterInfo(context.Background()).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				c.Close()
				t.Fatalf("cluster node %s not ok: %v %s", a, err, info)
			}
			time.Sleep(20 * time.Millisecond) // polling the cluster's own convergence
		}
		c.Close()
	}
	return addrs
}
