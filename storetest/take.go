package storetest

// The subtests of Take, TakeMany and Refund: several bucket shapes on one
// key, taken all or nothing, and the refund of a take.
//
// Times come from the store: a Grant's Receipt carries the store's clock
// reading of the decision (At) and the arrival times the take left
// (Reserved), so the suite checks the arithmetic against the store's own
// clock, to the nanosecond, on a real server too. Where a decision's time is
// not reported (a refusal, a refund), it lies between the readings of the
// calls before and after it; the results are monotonic in that time, so the
// suite checks them against both ends. Readings without a take of the key
// come from storeNow, a take of cost zero on a key of its own.

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/driver"
)

// Rates of the Take subtests, in takes per second, slow enough that nothing
// refills while a subtest runs.
const (
	perHalfHour = 1.0 / 1800
	perTwoHours = 1.0 / 7200
)

// spec is a bucket shape of the Take subtests: capacity takes of cost one,
// refilled at perSecond.
type spec struct{ capacity, perSecond float64 }

func (s spec) String() string {
	switch {
	case s.perSecond >= 1:
		return fmt.Sprintf("%g at %.4g/s", s.capacity, s.perSecond)
	case s.perSecond*60 >= 1:
		return fmt.Sprintf("%g at %.4g/min", s.capacity, s.perSecond*60)
	}
	return fmt.Sprintf("%g at %.4g/h", s.capacity, s.perSecond*3600)
}

// shapes is the shapes argument of Take, TakeMany and Refund, and its
// description for messages.
type shapes struct {
	b     []driver.Shape
	specs []spec
	desc  string
}

func (c *check) shapes(specs ...spec) shapes {
	c.t.Helper()
	s := shapes{b: make([]driver.Shape, len(specs)), specs: specs}
	descs := make([]string, len(specs))
	for i, sp := range specs {
		b, err := driver.NewShape(sp.capacity, sp.perSecond, 1)
		if err != nil {
			c.t.Fatalf("NewBucket(%v, %v, 1): %v", sp.capacity, sp.perSecond, err)
		}
		s.b[i], descs[i] = b, sp.String()
	}
	s.desc = "[" + strings.Join(descs, ", ") + "]"
	return s
}

// interval is the refill time of one take of shape i.
func (s shapes) interval(i int) time.Duration { return s.b[i].Interval() }

// clockShape is a shape of cost zero: a take of it always fits and leaves
// the bucket full, so a store keeps nothing for it.
var clockShape = func() driver.Shape {
	b, err := driver.NewShape(1, 1, 0)
	if err != nil {
		panic(err)
	}
	return b
}()

func showGrant(g driver.Grant) string {
	return fmt.Sprintf("{OK:%v Remaining:%d RetryAfter:%v Reset:%v}", g.OK, g.Remaining, g.RetryAfter, g.Reset)
}

func (c *check) take(k string, s shapes) driver.Grant {
	c.t.Helper()
	g, err := c.tk.Take(c.ctx, c.key(k), s.b)
	if err != nil {
		c.t.Fatalf("Take(%q, %s) = %s, %v; want no error", k, s.desc, showGrant(g), err)
	}
	return g
}

// admit takes and fails unless the take was admitted.
func (c *check) admit(k string, s shapes) driver.Grant {
	c.t.Helper()
	g := c.take(k, s)
	if !g.OK {
		c.t.Fatalf("Take(%q, %s) = %s, nil; want OK", k, s.desc, showGrant(g))
	}
	return g
}

// admitIfTaker is admit when the subtest has a driver.Taker, and reports the
// zero Grant when it has not.
func (c *check) admitIfTaker(k string, s shapes) driver.Grant {
	c.t.Helper()
	if c.tk == nil {
		return driver.Grant{}
	}
	return c.admit(k, s)
}

// takeIfTaker is take when the subtest has a driver.Taker; ok is false when
// it has not.
func (c *check) takeIfTaker(k string, s shapes) (g driver.Grant, ok bool) {
	c.t.Helper()
	if c.tk == nil {
		return driver.Grant{}, false
	}
	return c.take(k, s), true
}

func (c *check) refund(k string, s shapes, r driver.Receipt) {
	c.t.Helper()
	if err := c.tk.Refund(c.ctx, c.key(k), s.b, r); err != nil {
		c.t.Fatalf("Refund(%q, %s, receipt of a take) = %v; want nil", k, s.desc, err)
	}
}

