package main

import (
	"bufio"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// A result is one benchmark line of one run.
type result struct {
	round   int
	n       int64
	metrics map[string]float64 // by unit: "ns/op", "B/op", "allocs/op", "srv-µs/op"
}

// A failure is one benchmark that failed in one run, with its first message.
type failure struct {
	round int
	msg   string
}

// series holds every run of one benchmark.
type series struct {
	results  []result
	failures []failure
}

// results holds every benchmark of every run, by full name (without the
// -GOMAXPROCS suffix), and the names in the order they first ran.
type results struct {
	byName map[string]*series
	names  []string
}

func newResults() *results { return &results{byName: map[string]*series{}} }

var procSuffix = regexp.MustCompile(`-\d+$`)

// parse reads the output of one run of the benchmark binary and adds its
// benchmarks, and its failures with their first message, to rs.
func (rs *results) parse(round int, r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	var failed *failure // the failure whose message comes next
	for sc.Scan() {
		line := sc.Text()
		if failed != nil && strings.HasPrefix(line, "    ") {
			if failed.msg == "" {
				failed.msg = strings.TrimSpace(line)
			}
			continue
		}
		failed = nil
		if i := strings.Index(line, "--- FAIL: "); i >= 0 {
			name := strings.Fields(line[i+len("--- FAIL: "):])
			if len(name) == 0 {
				continue
			}
			s := rs.get(procSuffix.ReplaceAllString(name[0], ""))
			s.failures = append(s.failures, failure{round: round})
			failed = &s.failures[len(s.failures)-1]
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		res := result{round: round, n: n, metrics: map[string]float64{}}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				break
			}
			res.metrics[f[i+1]] = v
		}
		s := rs.get(procSuffix.ReplaceAllString(f[0], ""))
		s.results = append(s.results, res)
	}
	return sc.Err()
}

func (rs *results) get(name string) *series {
	s := rs.byName[name]
	if s == nil {
		s = &series{}
		rs.byName[name] = s
		rs.names = append(rs.names, name)
	}
	return s
}

// A cell is one implementation on one benchmark group, over all runs.
type cell struct {
	ns       float64 // median ns/op
	ratio    float64 // median over runs of ns/op ÷ the reference's in the same run; 0 if none
	lo, hi   float64 // the lowest and highest of those ratios
	runs     int     // runs with a result
	failures []failure
	metrics  map[string]float64 // medians of every metric
}

// split cuts a benchmark name "BenchmarkLocal/keys=1/admit/serial/impl=pace"
// into its group "BenchmarkLocal/keys=1/admit/serial" and implementation
// "pace".
func split(name string) (group, impl string, ok bool) {
	i := strings.LastIndex(name, "/impl=")
	if i < 0 {
		return "", "", false
	}
	return name[:i], name[i+len("/impl="):], true
}

// A table is the cells of every implementation in every group under one
// prefix, the groups in the order they ran.
type table struct {
	groups []string
	cells  map[string]map[string]*cell // group, implementation
}

// table gathers, for every group under prefix, the cells of every
// implementation, with ratios to ref measured in the same run.
func (rs *results) table(prefix, ref string) table {
	t := table{cells: map[string]map[string]*cell{}}
	for _, name := range rs.names {
		s := rs.byName[name]
		group, impl, ok := split(name)
		if !ok || !strings.HasPrefix(group, prefix+"/") {
			continue
		}
		if t.cells[group] == nil {
			t.cells[group] = map[string]*cell{}
			t.groups = append(t.groups, group)
		}
		c := &cell{runs: len(s.results), failures: s.failures, metrics: map[string]float64{}}
		units := map[string][]float64{}
		for _, r := range s.results {
			for u, v := range r.metrics {
				units[u] = append(units[u], v)
			}
		}
		for u, vs := range units {
			c.metrics[u] = median(vs)
		}
		c.ns = c.metrics["ns/op"]
		if refs := rs.byName[group+"/impl="+ref]; refs != nil {
			var ratios []float64
			for _, r := range s.results {
				for _, p := range refs.results {
					if p.round == r.round && p.metrics["ns/op"] > 0 {
						ratios = append(ratios, r.metrics["ns/op"]/p.metrics["ns/op"])
					}
				}
			}
			if len(ratios) > 0 {
				c.ratio = median(ratios)
				c.lo, c.hi = slices.Min(ratios), slices.Max(ratios)
			}
		}
		t.cells[group][impl] = c
	}
	return t
}

// median returns the median of vs (the mean of the middle two for an even
// count), or 0 for none.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
