package httplimit_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/httplimit"
)

// TestOptionOutOfPlace: httplimit has one option type; an option given to
// what it does not configure is an error naming it, wrapping
// pace.ErrInvalidArgument, never ignored.
func TestOptionOutOfPlace(t *testing.T) {
	p, err := pace.New(10)
	if err != nil {
		t.Fatal(err)
	}
	limit := func(opts ...httplimit.Option) []httplimit.Limit {
		return []httplimit.Limit{httplimit.Pace(p, httplimit.ClientIP(), opts...)}
	}
	cases := []struct {
		name string
		err  error
	}{
		{"Name", second(httplimit.New(limit(), httplimit.Name("x")))},
		{"ReturnOn", second(httplimit.New(limit(), httplimit.ReturnOn(401)))},
		{"TrustProxies", second(httplimit.New(limit(), httplimit.TrustProxies()))},
		{"DryRun", second(httplimit.New(limit(httplimit.DryRun())))},
		{"IPv6Bits", second(httplimit.New(limit(httplimit.IPv6Bits(48))))},
		{"OnRefusal", second(httplimit.NewLimiter(limit(httplimit.OnRefusal(nil))))},
		{"Name", second(httplimit.ClientIPWith(httplimit.Name("x")))},
		{"LegacyHeaders", second(httplimit.ClientIPWith(httplimit.LegacyHeaders()))},
	}
	for _, c := range cases {
		if !errors.Is(c.err, pace.ErrInvalidArgument) || !strings.Contains(c.err.Error(), c.name) {
			t.Errorf("%s out of place: err = %v; want an error naming it, wrapping ErrInvalidArgument", c.name, c.err)
		}
	}
	// In place, the same options are accepted.
	if _, err := httplimit.New(limit(httplimit.Name("x"), httplimit.ReturnOn(401)), httplimit.DryRun()); err != nil {
		t.Errorf("options in place: %v", err)
	}
	if _, err := httplimit.ClientIPWith(httplimit.TrustProxies(), httplimit.IPv6Bits(48)); err != nil {
		t.Errorf("ClientIPWith with its options: %v", err)
	}
}

func second[T any](_ T, err error) error { return err }