// storeNow reads the store's clock: the At of a take of cost zero.
func (c *check) storeNow() time.Duration {
	c.t.Helper()
	g, err := c.tk.Take(c.ctx, c.key("clock"), []driver.Shape{clockShape})
	if err != nil || !g.OK {
		c.t.Fatalf("Take(%q, [a shape of cost 0]) = %s, %v; want OK, nil", "clock", showGrant(g), err)
	}
	return g.Receipt.At
}

// wantGrant checks g, the outcome of a take of s at k, against want, whose
// durations were computed for an instant from which the store's clock may
// have moved by tol since: OK exactly, RetryAfter and Reset within tol, and
// Remaining exactly when tol is 0 (within one of it otherwise: a refund out
// of order gives back all but the time since its take, which may cost a
// whole take at the boundary). An admitted take's Remaining and Reset must
// also be exactly what its receipt implies (driver.RemainingAll of Reserved at
// At); a refused one reports Remaining 0 and the zero Receipt.
func (c *check) wantGrant(k string, s shapes, g, want driver.Grant, tol time.Duration) {
	c.t.Helper()
	call := fmt.Sprintf("Take(%q, %s) = %s", k, s.desc, showGrant(g))
	if g.OK != want.OK {
		c.t.Fatalf("%s; want %s (within %v)", call, showGrant(want), tol)
	}
	off := g.Remaining - want.Remaining
	if off != 0 && (tol == 0 || off < -1 || off > 1) || (g.RetryAfter-want.RetryAfter).Abs() > tol || (g.Reset-want.Reset).Abs() > tol {
		c.t.Errorf("%s; want %s (durations within %v)", call, showGrant(want), tol)
	}
	if !g.OK {
		if g.Remaining != 0 || g.Receipt != (driver.Receipt{}) {
			c.t.Errorf("%s with receipt %+v; want Remaining 0 and the zero Receipt when refused", call, g.Receipt)
		}
		return
	}
	n := len(s.b)
	remaining, reset := driver.RemainingAll(s.b, g.Receipt.Reserved[:n], g.Receipt.At)
	if g.Remaining != remaining || g.Reset != reset {
		c.t.Errorf("%s with receipt At %v, Reserved %v; want Remaining %d and Reset %v, as its receipt implies",
			call, g.Receipt.At, g.Receipt.Reserved[:n], remaining, reset)
	}
}

// wantGrants takes at k once per element of want and checks each outcome
// against it (wantGrant), within the time the store's clock has moved since
// t0.
func (c *check) wantGrants(k string, s shapes, t0 time.Duration, want ...driver.Grant) []driver.Grant {
	c.t.Helper()
	got := make([]driver.Grant, len(want))
	for i, w := range want {
		got[i] = c.take(k, s)
		c.wantGrant(k, s, got[i], w, c.storeNow()-t0)
	}
	return got
}

// wantNoKey fails if the text of err shows a key the suite passed.
func (c *check) wantNoKey(call string, err error) {
	c.t.Helper()
	if err != nil && (strings.Contains(err.Error(), c.prefix) || strings.Contains(err.Error(), strings.Repeat("k", 64))) {
		c.t.Errorf("%s: error %q shows the key; errors must never echo a key", call, err)
	}
}

