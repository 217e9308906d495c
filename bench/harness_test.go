package bench

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
)

// A workload is a set of keys and the order in which decisions visit them.
type workload struct {
	name string
	keys int
	// flood: on the admit path, every decision is on a key the instance has
	// never seen (each key once, then a fresh instance made before the timer
	// takes over); on the refuse path, the keys are all spent beforehand
	// like the others'.
	flood bool
	// refuse reports whether the refuse path runs on this workload.
	refuse bool
}

// workloads returns the hot key, 10,000 keys and the flood of a million
// keys (1,000 and 5,000 under -short, where the benchmarks only
// smoke-test); refuseFlood says whether the refuse path runs on the million.
func workloads(refuseFlood bool) []workload {
	mid, big := 10_000, 1_000_000
	if testing.Short() {
		mid, big = 1_000, 5_000
	}
	return []workload{
		{name: "keys=1", keys: 1, refuse: true},
		{name: fmt.Sprintf("keys=%d", mid), keys: mid, refuse: true},
		{name: fmt.Sprintf("keys=%d", big), keys: big, flood: true, refuse: refuseFlood},
	}
}

// setup is how a group of benchmarks runs: with how many goroutines in
// parallel, and what it reports besides the defaults.
type setup struct {
	// callers is the number of goroutines of the parallel benchmarks; 0
	// means one per GOMAXPROCS.
	callers int
	// measure, if set, is called before the timer starts and returns a
	// function called after it stops, to report metrics of its own.
	measure func(b *testing.B) func()
}

// runAll runs every workload, path and mode on every implementation, the
// implementations side by side at the innermost level so that their ratios
// come from the same minute of the machine. PACE_BENCH_REVERSE=1 runs the
// implementations in the opposite order, so that alternate runs cancel a
// drift in the machine's load.
func runAll(b *testing.B, impls []Impl, loads []workload, s setup) {
	if reversed() {
		impls = slices.Clone(impls)
		slices.Reverse(impls)
	}
	for _, w := range loads {
		for _, admit := range []bool{true, false} {
			if !admit && !w.refuse {
				continue
			}
			path := "admit"
			if !admit {
				path = "refuse"
			}
			for _, parallel := range []bool{false, true} {
				mode := "serial"
				if parallel {
					mode = "parallel"
				}
				for _, impl := range impls {
					if !admit && !refuses(impl, w) {
						continue
					}
					var fx fixture
					b.Run(w.name+"/"+path+"/"+mode+"/impl="+impl.Name, func(b *testing.B) {
						run(b, impl, w, admit, parallel, s, &fx)
					})
					fx.close(b)
				}
			}
		}
	}
}

// refuses reports whether impl has a refuse path on w: the baseline limits
// nothing, and a library that keeps fewer keys than w has forgets spent
// keys.
func refuses(impl Impl, w workload) bool {
	return !impl.Baseline && (impl.MaxKeys == 0 || w.keys <= impl.MaxKeys)
}

// A fixture is an instance with its keys, set up before the timer.
type fixture struct {
	d    Decider
	keys []string
}

// close closes the fixture's instance, if it was set up.
func (fx *fixture) close(b *testing.B) {
	if fx.d != nil {
		if err := fx.d.Close(); err != nil {
			b.Error(err)
		}
		*fx = fixture{}
	}
}

