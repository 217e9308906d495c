package httplimit_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratepace/pace/httplimit"
	"github.com/ratepace/pace/memory"
)

// timers is a fake time.AfterFunc: it records the functions, and the test
// fires them.
type timers struct {
	mu  sync.Mutex
	fns []func()
	d   []time.Duration
}

func (ts *timers) afterFunc(d time.Duration, f func()) func() bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	i := len(ts.fns)
	ts.fns = append(ts.fns, f)
	ts.d = append(ts.d, d)
	return func() bool {
		ts.mu.Lock()
		defer ts.mu.Unlock()
		armed := ts.fns[i] != nil
		ts.fns[i] = nil
		return armed
	}
}

// fire runs every armed function once, and reports how many it ran.
func (ts *timers) fire() int {
	ts.mu.Lock()
	var due []func()
	for i, f := range ts.fns {
		if f != nil {
			due = append(due, f)
			ts.fns[i] = nil
		}
	}
	ts.mu.Unlock()
	for _, f := range due {
		f()
	}
	return len(due)
}

// TestSSEThroughSlots: server-sent events stream through the middleware
// (flushed through http.Flusher and http.ResponseController, with and
// without the status-recording writer), the slot stays held past its ttl
// while the stream runs because it is refreshed, and is released when the
// handler returns. Without the refresh, the slot would expire under the
// running stream.
func TestSSEThroughSlots(t *testing.T) {
	for _, c := range []struct {
		name    string
		record  bool // a limit with ReturnOn: the handler sees the recording writer
		refresh bool
	}{
		{"recording writer", true, true},
		{"original writer", false, true},
		{"no refresh", true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := newClock()
			s := memory.New(memory.WithClock(clk.Now))
			var ts timers
			limits := []httplimit.Limit{httplimit.Slots(s, 1, 30*time.Second, httplimit.ClientIP(), httplimit.Name("streams"))}
			if c.record {
				limits = append(limits, httplimit.Pace(newPace(t, 1000, clk), httplimit.ClientIP(), httplimit.ReturnOn(500)))
			}
			m := mustNew(t, limits, httplimit.WithAfterFunc(ts.afterFunc))
			next := make(chan struct{})
			streamed := make(chan struct{}) // the middleware returned from the stream
			srv := httptest.NewServer(signal(streamed, "/stream", m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/stream" {
					w.Write([]byte("ok"))
					return
				}
				rc := http.NewResponseController(w)
				if err := rc.SetWriteDeadline(time.Now().Add(time.Minute)); err != nil {
					t.Errorf("SetWriteDeadline through the middleware: %v", err)
				}
				w.Header().Set("Content-Type", "text/event-stream")
				for i := range 3 {
					fmt.Fprintf(w, "data: %d\n\n", i)
					if i%2 == 0 {
						w.(http.Flusher).Flush()
					} else if err := rc.Flush(); err != nil {
						t.Errorf("ResponseController.Flush: %v", err)
					}
					<-next
				}
			}))))
			defer srv.Close()
			get := func(path string) (*http.Response, error) {
				return srv.Client().Get(srv.URL + path)
			}
			resp, err := get("/stream")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			events := bufio.NewReader(resp.Body)
			readEvent := func(want string) {
				t.Helper()
				line, err := events.ReadString('\n')
				if err != nil || line != "data: "+want+"\n" {
					t.Fatalf("event %q, %v; want data: %s", line, err, want)
				}
				events.ReadString('\n')
			}
			readEvent("0") // flushed while the handler still runs
			if ts.d[0] != 10*time.Second {
				t.Fatalf("refresh every %v; want ttl/3", ts.d[0])
			}
			// 40 s of stream: past the ttl, refreshed at 20 s.
			clk.Advance(20 * time.Second)
			if c.refresh && ts.fire() != 1 {
				t.Fatal("no refresh armed")
			}
			clk.Advance(20 * time.Second)
			other, err := get("/")
			if err != nil {
				t.Fatal(err)
			}
			other.Body.Close()
			if c.refresh && other.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("a second stream while the first runs: %d; want 429 (the slot is refreshed)", other.StatusCode)
			}
			if !c.refresh && other.StatusCode != 200 {
				t.Fatalf("without a refresh: %d; want 200 (the slot expired)", other.StatusCode)
			}
			next <- struct{}{}
			readEvent("1")
			next <- struct{}{}
			readEvent("2")
			next <- struct{}{}
			if _, err := io.ReadAll(resp.Body); err != nil {
				t.Fatal(err)
			}
			<-streamed
			if ok, cur, err := s.AcquireSlot(context.Background(), "httplimit:streams:127.0.0.1", 1, time.Minute); !ok || err != nil {
				t.Fatalf("slot still held (%d, %v) after the stream ended", cur, err)
			}
			if c.refresh && ts.fire() != 0 {
				t.Fatal("a refresh still armed after the handler returned")
			}
		})
	}
}

// signal closes done once h has served a request for path: the
// middleware has then finished it.
func signal(done chan struct{}, path string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		if r.URL.Path == path {
			close(done)
		}
	})
}

// TestHijack: a WebSocket-style upgrade hijacks the connection through the
// middleware, by type assertion and through http.ResponseController, and
// the status is recorded as 101 (ReturnOn(101) gives the event back).
func TestHijack(t *testing.T) {
	for _, path := range []string{"/assert", "/controller"} {
		p := newPace(t, 1, newClock())
		m := mustNew(t, []httplimit.Limit{httplimit.Pace(p, httplimit.ClientIP(), httplimit.ReturnOn(http.StatusSwitchingProtocols))})
		done := make(chan struct{})
		srv := httptest.NewServer(signal(done, path, m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var conn net.Conn
			var rw *bufio.ReadWriter
			var err error
			if r.URL.Path == "/assert" {
				conn, rw, err = w.(http.Hijacker).Hijack()
			} else {
				conn, rw, err = http.NewResponseController(w).Hijack()
			}
			if err != nil {
				t.Errorf("Hijack: %v", err)
				return
			}
			defer conn.Close()
			rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
			rw.Flush()
			line, _ := rw.ReadString('\n')
			rw.WriteString("echo " + line)
			rw.Flush()
		}))))
		conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", path)
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("%s: upgrade answered %v, %v", path, resp, err)
		}
		fmt.Fprintf(conn, "ping\n")
		if line, err := br.ReadString('\n'); line != "echo ping\n" {
			t.Fatalf("%s: echo %q, %v", path, line, err)
		}
		conn.Close()
		<-done
		srv.Close()
		if p.Len() != 0 {
			t.Fatalf("%s: the upgrade's event was not given back on 101", path)
		}
	}
}