func testTakeInvalid(c *check) {
	one := c.shapes(spec{2, perHour})
	receipt := c.admit("r", one).Receipt
	tooMany := slices.Repeat(one.b, driver.MaxShapes+1)
	for _, bad := range []struct {
		desc string
		b    []driver.Shape
	}{
		{"nil", nil},
		{"[]", []driver.Shape{}},
		{fmt.Sprintf("%d shapes", driver.MaxShapes+1), tooMany},
		{"[the zero Bucket]", []driver.Shape{{}}},
		{"[2 at 1/h, the zero Bucket]", []driver.Shape{one.b[0], {}}},
	} {
		g, err := c.tk.Take(c.ctx, c.key("k"), bad.b)
		call := fmt.Sprintf("Take(%q, %s) = %s, %v", "k", bad.desc, showGrant(g), err)
		c.wantErr(call, err, pace.ErrInvalidArgument)
		c.wantNoKey(call, err)
		if g.OK {
			c.t.Errorf("%s; want not OK", call)
		}
		err = c.tk.TakeMany(c.ctx, []string{c.key("k")}, bad.b, make([]driver.Grant, 1))
		call = fmt.Sprintf("TakeMany([%q], %s) = %v", "k", bad.desc, err)
		c.wantErr(call, err, pace.ErrInvalidArgument)
		c.wantNoKey(call, err)
		err = c.tk.Refund(c.ctx, c.key("r"), bad.b, receipt)
		call = fmt.Sprintf("Refund(%q, %s, receipt of a take) = %v", "r", bad.desc, err)
		c.wantErr(call, err, pace.ErrInvalidArgument)
		c.wantNoKey(call, err)
	}
	for _, k := range badKeys {
		g, err := c.tk.Take(c.ctx, k, one.b)
		call := fmt.Sprintf("Take(%s, %s) = %s, %v", showKey(k), one.desc, showGrant(g), err)
		c.wantErr(call, err, pace.ErrInvalidArgument)
		c.wantNoKey(call, err)
		err = c.tk.Refund(c.ctx, k, one.b, receipt)
		call = fmt.Sprintf("Refund(%s, %s, receipt of a take)", showKey(k), one.desc)
		c.wantErr(call, err, pace.ErrInvalidArgument)
		c.wantNoKey(call, err)
		// A bad key among good ones fails the whole call, which takes from none.
		err = c.tk.TakeMany(c.ctx, []string{c.key("a"), k, c.key("b")}, one.b, make([]driver.Grant, 3))
		call = fmt.Sprintf("TakeMany([%q, %s, %q], %s)", "a", showKey(k), "b", one.desc)
		c.wantErr(call, err, pace.ErrInvalidArgument)
		c.wantNoKey(call, err)
	}
	for _, n := range []int{0, 1, 3} {
		err := c.tk.TakeMany(c.ctx, []string{c.key("a"), c.key("b")}, one.b, make([]driver.Grant, n))
		c.wantErr(fmt.Sprintf("TakeMany([%q, %q], %s, out of length %d)", "a", "b", one.desc, n), err, pace.ErrInvalidArgument)
	}
	// Nothing was taken, nothing given back.
	fresh := driver.Grant{OK: true, Remaining: 1, Reset: one.interval(0)}
	for _, k := range []string{"k", "a", "b"} {
		c.wantGrant(k, one, c.take(k, one), fresh, 0)
	}
	c.wantGrant("r", one, c.take("r", one), driver.Grant{OK: true, Remaining: 0, Reset: 2 * one.interval(0)}, c.storeNow()-receipt.At)
}

// testTakeGrant pins what a take reports: Remaining, Reset and RetryAfter
// from the arrival times at the decision, and the receipt.
func testTakeGrant(c *check) {
	one := c.shapes(spec{3, perHour})
	i := one.interval(0)
	t0 := c.storeNow()
	got := c.wantGrants("one", one, t0,
		driver.Grant{OK: true, Remaining: 2, Reset: i},
		driver.Grant{OK: true, Remaining: 1, Reset: 2 * i},
		driver.Grant{OK: true, Remaining: 0, Reset: 3 * i},
		driver.Grant{RetryAfter: i, Reset: 3 * i},
		driver.Grant{RetryAfter: i, Reset: 3 * i},
	)
	// The receipts, to the nanosecond: decided at the store's clock in
	// order, each take one interval after the one before.
	for n, g := range got[:3] {
		r := g.Receipt
		if r.At < t0 || n > 0 && r.At < got[n-1].Receipt.At {
			c.t.Errorf("take %d of %q: receipt At %v; want the store's clock at the decision, after %v and the take before", n+1, "one", r.At, t0)
		}
		want := r.At + i
		if n > 0 {
			want = got[n-1].Receipt.Reserved[0] + i
		}
		if r.Reserved[0] != want {
			c.t.Errorf("take %d of %q: receipt Reserved %v; want %v, one interval (%v) after the arrival time before", n+1, "one", r.Reserved[0], want, i)
		}
	}

	// Several shapes: Remaining of the tightest, Reset of the slowest to
	// refill, RetryAfter of the one that refuses.
	two := c.shapes(spec{3, perHour}, spec{2, perHalfHour})
	ia, ib := two.interval(0), two.interval(1)
	c.wantGrants("two", two, c.storeNow(),
		driver.Grant{OK: true, Remaining: 1, Reset: ia},
		driver.Grant{OK: true, Remaining: 0, Reset: 2 * ia},
		driver.Grant{RetryAfter: ib, Reset: 2 * ia}, // the second shape refuses
	)
	// Both refuse: the longer wait, whatever the order of the shapes.
	for _, k := range []string{"hour first", "half hour first"} {
		both := c.shapes(spec{1, perHour}, spec{1, perHalfHour})
		if k == "half hour first" {
			both = c.shapes(spec{1, perHalfHour}, spec{1, perHour})
		}
		c.wantGrants(k, both, c.storeNow(),
			driver.Grant{OK: true, Remaining: 0, Reset: time.Hour},
			driver.Grant{RetryAfter: time.Hour, Reset: time.Hour},
		)
	}
}

