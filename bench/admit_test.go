package bench

import (
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"testing"

	"github.com/ratepace/pace"
)

// byHand is the decision a service writes into its handler instead of a
// middleware: the connection's address parsed, one
// Reserve on the IP address, and the two IETF fields set, the RateLimit
// line made for the request; a refusal answers 429 with Retry-After.
var byHand = Middleware{Name: "by-hand", Title: "by hand", Module: "github.com/ratepace/pace",
	Setup: "netip.ParseAddrPort(r.RemoteAddr); pace.Reserve(addr.String()); RateLimit-Policy and RateLimit set",
	Wrap: func(l Limit, next http.Handler) (http.Handler, func() error, error) {
		p, err := pace.New(l.Rate)
		if err != nil {
			return nil, nil, err
		}
		policy := []string{fmt.Sprintf(`"by-hand";q=%d;w=1`, p.Burst())}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ap, err := netip.ParseAddrPort(r.RemoteAddr)
			if err != nil {
				http.Error(w, "bad address", http.StatusBadRequest)
				return
			}
			res := p.Reserve(ap.Addr().String())
			var buf [64]byte
			line := append(buf[:0], `"by-hand";r=`...)
			line = strconv.AppendInt(line, int64(res.Remaining()), 10)
			line = append(line, ";t=1"...)
			h := w.Header()
			h["Ratelimit-Policy"], h["Ratelimit"] = policy, []string{string(line)}
			if !res.OK() {
				h["Retry-After"] = []string{strconv.Itoa(int(res.RetryAfter().Seconds() + 0.999))}
				w.WriteHeader(http.StatusTooManyRequests)
				return
			}
			next.ServeHTTP(w, r)
		}), nil, nil
	}}

// BenchmarkAdmitPath measures the middleware's admit path from outside
// httplimit: pace's middleware against the same decision written by hand
// (byHand), against go-chi/httprate and the empty handler alone, on the
// admit path at 10,000 clients (1,000 under -short), serial and parallel,
// side by side in one run, with allocations. With go-limiter left out (it
// refuses on this path), alternated builds of the same binary:
//
//	cd bench && go test -c -o b.test . && for i in 0 1 2 3 4 5; do
//	  PACE_BENCH_REVERSE=$((i%2)) ./b.test -test.run '^$' -test.bench AdmitPath -test.benchtime 300ms >> admit.txt; done
//	go run golang.org/x/perf/cmd/benchstat@latest -col /impl admit.txt
//
// At Admit's 10⁹ a second, pace's RateLimit item (r=999999999, every
// client's bucket full again between its requests) is one httplimit keeps
// among the lines near a large quota's top, so its one allocation here is
// the request copy that carries the request's state.
func BenchmarkAdmitPath(b *testing.B) {
	var impls []Impl
	for _, m := range append(Middlewares(nil), byHand) {
		if m.Name == "golimiter" {
			continue // refuses on this path (TestGoLimiterRefillsIntervalOverTokens)
		}
		impls = append(impls, Impl{Name: m.Name, Title: m.Title, Module: m.Module, Setup: m.Setup, Baseline: m.Baseline,
			New: func(l Limit) (Decider, error) { return newHTTPDecider(l, m.Wrap) }})
	}
	var loads []workload
	for _, w := range workloads(false) {
		if w.keys > 1 && !w.flood {
			w.refuse = false
			loads = append(loads, w)
		}
	}
	runAll(b, impls, loads, setup{})
}
