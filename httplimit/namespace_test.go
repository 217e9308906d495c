package httplimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/httplimit"
	"github.com/ratepace/pace/memory"
)

// TestNamesNeverShareState: limits of different names never share state in
// a store, whatever their names and keys contain. Limit "api" is keyed by a
// header the client chooses, limit "api:ip" by the address; a client at
// another address whose header reads "ip:192.0.2.1" must not spend the
// address 192.0.2.1's "api:ip" limit, for every kind kept in a store
// (Bucket, Slots, Shared): before the names were escaped, both store keys
// were "httplimit:api:ip:192.0.2.1".
func TestNamesNeverShareState(t *testing.T) {
	for _, kind := range []string{"bucket", "slots", "shared"} {
		t.Run(kind, func(t *testing.T) {
			clk := newClock()
			st := memory.New(memory.WithClock(clk.Now))
			one := func(name string) httplimit.Limit {
				switch kind {
				case "bucket":
					return httplimit.Bucket(st, 1, 0.001, nil, httplimit.Name(name))
				case "slots":
					return httplimit.Slots(st, 1, time.Hour, nil, httplimit.Name(name))
				}
				p, err := pace.NewShared(st, 1)
				if err != nil {
					t.Fatal(err)
				}
				return httplimit.Shared(p, nil, httplimit.Name(name))
			}
			l, err := httplimit.NewLimiter([]httplimit.Limit{one("api"), one("api:ip")})
			if err != nil {
				t.Fatal(err)
			}
			keys := func(k ...string) func(int) (string, error) {
				return func(i int) (string, error) { return k[i], nil }
			}
			var forger, victim httplimit.Ticket
			if out := l.Decide(context.Background(), &forger, keys("ip:192.0.2.1", "198.51.100.9")); out != httplimit.Admitted {
				t.Fatalf("forger: %v", out)
			}
			defer forger.Finish(200)
			if out := l.Decide(context.Background(), &victim, keys("v", "192.0.2.1")); out != httplimit.Admitted {
				_, name, _ := victim.Refusal()
				t.Fatalf("victim at 192.0.2.1: %v by %q; want admitted: limit \"api\" reached the state of \"api:ip\"", out, name)
			}
			victim.Finish(200)
		})
	}
}
