package bench

import "testing"

// BenchmarkHTTP compares the net/http middlewares (see HTTP) around an
// empty handler, keyed by the connection's IP address, on one hot client
// and on 10,000 clients in a fixed pseudo-random order, admit and refuse
// paths, serial and parallel. impl=bare is the empty handler alone: a
// middleware's overhead is its time less bare's.
func BenchmarkHTTP(b *testing.B) {
	var loads []workload
	for _, w := range workloads(false) {
		if !w.flood && w.keys <= HTTPKeys {
			loads = append(loads, w)
		}
	}
	runAll(b, HTTP(), loads, setup{})
}