// testTakeReceiptTimes pins the unit of the receipts' times: nanoseconds of
// the store's clock, which moves with real time.
func testTakeReceiptTimes(c *check) {
	const d = 200 * time.Millisecond
	one := c.shapes(spec{1, perHour})
	start := time.Now()
	t0 := c.storeNow()
	g := c.admit("k", one)
	t1 := c.storeNow()
	if g.Receipt.At < t0 || g.Receipt.At > t1 {
		c.t.Errorf("Take(%q, %s): receipt At %v; want the store's clock at the decision, in [%v, %v]", "k", one.desc, g.Receipt.At, t0, t1)
	}
	c.wait(d)
	t2 := c.storeNow()
	elapsed := time.Since(start)
	if t2-t1 < d-time.Millisecond {
		c.t.Errorf("the store's clock moved %v while %v passed; want at least that (receipt times are nanoseconds)", t2-t1, d)
	}
	if c.cfg.advance == nil && t2-t0 > elapsed+time.Second {
		c.t.Errorf("the store's clock moved %v in %v of real time; want no faster than real time (receipt times are nanoseconds)", t2-t0, elapsed)
	}
}

func testTakeRetryAfterSuffices(c *check) {
	s := c.shapes(spec{1, 10}, spec{2, 5}) // 100ms a take; 200ms a take, 400ms of capacity
	g := c.drain("k", s, nil)
	if g.RetryAfter <= 0 || g.RetryAfter > 200*time.Millisecond {
		c.t.Fatalf("Take(%q, %s) = %s; want RetryAfter in (0, 200ms]", "k", s.desc, showGrant(g))
	}
	c.wait(g.RetryAfter)
	if g2 := c.take("k", s); !g2.OK {
		c.t.Errorf("Take(%q, %s) = %s after waiting RetryAfter %v; want OK", "k", s.desc, showGrant(g2), g.RetryAfter)
	}
}

// testTakeAllOrNothing pins that a take refused by one shape debits none:
// neither the shape that refuses nor those that would have admitted it,
// whatever their order.
func testTakeAllOrNothing(c *check) {
	for _, order := range []bool{false, true} {
		// A slow shape with room (10 at 1/h) and a tight one (1 at 1/30min),
		// which refuses the second take.
		roomy, tight := spec{10, perHour}, spec{1, perHalfHour}
		k, s := "roomy, tight", c.shapes(roomy, tight)
		if order {
			k, s = "tight, roomy", c.shapes(tight, roomy)
		}
		c.wantGrants(k, s, c.storeNow(),
			driver.Grant{OK: true, Remaining: 0, Reset: time.Hour},
			driver.Grant{RetryAfter: 30 * time.Minute, Reset: time.Hour},
			driver.Grant{RetryAfter: 30 * time.Minute, Reset: time.Hour}, // the same again: neither shape was debited
		)
		// Two of 1/h, and three of 1/2h: the third take is refused by
		// the first, which the second would admit.
		hourly, twoHourly := spec{2, perHour}, spec{3, perTwoHours}
		k, s = "hourly, two-hourly", c.shapes(hourly, twoHourly)
		if order {
			k, s = "two-hourly, hourly", c.shapes(twoHourly, hourly)
		}
		ih, i2 := c.shapes(hourly).interval(0), c.shapes(twoHourly).interval(0)
		c.wantGrants(k, s, c.storeNow(),
			driver.Grant{OK: true, Remaining: 1, Reset: i2},
			driver.Grant{OK: true, Remaining: 0, Reset: 2 * i2},
			driver.Grant{RetryAfter: ih, Reset: 2 * i2},
			driver.Grant{RetryAfter: ih, Reset: 2 * i2},
		)
	}
}

// testTakeAdmitsWhatAllAllow runs the example of docs/replicas.md: a key
// limited to 5/s (capacity 5) and 20/min (capacity 20), drained five times a
// second apart. It admits no more than either shape allows in any window,
// counted from the receipts without bucket arithmetic, and no less than both
// allow: 5 in each of the first four rounds (each begins with the 5/s shape
// full), and the 21st that the 20/min shape has refilled after 4s.
func testTakeAdmitsWhatAllAllow(c *check) {
	s := c.shapes(spec{5, 5}, spec{20, 20.0 / 60})
	var k kept
	for round := range 5 {
		if round > 0 {
			c.wait(time.Second)
		}
		c.drain("k", s, &k)
	}
	c.wantKept(&k, fmt.Sprintf("5 rounds of Take(%q, %s) a second apart", "k", s.desc), s.specs...)
	if len(k.at) < 21 {
		c.t.Errorf("5 rounds of Take(%q, %s) a second apart admitted %d; want at least 21 (5 a round, then one refilled by 20/min)", "k", s.desc, len(k.at))
	}
}

