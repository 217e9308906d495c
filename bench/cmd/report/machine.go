package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// machine describes where and when the figures were taken.
type machine struct {
	CPU, Kernel, Memory, GoVersion, Redis string
	Cores                                 int
	Date                                  time.Time
	LoadBefore, LoadAfter                 string
	Took                                  time.Duration
}

func describeMachine() machine {
	m := machine{
		CPU:        procField("/proc/cpuinfo", "model name"),
		Kernel:     strings.TrimSpace(readFile("/proc/sys/kernel/osrelease")),
		Memory:     memTotal(),
		GoVersion:  runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH,
		Cores:      runtime.NumCPU(),
		Date:       time.Now().UTC(),
		LoadBefore: loadAverage(),
	}
	if m.CPU == "" {
		m.CPU = "unknown"
	}
	return m
}

// memTotal returns the machine's memory in GiB.
func memTotal() string {
	kb, err := strconv.ParseFloat(strings.TrimSuffix(procField("/proc/meminfo", "MemTotal"), " kB"), 64)
	if err != nil {
		return "unknown"
	}
	return fmt.Sprintf("%.0f GiB", kb/(1<<20))
}

// loadAverage returns the 1, 5 and 15 minute load averages.
func loadAverage() string {
	f := strings.Fields(readFile("/proc/loadavg"))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], ", ")
}

// procField returns the value of the first "name: value" line of a /proc
// file.
func procField(path, name string) string { return field(readFile(path), name) }

// field returns the value of the first "name: value" line of text.
func field(text, name string) string {
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == name {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func readFile(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return string(b)
}

// redisServer returns the address of the Redis server the benchmarks use
// ("" for none), a sentence for the report, and a function that stops the
// server if this command started it. mode is "private", "off" or an
// address.
func redisServer(mode, dir string) (note, addr string, stop func(), err error) {
	stop = func() {}
	switch mode {
	case "off":
		return "not run (-redis off)", "", stop, nil
	case "private":
	default:
		if err := ping(mode); err != nil {
			return "", "", stop, fmt.Errorf("redis at %s: %w", mode, err)
		}
		return "on the server at " + mode + ", which may run other work: srv-µs/op counts it too", mode, stop, nil
	}
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return "not run: no redis-server on PATH (install it, or give -redis ADDR)", "", stop, nil
	}
	port, err := freePort()
	if err != nil {
		return "", "", stop, err
	}
	addr = fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command(path, "--bind", "127.0.0.1", "--port", fmt.Sprint(port), "--save", "", "--appendonly", "no", "--dir", dir)
	if err := cmd.Start(); err != nil {
		return "", "", stop, err
	}
	stop = func() {
		cmd.Process.Kill()
		cmd.Wait()
	}
	for range 100 {
		if err = ping(addr); err == nil {
			return "on a private redis-server started for this run (no persistence, nothing else on it)", addr, stop, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	return "", "", func() {}, fmt.Errorf("the private redis-server on %s did not answer: %w", addr, err)
}

// freePort returns a TCP port of 127.0.0.1 that nothing listened on a moment
// ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func ping(addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return c.Ping(ctx).Err()
}

// redisVersion returns the server's version, or "unknown".
func redisVersion(addr string) string {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	info, err := c.Info(context.Background(), "server").Result()
	if err != nil {
		return "unknown"
	}
	if v := field(info, "redis_version"); v != "" {
		return v
	}
	return "unknown"
}