// run benchmarks one implementation on one workload, path and mode, and
// fails unless every decision was the one the path is named after, without
// error. Outside the flood, the instance and its keys are set up at the
// first of the benchmark's runs (one per b.N tried) and kept in fx for the
// others: a decision under Admit or Refuse leaves every key on its path.
func run(b *testing.B, impl Impl, w workload, admit, parallel bool, s setup, fx *fixture) {
	b.ReportAllocs()
	limit := Refuse
	switch {
	case admit && w.flood:
		limit = Flood
	case admit:
		limit = Admit
	}
	order := cachedOrder(w.keys)
	rounds := 1
	if admit && w.flood {
		rounds = b.N/w.keys + 2 // +1 for the goroutines of RunParallel that overshoot
	}
	ds := make([]Decider, rounds)
	keys := make([][]string, rounds)
	if admit && w.flood {
		for r := range ds {
			d, err := impl.New(limit)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() {
				if err := d.Close(); err != nil {
					b.Error(err)
				}
			})
			ds[r], keys[r] = d, keySet(b, d, w.keys)
		}
	} else {
		if fx.d == nil {
			d, err := impl.New(limit)
			if err != nil {
				b.Fatal(err)
			}
			*fx = fixture{d: d, keys: keySet(b, d, w.keys)}
			prefill(b, fx.d, fx.keys, admit)
		}
		ds[0], keys[0] = fx.d, fx.keys
	}

	var admitted, refused, failed atomic.Int64
	var firstErr atomic.Pointer[error]
	tally := func(a, r, f int64, err error) {
		admitted.Add(a)
		refused.Add(r)
		failed.Add(f)
		if err != nil {
			firstErr.CompareAndSwap(nil, &err)
		}
	}
	decide := func(allow func(string) (bool, error), key string, a, r, f *int64, last *error) {
		ok, err := allow(key)
		switch {
		case err != nil:
			*f++
			*last = err
		case ok:
			*a++
		default:
			*r++
		}
	}
	var after func()
	if s.measure != nil {
		after = s.measure(b)
	}
	n := len(order)
	b.ResetTimer()
	switch {
	case !parallel:
		var a, r, f int64
		var err error
		if rounds > 1 {
			allows := make([]func(string) (bool, error), rounds)
			for i := range b.N {
				round, j := i/w.keys, i%w.keys
				if allows[round] == nil {
					allows[round] = allowFunc(ds[round])
				}
				decide(allows[round], keys[round][order[j]], &a, &r, &f, &err)
			}
		} else {
			allow, ks := allowFunc(ds[0]), keys[0]
			for i, j := 0, 0; i < b.N; i++ {
				decide(allow, ks[order[j]], &a, &r, &f, &err)
				if j++; j == n {
					j = 0
				}
			}
		}
		tally(a, r, f, err)
	case rounds > 1:
		var next atomic.Int64
		setParallelism(b, s.callers)
		b.RunParallel(func(pb *testing.PB) {
			var a, r, f int64
			var err error
			allows := make([]func(string) (bool, error), rounds)
			for pb.Next() {
				i := int(next.Add(1) - 1)
				round, j := i/w.keys, i%w.keys
				if allows[round] == nil {
					allows[round] = allowFunc(ds[round])
				}
				decide(allows[round], keys[round][order[j]], &a, &r, &f, &err)
			}
			tally(a, r, f, err)
		})
	default:
		var start atomic.Int64
		ks := keys[0]
		setParallelism(b, s.callers)
		b.RunParallel(func(pb *testing.PB) {
			var a, r, f int64
			var err error
			allow := allowFunc(ds[0])
			j := int(start.Add(7919)) % n // each goroutine walks the order from its own place
			for pb.Next() {
				decide(allow, ks[order[j]], &a, &r, &f, &err)
				if j++; j == n {
					j = 0
				}
			}
			tally(a, r, f, err)
		})
	}
	b.StopTimer()
	if after != nil {
		after()
	}
	if f := failed.Load(); f > 0 {
		b.Fatalf("%s: %d of %d decisions failed; the last: %v", impl.Name, f, b.N, *firstErr.Load())
	}
	want, got := admitted.Load(), refused.Load()
	if !admit {
		want, got = got, want
	}
	if got != 0 || want != int64(b.N) {
		b.Fatalf("%s: %d admitted and %d refused of %d decisions; the benchmark measures the wrong path",
			impl.Name, admitted.Load(), refused.Load(), b.N)
	}
}

// allowFunc returns the function one goroutine decides with on d: d's
// Worker if it has one (a Decider with per-goroutine state, such as a
// response writer), else d.Allow.
func allowFunc(d Decider) func(string) (bool, error) {
	if w, ok := d.(interface {
		Worker() func(string) (bool, error)
	}); ok {
		return w.Worker()
	}
	return d.Allow
}

// setParallelism makes RunParallel run callers goroutines (at least; a
// multiple of GOMAXPROCS), or one per GOMAXPROCS when callers is 0.
func setParallelism(b *testing.B, callers int) {
	if callers > 0 {
		p := runtime.GOMAXPROCS(0)
		b.SetParallelism((callers + p - 1) / p)
	}
}

// keySet returns the keys of a workload of n keys for d: shared between
// instances, or in d's own namespace.
func keySet(b *testing.B, d Decider, n int) []string {
	b.Helper()
	var keys []string
	if nd, ok := d.(Namespacer); ok {
		var err error
		if keys, err = Keys(nd.Namespace(), n); err != nil {
			b.Fatal(err)
		}
	} else {
		keys = cachedKeys(b, n)
	}
	if len(keys) != n {
		b.Fatalf("%d keys; want %d", len(keys), n)
	}
	return keys
}

// prefill makes one decision on every key before the timer, from a few
// goroutines at once (the keys of an instance on Redis take a round trip
// each): under Admit it creates the state every decision will find, under
// Refuse it spends every key, so that the timed decisions all refuse.
func prefill(b *testing.B, d Decider, keys []string, admit bool) {
	b.Helper()
	const workers = 16
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(keys); i += workers {
				ok, err := d.Allow(keys[i])
				if err == nil && !ok {
					err = fmt.Errorf("the first decision on key %d refused", i)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	if l, ok := d.(Lener); ok && !admit && l.Len() != len(keys) {
		b.Fatalf("Len() = %d after spending %d keys", l.Len(), len(keys))
	}
}

var (
	cacheMu sync.Mutex
	keyMemo = map[int][]string{}
	ordMemo = map[int][]int32{}
)

// cachedKeys returns Keys("", n), built once per process.
func cachedKeys(b *testing.B, n int) []string {
	cacheMu.Lock()
	defer cacheMu.Unlock()
	if keys, ok := keyMemo[n]; ok {
		return keys
	}
	keys, err := Keys("", n)
	if err != nil {
		b.Fatal(err)
	}
	keyMemo[n] = keys
	return keys
}

// cachedOrder returns Order(n), built once per process.
func cachedOrder(n int) []int32 {
	cacheMu.Lock()
	defer cacheMu.Unlock()
	if o, ok := ordMemo[n]; ok {
		return o
	}
	o := Order(n)
	ordMemo[n] = o
	return o
}