// drain takes at k until a take is refused, adds the decision times of those
// admitted to kp unless it is nil, and returns the refusal.
func (c *check) drain(k string, s shapes, kp *kept) driver.Grant {
	c.t.Helper()
	for n := 0; ; n++ {
		g := c.take(k, s)
		if !g.OK {
			return g
		}
		if n == 100 {
			c.t.Fatalf("Take(%q, %s) admitted 100 takes in a row; want a refusal", k, s.desc)
		}
		if kp != nil {
			kp.add(g.Receipt.At)
		}
	}
}

// kept is the events a key admitted and did not give back, by the store's
// clock at their decision: an account of the promise "never over pace" that
// knows no bucket arithmetic.
type kept struct{ at []time.Duration }

func (k *kept) add(at time.Duration) { k.at = append(k.at, at) }

// remove forgets one event decided at at.
func (k *kept) remove(at time.Duration) {
	if i := slices.Index(k.at, at); i >= 0 {
		k.at = slices.Delete(k.at, i, i+1)
	}
}

// wantKept fails if in some window [from, to] the kept events number more
// than rate × (to − from) + capacity of any of the specs.
func (c *check) wantKept(k *kept, what string, specs ...spec) {
	c.t.Helper()
	at := slices.Sorted(slices.Values(k.at))
	for _, sp := range specs {
		for i := range at {
			for j := i; j < len(at); j++ {
				bound := sp.perSecond*(at[j]-at[i]).Seconds() + sp.capacity
				if n := float64(j - i + 1); n > bound+1e-9 {
					c.t.Fatalf("%s: %d events kept in a window of %v; at most %.3f allowed by %s", what, j-i+1, at[j]-at[i], bound, sp)
				}
			}
		}
	}
}

// testRefundAtOnce pins that a take given back at once, latest or not, is
// given back whole: the key is as if it had not been made.
func testRefundAtOnce(c *check) {
	s := c.shapes(spec{3, perHour})
	i := s.interval(0)
	t0 := c.storeNow()
	tol := func() time.Duration { return 4 * (c.storeNow() - t0) } // a refund out of order gives back all but the time since its take
	a := c.admit("alone", s)
	c.refund("alone", s, a.Receipt)
	c.wantGrant("alone", s, c.take("alone", s), driver.Grant{OK: true, Remaining: 2, Reset: i}, tol())

	c.admit("latest", s)
	a = c.admit("latest", s)
	c.refund("latest", s, a.Receipt)
	c.wantGrant("latest", s, c.take("latest", s), driver.Grant{OK: true, Remaining: 1, Reset: 2 * i}, tol())

	x := c.admit("first", s)
	c.admit("first", s)
	c.admit("first", s)
	c.refund("first", s, x.Receipt)
	c.wantGrant("first", s, c.take("first", s), driver.Grant{OK: true, Remaining: 0, Reset: 3 * i}, tol())
	c.wantGrant("first", s, c.take("first", s), driver.Grant{RetryAfter: i, Reset: 3 * i}, tol())

	// Two refunds out of order, between which a take lands where the first
	// one given back was: at one instant, it has the At and Reserved of a
	// take still out (x), and is another take.
	z := c.admit("twice", s)
	x = c.admit("twice", s)
	c.refund("twice", s, z.Receipt)
	y := c.admit("twice", s)
	c.admit("twice", s) // w
	c.refund("twice", s, y.Receipt)
	c.refund("twice", s, x.Receipt)
	c.wantGrant("twice", s, c.take("twice", s), driver.Grant{OK: true, Remaining: 1, Reset: 2 * i}, tol()) // w and this one

	// Every shape is given back.
	two := c.shapes(spec{2, perHour}, spec{3, perTwoHours})
	i2 := two.interval(1)
	a = c.admit("two", two)
	c.admit("two", two)
	c.refund("two", two, a.Receipt)
	c.wantGrant("two", two, c.take("two", two), driver.Grant{OK: true, Remaining: 0, Reset: 2 * i2}, tol())
	c.wantGrant("two", two, c.take("two", two), driver.Grant{RetryAfter: i, Reset: 2 * i2}, tol())
}

