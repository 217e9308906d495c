package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratepace/pace/internal/benchkit"
)

// LoadAdmit is the limit of the load test's admit path: 100,000 requests a
// second per client address, with a bucket of one second, about twice what
// one keep-alive connection asks on loopback, so that every request is
// admitted. go-limiter, which refills in full only while Rate × Rate × Step
// is at most 10⁹ per second (see Limit.Step), gets 5,000 tokens every 50 ms.
var LoadAdmit = Limit{Rate: 100_000, Burst: 100_000, Step: 50 * time.Millisecond}

// LoadResult is what one load run measured.
type LoadResult struct {
	// Requests is the number of responses read, Admitted of them with 200
	// (the handler ran) and Refused with 429.
	Requests, Admitted, Refused int
	// Elapsed is the wall time from the first request to the last response.
	Elapsed time.Duration
	// P50 and P99 are the median and the 99th percentile of the time from
	// writing a request to reading the end of its response.
	P50, P99 time.Duration
	// CPU is the CPU time the process used during the run, client and
	// server together (zero where it cannot be read): on a machine shared
	// with other work it moves less than the wall time does.
	CPU time.Duration
}

// PerSecond reports the responses read per second.
func (r LoadResult) PerSecond() float64 { return float64(r.Requests) / r.Elapsed.Seconds() }

// CPUPerRequest reports the CPU time per response, client and server
// together.
func (r LoadResult) CPUPerRequest() time.Duration {
	if r.Requests == 0 {
		return 0
	}
	return r.CPU / time.Duration(r.Requests)
}

// A LoadServer is a real net/http server on a loopback port of its own,
// serving the trivial handler behind one middleware.
type LoadServer struct {
	srv   *http.Server
	ln    net.Listener
	close func() error
	done  chan error
}

// trivial is the handler of the load test: a 200 with a body of three bytes.
var trivial = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	w.Write([]byte("ok\n"))
})

// NewLoadServer starts a server of the trivial handler behind a fresh
// instance of m for l, on 127.0.0.1 and a free port.
func NewLoadServer(m Middleware, l Limit) (*LoadServer, error) {
	h, closeMiddleware, err := m.Wrap(l, trivial)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		if closeMiddleware != nil {
			closeMiddleware()
		}
		return nil, err
	}
	s := &LoadServer{srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}, ln: ln, close: closeMiddleware, done: make(chan error, 1)}
	go func() { s.done <- s.srv.Serve(ln) }()
	return s, nil
}

// Addr returns the address the server listens on.
func (s *LoadServer) Addr() string { return s.ln.Addr().String() }

// Close stops the server, waiting for its connections to close, and the
// middleware's goroutines.
func (s *LoadServer) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if serr := <-s.done; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	if s.close != nil {
		err = errors.Join(err, s.close())
	}
	return err
}

// loadGrace is how long a connection waits for a response past the end of
// its run (or for each warmup) before it fails: a bound, not a timing.
const loadGrace = 10 * time.Second

// maxLoadConns is the number of distinct client addresses a load test can
// dial from: 127.0.0.2 to 127.0.0.251.
const maxLoadConns = 250

// Load dials conns keep-alive connections to the server at addr (see
// DialLoad), sends warmup requests on each, then runs requests or for d
// (see LoadClients.Run) and closes them.
func Load(addr string, conns, warmup, requests int, d time.Duration) (LoadResult, error) {
	cs, err := DialLoad(addr, conns, warmup)
	if err != nil {
		return LoadResult{}, err
	}
	defer cs.Close()
	return cs.Run(requests, d)
}

// LoadClients are the keep-alive connections of a load test to one server.
type LoadClients struct {
	cs []*loadConn
}

// DialLoad dials conns keep-alive connections to the server at addr,
// connection i from the address 127.0.0.(2+i), so that each is a client of
// its own to a limiter keyed by IP address, and sends warmup requests on
// each, one connection after the other, untimed.
func DialLoad(addr string, conns, warmup int) (*LoadClients, error) {
	if conns < 1 || conns > maxLoadConns {
		return nil, fmt.Errorf("bench: %d connections; want 1 to %d", conns, maxLoadConns)
	}
	l := &LoadClients{cs: make([]*loadConn, 0, conns)}
	for i := range conns {
		c, err := dialLoad(addr, net.IPv4(127, 0, 0, byte(2+i)))
		if err != nil {
			l.Close()
			return nil, err
		}
		l.cs = append(l.cs, c)
		if err := c.c.SetDeadline(time.Now().Add(loadGrace)); err != nil {
			l.Close()
			return nil, err
		}
		for range warmup {
			if _, err := c.do(); err != nil {
				l.Close()
				return nil, err
			}
		}
	}
	return l, nil
}

// Close closes the connections.
func (l *LoadClients) Close() {
	for _, c := range l.cs {
		c.c.Close()
	}
}

