package settlemodel

import (
	"context"
	"errors"
	"math"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/driver"
	"github.com/ratepace/pace/internal/fakeclock"
)

// never is what RetryAfter reports for a reservation that can never fit.
const never = time.Duration(math.MaxInt64)

// Seeds are scripts for RunShared worth keeping in every backend's corpus:
// each is (centiRate, burst, requests, script).
var Seeds = []struct {
	CentiRate       uint16
	Burst, Requests uint8
	Script          []byte
}{
	{1000, 10, 0, []byte{1, 4, 0, 1, 6, 0, 2, 0, 9, 0, 16, 0, 1, 10, 0}},                    // reserve 4 and 6, settle the first at 9, wait, reserve 10
	{100, 1, 0, []byte{1, 1, 0, 2, 0, 30, 0, 32, 0, 1, 1, 0, 0, 255, 0, 1, 1, 0}},           // 1/s, burst 1: an overdraft of 29, then its debt
	{1000, 20, 3, []byte{1, 8, 0, 1, 8, 0, 0, 40, 0, 2, 0, 1, 2, 0, 0, 1, 20, 0}},           // two outstanding, the older settled late and low; 3 requests per 10 s
	{500, 0, 2, []byte{3, 5, 0, 1, 5, 0, 3, 1, 0, 0, 8, 0, 0x44, 0, 0, 1, 6, 0}},            // forgeries around an honest reservation, two replicas
	{7, 3, 0, []byte{0x81, 3, 0, 0, 100, 0, 0x82, 0, 1, 0x81, 4, 0, 0x81, 0, 0}},            // 0.07/s, key b: invalid counts 4 and 0
	{2000, 50, 5, []byte{1, 50, 0, 0, 10, 0, 2, 0, 100, 0, 200, 0, 1, 1, 0, 0x45, 0, 0}},    // settle 100 of 50, then a Reserve on the other replica
	{1000, 10, 0, []byte{1, 6, 0, 0x41, 4, 0, 2, 0, 2, 0, 8, 0, 1, 5, 0, 2, 0, 1, 6, 0, 0}}, // reserve 6 and 4 on two replicas, settle out of order, return
}