// wantRefundLeaves refunds r at k, whose arrival time (of shape s.b[0]) is
// tat, and takes again: the new take's receipt shows the arrival time the
// refund left. The refund was decided at a store time between lo, read just
// before, and the new take's At; the documented refund (documentedRefund,
// written out here rather than calling driver.Shape.Refund, which the store
// under test may share) is monotonic in that time, so its values at both
// ends bound what the store may have left.
func (c *check) wantRefundLeaves(what, k string, s shapes, tat time.Duration, r driver.Receipt, intact bool) driver.Grant {
	c.t.Helper()
	lo := c.storeNow()
	c.refund(k, s, r)
	g := c.admit(k, s)
	hi := g.Receipt.At
	b := s.b[0]
	left := func(now time.Duration) time.Duration {
		return max(documentedRefund(b.Interval(), tat, r.At, r.Reserved[0], now, intact), hi) // the take finds the bucket full if the refund left it so
	}
	want0, want1 := left(lo), left(hi)
	if got := g.Receipt.Reserved[0] - b.Interval(); got < want0 || got > want1 {
		base := r.At
		c.t.Errorf("%s: Refund(%q, %s) then Take: arrival time %v after the refund (times from the refunded take's decision); want in [%v, %v], as Bucket.Refund leaves it from %v with the refund at [%v, %v]",
			what, k, s.desc, got-base, want0-base, want1-base, tat-base, lo-base, hi-base)
	}
	return g
}

// documentedRefund is the arrival time the Store contract says a refund at
// now leaves, for a take of interval i decided at taken that moved the
// arrival time to reserved, on a key whose arrival time is tat: the take's
// refill ends at reserved while it is intact, else no earlier than one
// interval after its decision; what of it lies after now is given back, and
// the bucket is never left above full (before now).
func documentedRefund(i, tat, taken, reserved, now time.Duration, intact bool) time.Duration {
	end := taken + i
	if intact {
		end = reserved
	}
	give := min(i, max(0, end-now))
	return max(tat-give, now)
}

// testRefundLate pins that a take given back late gives back only the part
// of it the key has not refilled: all of it while it lies wholly ahead,
// exactly what is left of it while it is intact (no refund out of order since
// it was made), and no more than what is left of one interval after its
// decision once it is not.
func testRefundLate(c *check) {
	s := c.shapes(spec{3, 1}) // 1s a take, 3s of capacity
	i := s.interval(0)

	// An intact take wholly ahead of the refill: given back whole.
	c.admit("ahead", s)
	a := c.admit("ahead", s)
	c.wait(i / 2)
	b := c.admit("ahead", s)
	c.wantRefundLeaves("a take wholly ahead, given back half an interval later", "ahead", s, b.Receipt.Reserved[0], a.Receipt, true)

	// An intact take partly refilled: given back only what is left of it.
	a = c.admit("partly", s)
	c.wait(i / 2)
	b = c.admit("partly", s)
	g := c.wantRefundLeaves("a take half refilled, given back", "partly", s, b.Receipt.Reserved[0], a.Receipt, true)

	// That refund was out of order: b is no longer intact, and gives back
	// only what is left of one interval after its decision.
	c.wait(i / 4)
	c.wantRefundLeaves("a take no longer intact, given back a quarter interval later", "partly", s, g.Receipt.Reserved[0], b.Receipt, false)

	// A take given back once its bucket is full again gives nothing: the
	// next two takes are still an interval apart.
	fast := c.shapes(spec{1, 5}) // 200ms a take, capacity 1
	a = c.admit("full", fast)
	c.wait(300 * time.Millisecond)
	c.refund("full", fast, a.Receipt)
	first := c.admit("full", fast)
	if second := c.take("full", fast); second.OK && second.Receipt.At-first.Receipt.At < fast.interval(0) {
		c.t.Errorf("Take(%q, %s) admitted twice %v apart after a take refunded on a full bucket; want at least %v apart (capacity 1)",
			"full", fast.desc, second.Receipt.At-first.Receipt.At, fast.interval(0))
	}
}

