package main

import (
	"bytes"
	"encoding/xml"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ratepace/pace/bench"
)

// Two runs as the benchmark binary prints them, the second with a peer that
// failed (on the line of its name, and with its message indented below).
var runs = []string{`goos: linux
BenchmarkLocal/keys=1/admit/serial/impl=pace-2         	 1000000	        50.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkLocal/keys=1/admit/serial/impl=throttled-2    	 1000000	       200.0 ns/op	      48 B/op	       3 allocs/op
BenchmarkRedis/keys=1/admit/serial/impl=pace-2         	   10000	    100000 ns/op	        10.00 srv-µs/op	     472 B/op	      12 allocs/op
PASS
`, `BenchmarkLocal/keys=1/admit/serial/impl=pace-2         	 1000000	        40.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkLocal/keys=1/admit/serial/impl=throttled-2    	--- FAIL: BenchmarkLocal/keys=1/admit/serial/impl=throttled-2
    harness_test.go:240: throttled: 3 of 100 decisions failed; the last: boom
    harness_test.go:241: a second line
--- FAIL: BenchmarkLocal
FAIL
`}

func parsed(t *testing.T) *results {
	t.Helper()
	rs := newResults()
	for i, r := range runs {
		if err := rs.parse(i, strings.NewReader(r)); err != nil {
			t.Fatal(err)
		}
	}
	return rs
}

func TestParse(t *testing.T) {
	rs := parsed(t)
	pace := rs.byName["BenchmarkLocal/keys=1/admit/serial/impl=pace"]
	if pace == nil || len(pace.results) != 2 || pace.results[1].metrics["ns/op"] != 40 {
		t.Fatalf("pace's runs = %+v; want two, the second at 40 ns/op", pace)
	}
	th := rs.byName["BenchmarkLocal/keys=1/admit/serial/impl=throttled"]
	if th == nil || len(th.results) != 1 || len(th.failures) != 1 {
		t.Fatalf("throttled's runs = %+v; want one result and one failure", th)
	}
	if f := th.failures[0]; f.round != 1 || !strings.HasSuffix(f.msg, "the last: boom") {
		t.Errorf("failure = %+v; want run 1 with its first message", f)
	}
	if r := rs.byName["BenchmarkRedis/keys=1/admit/serial/impl=pace"]; r == nil || r.results[0].metrics["srv-µs/op"] != 10 {
		t.Errorf("the Redis benchmark's srv-µs/op was not read: %+v", r)
	}
}

// TestTableRatios: a ratio is taken between runs of the same round only.
func TestTableRatios(t *testing.T) {
	tab := parsed(t).table("BenchmarkLocal", "pace")
	if len(tab.groups) != 1 || tab.groups[0] != "BenchmarkLocal/keys=1/admit/serial" {
		t.Fatalf("groups = %v", tab.groups)
	}
	c := tab.cells[tab.groups[0]]["throttled"]
	if c.ratio != 4 || c.lo != 4 || c.hi != 4 || c.runs != 1 {
		t.Errorf("throttled's cell = %+v; want ratio 4 from round 0 alone", c)
	}
	if p := tab.cells[tab.groups[0]]["pace"]; p.ns != 45 {
		t.Errorf("pace's median = %v; want 45", p.ns)
	}
	if err := checkPace(parsed(t), true); err != nil {
		t.Errorf("checkPace: %v", err)
	}
}

func TestCheckPaceFailure(t *testing.T) {
	rs := newResults()
	out := "BenchmarkLocal/keys=1/admit/serial/impl=pace-2 \t--- FAIL: BenchmarkLocal/keys=1/admit/serial/impl=pace-2\n    x_test.go:1: wrong path\n"
	if err := rs.parse(0, strings.NewReader(out)); err != nil {
		t.Fatal(err)
	}
	if err := checkPace(rs, false); err == nil || !strings.Contains(err.Error(), "wrong path") {
		t.Errorf("checkPace with pace failing = %v; want its message", err)
	}
	if err := checkPace(newResults(), false); err == nil {
		t.Error("checkPace with no result = nil; want an error")
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(c.in); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("median(%v) = %v; want %v", c.in, got, c.want)
		}
	}
}

// TestDocument: the page and the chart are written from a record, the
// chart is well-formed XML, and every implementation has its column.
func TestDocument(t *testing.T) {
	rec := record{Command: "go run ./bench/cmd/report", Count: 2, Benchtime: "1x", Rounds: runs,
		Memory: map[string]bench.Memory{"pace": {Keys: 10, Held: 10, Live: 330, Idle: 0, Len: 0, Flood: time.Millisecond}}}
	d := document{rec: rec, rs: parsed(t)}
	md := string(d.markdown())
	for _, impl := range bench.Local() {
		if !strings.Contains(md, impl.Title) {
			t.Errorf("the page does not name %s", impl.Title)
		}
	}
	for _, want := range []string{"| keys=1 | admit | serial | 45 ns | — | — | — | 4×", "failed in 1 of 2 runs", "| pace | 33.0 |"} {
		if !strings.Contains(md, want) {
			t.Errorf("the page lacks %q:\n%s", want, md)
		}
	}
	dec := xml.NewDecoder(bytes.NewReader(d.chart()))
	for {
		_, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the chart is not well-formed XML: %v", err)
		}
	}
}

func TestThousands(t *testing.T) {
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 1000000: "1,000,000", 65536: "65,536"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q; want %q", n, got, want)
		}
	}
}

// TestDocumentKeepsLoopback: the section cmd/loopback wrote is kept as it
// is, before the peers' bugs, and the page reads back to the same section.
func TestDocumentKeepsLoopback(t *testing.T) {
	section := []byte(bench.LoopbackBegin + "## Over loopback: what a server sees\n\n| 1 | admit |\n" + bench.LoopbackEnd)
	d := document{rec: record{Command: "go run ./bench/cmd/report", Count: 2, Benchtime: "1x", Rounds: runs}, rs: parsed(t), loopback: section}
	md := d.markdown()
	if got := bench.LoopbackSection(md); !bytes.Equal(got, section) {
		t.Fatalf("the page's loopback section = %q; want %q", got, section)
	}
	if i, j := bytes.Index(md, section), bytes.Index(md, []byte("## The peers' own bugs")); i < 0 || j < i {
		t.Errorf("the loopback section at %d, the peers' bugs at %d; want it before them", i, j)
	}
}