// RunShared attacks the promise of Shared.ReserveN and
// SharedReservation.Settle on store, whose clock is c (the replicas' local
// tiers read it too), under keys prefixed by ns: two replicas (two Shared
// on the one store) keep a pace of centiRate/100 units per second with a
// bucket of burst units (0: the default) and, when requests is not 0, a
// quota of that many requests per 10 s. The script, three bytes a step (op,
// a, b; op's bit 0x80 picks the key, 0x40 the replica), reserves any count
// (valid or not), settles any outstanding reservation for any amount
// (below, at or above what it reserved) at any time, forges (reserves and
// settles at 0 at once), returns, and moves the clock. The units kept and
// the requests kept are checked, per key, against Units; a count that can
// never fit must be refused as never fitting. The keys are deleted at the
// end.
func RunShared(t testing.TB, store driver.Taker, c *fakeclock.Clock, ns string, centiRate uint16, burst, requests uint8, script []byte) {
	t.Helper()
	if centiRate == 0 || len(script) > 3*150 {
		return
	}
	rate := float64(centiRate) / 100
	opts := []pace.Option{pace.WithClock(c.Now)}
	capacity := max(1, rate)
	if burst > 0 {
		opts = append(opts, pace.WithBurst(float64(burst)))
		capacity = float64(burst)
	}
	if requests > 0 {
		opts = append(opts, pace.WithQuota(float64(requests), 10*time.Second))
	}
	var replicas [2]*pace.Shared
	for i := range replicas {
		p, err := pace.NewShared(store, rate, opts...)
		if errors.Is(err, pace.ErrInvalidArgument) {
			return // a shape no limit can have (one unit refilling in under a nanosecond, say)
		}
		if err != nil {
			t.Fatal(err)
		}
		replicas[i] = p
	}
	whole := int(math.Floor(capacity + 1e-9)) // the whole units the bucket holds: ReserveN's bound
	units := map[string]*Units{}
	reqs := map[string]*Units{}
	keys := []string{ns + "a", ns + "b"}
	for _, k := range keys {
		units[k] = &Units{Rate: rate, Burst: capacity}
		reqs[k] = &Units{Rate: float64(requests) / 10, Burst: max(1, float64(requests))}
	}
	ctx := context.Background()
	defer func() {
		if d, ok := store.(interface {
			Delete(context.Context, string) error
		}); ok {
			for _, k := range keys {
				_ = d.Delete(ctx, k)
			}
		}
	}()
	type out struct {
		r    *pace.SharedReservation
		key  string
		u, q *Admission
	}
	var outs []*out
	interval := time.Duration(float64(time.Second) / rate)
	start := c.Now()
	elapsed := func() time.Duration { return c.Now().Sub(start) }
	admit := func(key string, r *pace.SharedReservation, n int) {
		if r.OK() {
			o := &out{r: r, key: key, u: units[key].Admit(elapsed(), n)}
			if requests > 0 {
				o.q = reqs[key].Admit(elapsed(), 1)
			}
			outs = append(outs, o)
		}
	}
	settle := func(o *out, used int) {
		if err := o.r.Settle(ctx, used); err != nil {
			t.Fatalf("Settle(%d): %v", used, err)
		}
		units[o.key].Settle(o.u, elapsed(), used)
		if o.q != nil {
			reqs[o.key].Settle(o.q, elapsed(), min(max(used, 0), 1)) // a request is kept unless settled at 0
		}
	}
	for i := 0; i+2 < len(script); i += 3 {
		op, a, b := script[i], int(script[i+1]), int(script[i+2])
		key := keys[0]
		if op&0x80 != 0 {
			key = keys[1]
		}
		p := replicas[(op>>6)&1]
		switch op & 7 {
		case 0: // advance by a/16 of an interval and b intervals
			c.Advance(time.Duration(a)*interval/16 + time.Duration(b)*interval)
		case 1: // reserve a units (0 to 255: some beyond the burst)
			r, err := p.ReserveN(ctx, key, a)
			if err != nil {
				t.Fatalf("step %d: ReserveN(%d): %v", i/3, a, err)
			}
			if (a < 1 || a > whole) && (r.OK() || r.RetryAfter() != never) {
				t.Fatalf("step %d: ReserveN(%d) with a bucket of %d = %v, retry %v; want refused, never", i/3, a, whole, r.OK(), r.RetryAfter())
			}
			admit(key, &r, a)
		case 2, 4, 6: // settle outstanding reservation a at b (4: and again; 6: return it)
			if len(outs) == 0 {
				continue
			}
			j := a % len(outs)
			o := outs[j]
			switch op & 7 {
			case 6:
				if err := o.r.Return(ctx); err != nil {
					t.Fatalf("step %d: Return: %v", i/3, err)
				}
				units[o.key].Settle(o.u, elapsed(), 0)
				if o.q != nil {
					reqs[o.key].Settle(o.q, elapsed(), 0)
				}
			default:
				settle(o, b)
				if op&7 == 4 {
					if err := o.r.Settle(ctx, b); err != nil { // disarmed: does nothing
						t.Fatalf("step %d: second Settle: %v", i/3, err)
					}
				}
			}
			outs = slices.Delete(outs, j, j+1)
		case 3: // a forgery of a%whole+1 units: reserved and settled at 0 at once
			n := a%max(whole, 1) + 1
			r, err := p.ReserveN(ctx, key, n)
			if err != nil {
				t.Fatalf("step %d: ReserveN(%d): %v", i/3, n, err)
			}
			if r.OK() {
				o := &out{r: &r, key: key, u: units[key].Admit(elapsed(), n)}
				if requests > 0 {
					o.q = reqs[key].Admit(elapsed(), 1)
				}
				settle(o, 0)
			}
		case 5: // Reserve: one unit, never settled
			r, err := p.Reserve(ctx, key)
			if err != nil {
				t.Fatalf("step %d: Reserve: %v", i/3, err)
			}
			if r.OK() {
				units[key].Admit(elapsed(), 1)
				if requests > 0 {
					reqs[key].Admit(elapsed(), 1)
				}
			}
		}
	}
	for _, k := range keys {
		units[k].Check(t, k+" (units)")
		if requests > 0 {
			reqs[k].Check(t, k+" (requests)")
		}
	}
}

// Fuzz is the body of a backend's FuzzSharedSettle: it adds Seeds to f's
// corpus and runs RunShared on store, whose clock is c, in a namespace of
// its own for every input.
func Fuzz(f *testing.F, store driver.Taker, c *fakeclock.Clock) {
	for _, s := range Seeds {
		f.Add(s.CentiRate, s.Burst, s.Requests, s.Script)
	}
	var run atomic.Int64
	f.Fuzz(func(t *testing.T, centiRate uint16, burst, requests uint8, script []byte) {
		ns := "settle" + strconv.FormatInt(run.Add(1), 10) + ":"
		RunShared(t, store, c, ns, centiRate, burst, requests, script)
	})
}