// testRefundNeverOverPace gives takes back in every order and at every
// time, and counts the events kept by their decision times: in no window
// more than rate × T + capacity.
func testRefundNeverOverPace(c *check) {
	// An over-admission that refunds out of order once allowed: at 10/s,
	// take 10, give back the first 5 (each out of order), drain 400ms later
	// (the key is not yet full), give back the other 5 (none intact any
	// more, each refilled since its earliest place), drain again.
	s := c.shapes(spec{10, 10})
	var k kept
	var rs []driver.Receipt
	for range 10 {
		g := c.admit("k", s)
		rs = append(rs, g.Receipt)
		k.add(g.Receipt.At)
	}
	for _, r := range rs[:5] {
		c.refund("k", s, r)
		k.remove(r.At)
	}
	c.wait(400 * time.Millisecond)
	c.drain("k", s, &k)
	for _, r := range rs[5:] {
		c.refund("k", s, r)
		k.remove(r.At)
	}
	c.drain("k", s, &k)
	c.wantKept(&k, fmt.Sprintf("Take(%q, %s) 10 times, the first 5 given back, drained 400ms later, the other 5 given back, drained", "k", s.desc), s.specs...)

	// Random schedules on two shapes: take, give back any take still out,
	// let up to 40ms pass.
	two := c.shapes(spec{4, 20}, spec{10, 5})
	for seed := range uint64(3) {
		rng := rand.New(rand.NewPCG(seed, 10))
		key := fmt.Sprintf("random %d", seed)
		var k kept
		var out []driver.Receipt
		for range 120 {
			switch rng.IntN(4) {
			case 0, 1:
				if g := c.take(key, two); g.OK {
					out = append(out, g.Receipt)
					k.add(g.Receipt.At)
				}
			case 2:
				if len(out) > 0 {
					j := rng.IntN(len(out))
					c.refund(key, two, out[j])
					k.remove(out[j].At)
					out = slices.Delete(out, j, j+1)
				}
			case 3:
				c.wait(time.Duration(rng.Int64N(int64(40 * time.Millisecond))))
			}
		}
		c.wantKept(&k, fmt.Sprintf("a random schedule (seed %d) of Take(%q, %s) and Refund", seed, key, two.desc), two.specs...)
	}
}

func testRefundZero(c *check) {
	s := c.shapes(spec{2, perHour})
	c.refund("absent", s, driver.Receipt{})
	c.wantGrant("absent", s, c.take("absent", s), driver.Grant{OK: true, Remaining: 1, Reset: s.interval(0)}, 0)
	c.admit("k", s)
	c.admit("k", s)
	c.refund("k", s, driver.Receipt{})
	g := c.take("k", s)
	if g.OK {
		c.t.Fatalf("Take(%q, %s) = %s after 2 takes and a refund of the zero Receipt; want refused", "k", s.desc, showGrant(g))
	}
	c.refund("k", s, g.Receipt) // the receipt of a refusal
	if g = c.take("k", s); g.OK {
		c.t.Errorf("Take(%q, %s) = %s after a refund of a refused take's receipt; want refused", "k", s.desc, showGrant(g))
	}
}

// testRefundNeverAboveFull pins that a refund gives back at most its own
// take: a second refund of the same receipt, or one on a full key, gives
// nothing.
func testRefundNeverAboveFull(c *check) {
	s := c.shapes(spec{2, perHour})
	want := func(k string, admits int) {
		c.t.Helper()
		got := 0
		for range admits + 1 {
			if c.take(k, s).OK {
				got++
			}
		}
		if got != admits {
			c.t.Errorf("%d × Take(%q, %s): %d admitted; want %d", admits+1, k, s.desc, got, admits)
		}
	}
	a := c.admit("alone", s)
	c.refund("alone", s, a.Receipt)
	c.refund("alone", s, a.Receipt) // on a full key
	want("alone", 2)

	c.admit("k", s)
	a = c.admit("k", s)
	c.refund("k", s, a.Receipt)
	c.refund("k", s, a.Receipt) // again: it was given back already
	want("k", 1)
}

// testRefundAfterDelete pins that a refund of a take made before the key
// was deleted gives nothing to the key made since.
func testRefundAfterDelete(c *check) {
	s := c.shapes(spec{3, perHour})
	i := s.interval(0)
	t0 := c.storeNow()
	a := c.admit("k", s)
	c.del("k")
	c.wantGrant("k", s, c.take("k", s), driver.Grant{OK: true, Remaining: 2, Reset: i}, 0)
	c.refund("k", s, a.Receipt)
	c.wantGrant("k", s, c.take("k", s), driver.Grant{OK: true, Remaining: 1, Reset: 2 * i}, c.storeNow()-t0)
}

