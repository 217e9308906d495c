package bench

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// loadConns are the numbers of concurrent connections of the load test.
var loadConns = []int{1, 64}

// BenchmarkLoopback is the load test of cmd/loopback as a benchmark: b.N
// requests over real loopback connections (1 or 64, keep-alive, each from an
// address of its own) to a real net/http server of the trivial handler
// behind each middleware of Middlewares, admit and refuse paths. Besides
// ns/op (wall time per request, all connections together) it reports req/s
// and the p50-µs and p99-µs latencies. cmd/loopback runs the same in
// alternated rounds and writes docs/benchmarks.md; this is the form
// benchstat and CI take.
func BenchmarkLoopback(b *testing.B) {
	ms := Middlewares(redisClientPool(b, 128))
	if reversed() {
		slices.Reverse(ms)
	}
	for _, conns := range loadConns {
		for _, refuse := range []bool{false, true} {
			path, l := "admit", LoadAdmit
			if refuse {
				path, l = "refuse", Refuse
			}
			for _, m := range ms {
				if refuse && m.Baseline {
					continue
				}
				b.Run(fmt.Sprintf("conns=%d/%s/impl=%s", conns, path, m.Name), func(b *testing.B) {
					srv, err := NewLoadServer(m, l)
					if err != nil {
						b.Fatal(err)
					}
					defer func() {
						if err := srv.Close(); err != nil {
							b.Error(err)
						}
					}()
					res, err := Load(srv.Addr(), conns, 2, b.N, time.Hour)
					if err != nil {
						b.Fatal(err)
					}
					if res.Requests != b.N || refuse && res.Admitted > 0 || !refuse && res.Refused > 0 {
						b.Fatalf("%d admitted and %d refused of %d requests, %d responses; the benchmark measures the wrong path", res.Admitted, res.Refused, b.N, res.Requests)
					}
					b.ReportMetric(float64(res.Elapsed.Nanoseconds())/float64(res.Requests), "ns/op")
					b.ReportMetric(res.PerSecond(), "req/s")
					b.ReportMetric(float64(res.P50.Nanoseconds())/1e3, "p50-µs")
					b.ReportMetric(float64(res.P99.Nanoseconds())/1e3, "p99-µs")
				})
			}
		}
	}
}

// TestLoad checks the load test's client and counts on the bare handler and
// pace's middleware: every request answered, on the path the limit says,
// and the connections each a client of its own (one refusal per
// connection's address after its one admitted request).
func TestLoad(t *testing.T) {
	for _, m := range Middlewares(nil) {
		if m.Name != "pace" && m.Name != "bare" {
			continue
		}
		for _, l := range []Limit{LoadAdmit, Refuse} {
			srv, err := NewLoadServer(m, l)
			if err != nil {
				t.Fatal(err)
			}
			const conns, warmup, requests = 8, 1, 200
			res, err := Load(srv.Addr(), conns, warmup, requests, time.Hour)
			if cerr := srv.Close(); cerr != nil {
				t.Error(cerr)
			}
			if err != nil {
				t.Fatalf("%s at %v: %v", m.Name, l, err)
			}
			wantAdmitted := requests
			if m.Name == "pace" && l == Refuse {
				wantAdmitted = 0 // each connection's one event went in its warmup request
			}
			if res.Requests != requests || res.Admitted != wantAdmitted || res.Refused != requests-wantAdmitted {
				t.Errorf("%s at %v: %+v; want %d requests, %d admitted", m.Name, l, res, requests, wantAdmitted)
			}
			if res.P50 <= 0 || res.P99 < res.P50 || res.Elapsed <= 0 {
				t.Errorf("%s at %v: latencies %v, %v over %v", m.Name, l, res.P50, res.P99, res.Elapsed)
			}
		}
	}
}

// TestSetLoopbackSection: the section goes before the peers' bugs the first
// time, replaces itself after, and leaves the rest of the page alone.
func TestSetLoopbackSection(t *testing.T) {
	page := "# Benchmarks\n\n## HTTP middleware\n\ntable\n\n## The peers' own bugs, met on the way\n\nbugs\n"
	one := LoopbackBegin + "first\n" + LoopbackEnd
	two := LoopbackBegin + "second, longer\n" + LoopbackEnd
	got := string(SetLoopbackSection([]byte(page), []byte(one)))
	want := "# Benchmarks\n\n## HTTP middleware\n\ntable\n\n" + one + "\n## The peers' own bugs, met on the way\n\nbugs\n"
	if got != want {
		t.Fatalf("first SetLoopbackSection = %q; want %q", got, want)
	}
	if got := string(SetLoopbackSection([]byte(got), []byte(two))); got != strings.Replace(want, one, two, 1) {
		t.Errorf("second SetLoopbackSection = %q", got)
	}
	if s := LoopbackSection([]byte(page)); s != nil {
		t.Errorf("LoopbackSection of a page without one = %q; want nil", s)
	}
	if got := string(SetLoopbackSection([]byte("# x\n"), []byte(one))); got != "# x\n\n"+one {
		t.Errorf("SetLoopbackSection without the peers' bugs = %q", got)
	}
}