// Run sends requests on all the connections at once, each connection one
// request at a time, until requests responses have been read or the run
// has lasted d, whichever comes first. A response other than 200 or 429,
// or a transport error, is an error.
func (l *LoadClients) Run(requests int, d time.Duration) (LoadResult, error) {
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		mu       sync.Mutex
		res      LoadResult
		firstErr error
		lat      = make([]time.Duration, 0, min(requests, 1<<20))
	)
	cpu0 := benchkit.CPUTime()
	start := time.Now()
	deadline := start.Add(d)
	for _, c := range l.cs {
		// A server that stops answering fails the run instead of hanging it.
		if err := c.c.SetDeadline(deadline.Add(loadGrace)); err != nil {
			return res, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			admitted, refused := 0, 0
			var err error
			for t0 := time.Now(); next.Add(1) <= int64(requests) && t0.Before(deadline); {
				var code int
				if code, err = c.do(); err != nil {
					break
				}
				t1 := time.Now()
				mine = append(mine, t1.Sub(t0))
				t0 = t1
				if code == http.StatusOK {
					admitted++
				} else {
					refused++
				}
			}
			mu.Lock()
			defer mu.Unlock()
			lat = append(lat, mine...)
			res.Admitted += admitted
			res.Refused += refused
			if err != nil && firstErr == nil {
				firstErr = err
			}
		}()
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	res.CPU = benchkit.CPUTime() - cpu0
	if firstErr != nil {
		return res, firstErr
	}
	res.Requests = len(lat)
	if len(lat) > 0 {
		slices.Sort(lat)
		res.P50 = lat[(len(lat)-1)/2]
		res.P99 = lat[(len(lat)-1)*99/100]
	}
	return res, nil
}

// loadRequest is the request every connection sends: the smallest a
// net/http server accepts, on a keep-alive connection (HTTP/1.1's default).
var loadRequest = []byte("GET / HTTP/1.1\r\nHost: bench\r\n\r\n")

// loadConn is a minimal keep-alive HTTP/1.1 client on one connection: it
// writes loadRequest and reads the status and the Content-Length body of
// the response, allocating nothing, so that the client's share of the two
// cores the client and server share is small and the server's cost shows.
type loadConn struct {
	c net.Conn
	r *bufio.Reader
}

func dialLoad(addr string, from net.IP) (*loadConn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: from}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &loadConn{c: c, r: bufio.NewReaderSize(c, 4096)}, nil
}

var (
	contentLength = []byte("content-length:")
	closeHeader   = []byte("connection: close")
)

// do sends one request and reads its response, returning 200 or 429.
func (c *loadConn) do() (int, error) {
	if _, err := c.c.Write(loadRequest); err != nil {
		return 0, err
	}
	line, err := c.r.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	// "HTTP/1.1 200 OK\r\n"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.1 ")) {
		return 0, fmt.Errorf("bench: status line %q", line)
	}
	code, ok := atoi(line[9:12])
	if !ok || (code != http.StatusOK && code != http.StatusTooManyRequests) {
		return 0, fmt.Errorf("bench: status %q; want 200 or 429", line)
	}
	body := -1
	for {
		line, err := c.r.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		if len(line) <= 2 { // the blank line that ends the header
			break
		}
		if hasPrefixFold(line, contentLength) {
			var ok bool
			if body, ok = atoi(bytes.TrimSpace(line[len(contentLength):])); !ok {
				return 0, fmt.Errorf("bench: %q", line)
			}
		}
		if hasPrefixFold(line, closeHeader) {
			return 0, errors.New("bench: the server closes the connection")
		}
	}
	if body < 0 {
		return 0, errors.New("bench: a response without Content-Length")
	}
	if _, err := c.r.Discard(body); err != nil {
		return 0, err
	}
	return code, nil
}

// hasPrefixFold reports whether s begins with prefix, in any letter case.
func hasPrefixFold(s, prefix []byte) bool {
	return len(s) >= len(prefix) && bytes.EqualFold(s[:len(prefix)], prefix)
}

// atoi returns the decimal number b, and whether b is one (1 to 9 digits).
func atoi(b []byte) (int, bool) {
	if len(b) == 0 || len(b) > 9 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// The lines around the load test's section of docs/benchmarks.md, which
// cmd/loopback writes and cmd/report keeps when it writes the rest.
const (
	LoopbackBegin = "<!-- loopback: written by go run ./bench/cmd/loopback; the report keeps it -->\n"
	LoopbackEnd   = "<!-- /loopback -->\n"
)

// loopbackBefore is the heading the section goes before when doc has none.
const loopbackBefore = "## The peers' own bugs"

// LoopbackSection returns the load test's section of doc, its two marker
// lines included, or nil when doc has none.
func LoopbackSection(doc []byte) []byte {
	i := bytes.Index(doc, []byte(LoopbackBegin))
	if i < 0 {
		return nil
	}
	j := bytes.Index(doc[i:], []byte(LoopbackEnd))
	if j < 0 {
		return nil
	}
	return doc[i : i+j+len(LoopbackEnd)]
}

// SetLoopbackSection returns doc with its load test section replaced by
// section (marker lines included), or, when doc has none, with section
// inserted before the heading of the peers' bugs (at the end without one).
func SetLoopbackSection(doc, section []byte) []byte {
	if old := LoopbackSection(doc); old != nil {
		i := bytes.Index(doc, old)
		return slices.Concat(doc[:i], section, doc[i+len(old):])
	}
	if i := bytes.Index(doc, []byte(loopbackBefore)); i >= 0 {
		return slices.Concat(doc[:i], section, []byte("\n"), doc[i:])
	}
	return slices.Concat(doc, []byte("\n"), section)
}