// testTakeManyEqualsTake pins that TakeMany decides as Take on each key in
// turn: keys in every state, one of them twice.
func testTakeManyEqualsTake(c *check) {
	s := c.shapes(spec{2, perHour}, spec{3, perHalfHour})
	t0 := c.storeNow() // the keys are made alike from here: their times differ by what passes after it
	for _, p := range []string{"many ", "one "} {
		c.admit(p+"a", s)
		c.admit(p+"a", s) // the first shape is empty
		c.admit(p+"b", s)
	}
	keys := []string{"a", "b", "c", "b", "a", "d", "c"}
	full := make([]string, len(keys))
	for j, k := range keys {
		full[j] = c.key("many " + k)
	}
	out := make([]driver.Grant, len(keys))
	if err := c.tk.TakeMany(c.ctx, full, s.b, out); err != nil {
		c.t.Fatalf("TakeMany(%q, %s) = %v; want nil", keys, s.desc, err)
	}
	for j, k := range keys {
		want := c.take("one "+k, s)
		tol := c.storeNow() - t0
		c.wantGrant("many "+k, s, out[j], want, tol)
		if !want.OK {
			continue
		}
		for n := range s.b {
			got, want := out[j].Receipt.Reserved[n]-out[j].Receipt.At, want.Receipt.Reserved[n]-want.Receipt.At
			if (got - want).Abs() > tol {
				c.t.Errorf("TakeMany(%q, %s): out[%d] Reserved[%d] %v after its At; Take gives %v (within %v)", keys, s.desc, j, n, got, want, tol)
			}
		}
	}
	if err := c.tk.TakeMany(c.ctx, nil, s.b, nil); err != nil {
		c.t.Errorf("TakeMany(no keys, %s) = %v; want nil", s.desc, err)
	}
}

func testConcurrentTake(c *check) {
	s := c.shapes(spec{20, perHour}, spec{30, perHour})
	i := s.interval(0)
	got := make([]driver.Grant, 2*racers)
	errs := make([]error, len(got))
	race(len(got), func(n int) {
		if n%2 == 0 {
			got[n], errs[n] = c.tk.Take(c.ctx, c.key("k"), s.b)
			return
		}
		out := make([]driver.Grant, 2)
		errs[n] = c.tk.TakeMany(c.ctx, []string{c.key(fmt.Sprintf("other %d", n)), c.key("k")}, s.b, out)
		got[n] = out[1]
	})
	var remaining []int
	for n, g := range got {
		switch {
		case errs[n] != nil:
			c.t.Fatalf("Take or TakeMany at %q, %s: %v; want no error", "k", s.desc, errs[n])
		case g.OK:
			remaining = append(remaining, g.Remaining)
		case g.Remaining != 0 || g.RetryAfter <= 0 || g.RetryAfter > i:
			c.t.Errorf("Take(%q, %s) = %s when refused; want Remaining 0 and RetryAfter in (0, %v]", "k", s.desc, showGrant(g), i)
		}
	}
	slices.Sort(remaining)
	want := make([]int, 20)
	for n := range want {
		want[n] = n
	}
	if !slices.Equal(remaining, want) {
		c.t.Errorf("%d racing Take and TakeMany at %q, %s: admitted with Remaining %v; want %v", len(got), "k", s.desc, remaining, want)
	}
}

// testConcurrentTakeRefund races takes with refunds at once: the events
// kept never exceed the capacity, and those given back are all back.
func testConcurrentTakeRefund(c *check) {
	const capacity = 8
	s := c.shapes(spec{capacity, perHour})
	var keptN atomic.Int64
	var mu sync.Mutex
	var errs []string
	race(16, func(g int) {
		for n := range 25 {
			gr, err := c.tk.Take(c.ctx, c.key("k"), s.b)
			if err == nil && gr.OK && (g+n)%2 == 0 {
				err = c.tk.Refund(c.ctx, c.key("k"), s.b, gr.Receipt)
			} else if gr.OK {
				keptN.Add(1)
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, err.Error())
				mu.Unlock()
			}
		}
	})
	if len(errs) > 0 {
		c.t.Fatalf("Take or Refund at %q, %s: %s; want no error", "k", s.desc, strings.Join(errs, "; "))
	}
	more := 0
	for c.take("k", s).OK {
		more++
		if more > capacity {
			break
		}
	}
	n := int(keptN.Load())
	// A refund out of order gives back all but the time since its take: on
	// a real clock the last interval may fall short by that much.
	least := capacity - 1
	if c.cfg.advance != nil {
		least = capacity
	}
	if n+more > capacity || n+more < least {
		c.t.Errorf("16 goroutines racing Take and Refund at %q, %s: %d events kept, then %d more admitted; want %d in all (%d on a real clock)",
			"k", s.desc, n, more, capacity, least)
	}
}
