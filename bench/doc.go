// Package bench compares pace, side by side and in the same run, with the
// libraries users pick instead: golang.org/x/time/rate (one limiter per key,
// in a mutex-guarded map and in a sync.Map), github.com/sethvargo/go-limiter,
// github.com/throttled/throttled/v2, github.com/ulule/limiter/v3 and
// github.com/go-chi/httprate in process, and github.com/go-redis/redis_rate
// on Redis.
//
// It is a module of its own so that no peer ever enters the dependency graph
// of pace or of its other modules.
//
// Every implementation is reached through Impl, which turns one Limit (a
// rate and a burst) into a Decider. The benchmarks (go test -bench .) run
// each workload on each implementation in a row, so that the ratios between
// them come from the same minutes of the machine; MeasureMemory measures
// the heap that live keys hold and what is left one idle horizon later.
// The command in cmd/report runs everything and writes docs/benchmarks.md:
//
//	go run ./bench/cmd/report            # from the repository root
//	go run ./bench/cmd/report -short     # the quick smoke test that CI runs
package bench
