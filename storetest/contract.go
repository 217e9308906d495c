package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/driver"
)

// subtests is the contract, one behaviour each, in the order they run. Run
// runs the seed and mixed ones, RunTaker the takes and mixed ones; a mixed
// subtest checks the take methods only when it has a driver.Taker.
var subtests = []subtest{
	{"TokenBucketInvalidArguments", testTokenBucketInvalid, seed},
	{"AcquireSlotInvalidArguments", testAcquireSlotInvalid, seed},
	{"AcquireSlotBurstInvalidArguments", testAcquireSlotBurstInvalid, seed},
	{"ReleaseInvalidArguments", testReleaseInvalid, seed},
	{"RefreshInvalidArguments", testRefreshInvalid, seed},
	{"ValueInvalidArguments", testValueInvalid, seed},
	{"MaxKeyLen", testMaxKeyLen, mixed},
	{"KeysAreOpaque", testKeysAreOpaque, mixed},

	{"TokenBucketAdmitsCapacity", testTokenBucketCapacity, seed},
	{"TokenBucketFractionalCapacity", testTokenBucketFractional, seed},
	{"TokenBucketCost", testTokenBucketCost, seed},
	{"TokenBucketCostEqualsCapacity", testTokenBucketCostEqualsCapacity, seed},
	{"TokenBucketRetryAfter", testTokenBucketRetryAfter, seed},
	{"TokenBucketRetryAfterSuffices", testTokenBucketRetryAfterSuffices, seed},
	{"TokenBucketRefills", testTokenBucketRefills, seed},
	{"TokenBucketKeysIndependent", testTokenBucketKeys, seed},

	{"AcquireSlotLimit", testAcquireSlotLimit, seed},
	{"AcquireSlotRejectionLeavesCounter", testAcquireSlotRejection, seed},
	{"ReleaseSlotClampsAtZero", testReleaseSlotClamps, seed},
	{"AcquireSlotExpires", testAcquireSlotExpires, seed},
	{"RefreshSlotKeepsAlive", testRefreshSlotKeepsAlive, seed},
	{"RefreshSlotNoResurrection", testRefreshSlotNoResurrection, seed},

	{"AcquireSlotBurstSustained", testBurstSustained, seed},
	{"AcquireSlotBurstCeiling", testBurstCeiling, seed},
	{"AcquireSlotBurstBudgetExhausted", testBurstExhausted, seed},
	{"AcquireSlotBurstBudgetRefills", testBurstRefills, seed},
	{"AcquireSlotBurstExpiryKeepsDebt", testBurstExpiryKeepsDebt, seed},
	{"ReleaseSlotBurstChargesTime", testReleaseBurstCharges, seed},
	{"RefreshSlotBurstChargesTime", testRefreshBurstCharges, seed},
	{"ReleaseSlotBurstClampsAtZero", testReleaseBurstClamps, seed},
	{"AcquireSlotBurstExpires", testBurstExpires, seed},
	{"RefreshSlotBurstKeepsAlive", testRefreshBurstKeepsAlive, seed},
	{"RefreshSlotBurstNoResurrection", testRefreshBurstNoResurrection, seed},

	{"TakeInvalidArguments", testTakeInvalid, takes},
	{"TakeReportsGrant", testTakeGrant, takes},
	{"TakeReceiptTimes", testTakeReceiptTimes, takes},
	{"TakeRetryAfterSuffices", testTakeRetryAfterSuffices, takes},
	{"TakeSeveralShapesAllOrNothing", testTakeAllOrNothing, takes},
	{"TakeSeveralShapesAdmitWhatAllAllow", testTakeAdmitsWhatAllAllow, takes},
	{"TakeManyEqualsTake", testTakeManyEqualsTake, takes},
	{"RefundAtOnceIsExact", testRefundAtOnce, takes},
	{"RefundLateGivesOnlyItsOwnPart", testRefundLate, takes},
	{"RefundNeverOverPace", testRefundNeverOverPace, takes},
	{"RefundZeroReceipt", testRefundZero, takes},
	{"RefundNeverAboveFull", testRefundNeverAboveFull, takes},
	{"RefundAfterDeleteGivesNothing", testRefundAfterDelete, takes},

	{"NamespacesSeparate", testNamespaces, mixed},
	{"DeleteClearsAllNamespaces", testDelete, mixed},

	{"GetNotFound", testGetNotFound, seed},
	{"GetReturnsCopy", testGetCopy, seed},
	{"SetOverwrites", testSetOverwrites, seed},
	{"SetTTLExpires", testSetTTL, seed},
	{"SetTTLZeroNeverExpires", testSetTTLZero, seed},

	{"Close", testClose, mixed},
	{"ContextCanceled", testContextCanceled, mixed},

	{"ConcurrentAcquireSlot", testConcurrentAcquireSlot, seed},
	{"ConcurrentAcquireSlotBurst", testConcurrentAcquireSlotBurst, seed},
	{"ConcurrentTokenBucket", testConcurrentTokenBucket, seed},
	{"ConcurrentAcquireRelease", testConcurrentAcquireRelease, seed},
	{"ConcurrentTake", testConcurrentTake, takes},
	{"ConcurrentTakeRefund", testConcurrentTakeRefund, takes},
	{"ConcurrentDeleteTokenBucket", testConcurrentDeleteTokenBucket, seed},
}

// wantErr fails unless err wraps target.
func (c *check) wantErr(call string, err, target error) {
	c.t.Helper()
	if !errors.Is(err, target) {
		c.t.Errorf("%s: error %v; want one wrapping %v", call, err, target)
	}
}

// badKeys are keys every method must reject.
var badKeys = []string{"", strings.Repeat("k", driver.MaxKeyLen+1)}

func showKey(k string) string {
	if len(k) > 20 {
		return fmt.Sprintf("<%d bytes>", len(k))
	}
	return fmt.Sprintf("%q", k)
}

func testTokenBucketInvalid(c *check) {
	nan, inf := math.NaN(), math.Inf(1)
	for _, a := range [][3]float64{
		{0, 1, 1}, {-1, 1, 1}, {nan, 1, 1}, {inf, 1, 1}, {math.Inf(-1), 1, 1},
		{3, 0, 1}, {3, -1, 1}, {3, nan, 1}, {3, inf, 1},
		{3, 1, -1}, {3, 1, nan}, {3, 1, inf}, {3, 1, 4},
	} {
		ok, retry, err := c.s.TokenBucket(c.ctx, c.key("k"), a[0], a[1], a[2])
		call := fmt.Sprintf("TokenBucket(%q, %v, %v, %v) = %v, %v, %v", "k", a[0], a[1], a[2], ok, retry, err)
		c.wantErr(call, err, pace.ErrInvalidArgument)
		if ok {
			c.t.Errorf("%s; want allowed false", call)
		}
	}
	for _, k := range badKeys {
		_, _, err := c.s.TokenBucket(c.ctx, k, 3, 1, 1)
		c.wantErr(fmt.Sprintf("TokenBucket(%s, 3, 1, 1)", showKey(k)), err, pace.ErrInvalidArgument)
	}
	c.takeN("k", 3, perHour, 1, 4, 3) // the rejected calls debited nothing
}

func testAcquireSlotInvalid(c *check) {
	for _, a := range []struct {
		limit int64
		ttl   time.Duration
	}{{0, longTTL}, {-1, longTTL}, {math.MinInt64, longTTL}, {1, 0}, {1, -time.Second}} {
		ok, cur, err := c.s.AcquireSlot(c.ctx, c.key("k"), a.limit, a.ttl)
		c.wantErr(fmt.Sprintf("AcquireSlot(%q, %d, %v) = %v, %d, %v", "k", a.limit, a.ttl, ok, cur, err), err, pace.ErrInvalidArgument)
	}
	for _, k := range badKeys {
		_, _, err := c.s.AcquireSlot(c.ctx, k, 1, longTTL)
		c.wantErr(fmt.Sprintf("AcquireSlot(%s, 1, %v)", showKey(k), longTTL), err, pace.ErrInvalidArgument)
	}
	c.wantAcquire("k", 1, longTTL, true, 1)
}

func testAcquireSlotBurstInvalid(c *check) {
	for _, a := range []struct {
		sustained, ceiling int64
		budget, ttl        time.Duration
	}{
		{0, 0, time.Hour, longTTL},
		{-1, 1, time.Hour, longTTL},
		{2, 1, time.Hour, longTTL}, // ceiling below sustained
		{2, 5, time.Hour, longTTL}, // ceiling above 2 × sustained
		{2, 3, -time.Second, longTTL},
		{2, 3, time.Hour, 0},
		{2, 3, time.Hour, -time.Second},
	} {
		ok, cur, err := c.s.AcquireSlotBurst(c.ctx, c.key("k"), a.sustained, a.ceiling, a.budget, a.ttl)
		c.wantErr(fmt.Sprintf("AcquireSlotBurst(%q, %d, %d, %v, %v) = %v, %d, %v", "k", a.sustained, a.ceiling, a.budget, a.ttl, ok, cur, err), err, pace.ErrInvalidArgument)
	}
	for _, k := range badKeys {
		_, _, err := c.s.AcquireSlotBurst(c.ctx, k, 1, 2, time.Hour, longTTL)
		c.wantErr(fmt.Sprintf("AcquireSlotBurst(%s, 1, 2, 1h, %v)", showKey(k), longTTL), err, pace.ErrInvalidArgument)
	}
	c.wantAcquireBurst("k", 1, 1, 0, longTTL, true, 1)
}

func testReleaseInvalid(c *check) {
	for _, k := range badKeys {
		c.wantErr(fmt.Sprintf("ReleaseSlot(%s)", showKey(k)), c.s.ReleaseSlot(c.ctx, k), pace.ErrInvalidArgument)
		c.wantErr(fmt.Sprintf("ReleaseSlotBurst(%s)", showKey(k)), c.s.ReleaseSlotBurst(c.ctx, k), pace.ErrInvalidArgument)
	}
}

func testRefreshInvalid(c *check) {
	c.wantAcquire("k", 2, longTTL, true, 1)
	c.wantAcquireBurst("k", 2, 2, 0, longTTL, true, 1)
	for _, ttl := range []time.Duration{0, -time.Second} {
		c.wantErr(fmt.Sprintf("RefreshSlot(%q, %v)", "k", ttl), c.s.RefreshSlot(c.ctx, c.key("k"), ttl), pace.ErrInvalidArgument)
		c.wantErr(fmt.Sprintf("RefreshSlotBurst(%q, %v)", "k", ttl), c.s.RefreshSlotBurst(c.ctx, c.key("k"), ttl), pace.ErrInvalidArgument)
	}
	for _, k := range badKeys {
		c.wantErr(fmt.Sprintf("RefreshSlot(%s, %v)", showKey(k), longTTL), c.s.RefreshSlot(c.ctx, k, longTTL), pace.ErrInvalidArgument)
		c.wantErr(fmt.Sprintf("RefreshSlotBurst(%s, %v)", showKey(k), longTTL), c.s.RefreshSlotBurst(c.ctx, k, longTTL), pace.ErrInvalidArgument)
	}
	// The counters are untouched.
	c.wantAcquire("k", 2, longTTL, true, 2)
	c.wantAcquireBurst("k", 2, 2, 0, longTTL, true, 2)
}

func testValueInvalid(c *check) {
	for _, k := range badKeys {
		_, err := c.s.Get(c.ctx, k)
		c.wantErr(fmt.Sprintf("Get(%s)", showKey(k)), err, pace.ErrInvalidArgument)
		c.wantErr(fmt.Sprintf("Set(%s, \"v\", 0)", showKey(k)), c.s.Set(c.ctx, k, []byte("v"), 0), pace.ErrInvalidArgument)
		c.wantErr(fmt.Sprintf("Delete(%s)", showKey(k)), c.s.Delete(c.ctx, k), pace.ErrInvalidArgument)
	}
	c.wantErr(`Set("k", "v", -1s)`, c.s.Set(c.ctx, c.key("k"), []byte("v"), -time.Second), pace.ErrInvalidArgument)
	_, err := c.s.Get(c.ctx, c.key("k"))
	c.wantErr(`Get("k") after a rejected Set`, err, pace.ErrNotFound)
}

func testMaxKeyLen(c *check) {
	k := c.key("k")
	k += strings.Repeat("x", driver.MaxKeyLen-len(k))
	if ok, _, err := c.s.TokenBucket(c.ctx, k, 1, perHour, 1); !ok || err != nil {
		c.t.Errorf("TokenBucket(<MaxKeyLen bytes>, 1, %v, 1) = %v, _, %v; want true, 0, nil", perHour, ok, err)
	}
	if ok, cur, err := c.s.AcquireSlot(c.ctx, k, 1, longTTL); !ok || cur != 1 || err != nil {
		c.t.Errorf("AcquireSlot(<MaxKeyLen bytes>, 1, %v) = %v, %d, %v; want true, 1, nil", longTTL, ok, cur, err)
	}
	if ok, cur, err := c.s.AcquireSlotBurst(c.ctx, k, 1, 1, 0, longTTL); !ok || cur != 1 || err != nil {
		c.t.Errorf("AcquireSlotBurst(<MaxKeyLen bytes>, 1, 1, 0, %v) = %v, %d, %v; want true, 1, nil", longTTL, ok, cur, err)
	}
	if err := c.s.Set(c.ctx, k, []byte("v"), longTTL); err != nil {
		c.t.Errorf("Set(<MaxKeyLen bytes>, \"v\", %v) = %v; want nil", longTTL, err)
	}
	if v, err := c.s.Get(c.ctx, k); string(v) != "v" || err != nil {
		c.t.Errorf("Get(<MaxKeyLen bytes>) = %q, %v; want \"v\", nil", v, err)
	}
	if c.tk != nil {
		one := c.shapes(spec{1, perHour})
		g, err := c.tk.Take(c.ctx, k, one.b)
		if !g.OK || err != nil {
			c.t.Errorf("Take(<MaxKeyLen bytes>, %s) = %s, %v; want OK, nil", one.desc, showGrant(g), err)
		}
		if err := c.tk.Refund(c.ctx, k, one.b, g.Receipt); err != nil {
			c.t.Errorf("Refund(<MaxKeyLen bytes>, %s, its receipt) = %v; want nil", one.desc, err)
		}
		if err := c.tk.TakeMany(c.ctx, []string{k, k}, one.b, make([]driver.Grant, 2)); err != nil {
			c.t.Errorf("TakeMany(<MaxKeyLen bytes> twice, %s) = %v; want nil", one.desc, err)
		}
	}
	for _, f := range []func(context.Context, string) error{c.s.ReleaseSlot, c.s.ReleaseSlotBurst, c.s.Delete} {
		if err := f(c.ctx, k); err != nil {
			c.t.Errorf("ReleaseSlot, ReleaseSlotBurst or Delete(<MaxKeyLen bytes>) = %v; want nil", err)
		}
	}
}

// testKeysAreOpaque uses keys that look like namespace prefixes, separators,
// patterns and quotes: a backend that builds its own keys or queries from
// them must keep them all apart.
func testKeysAreOpaque(c *check) {
	keys := []string{"x", "x:", ":x", "s:x", "v:x", "b:x", "{x}", "x*", "x%", "x_", "x'", `x"`, `x\`, "x y", "x\n", "χ", "x;--"}
	one := c.shapes(spec{1, perHour})
	for _, k := range keys {
		c.wantTake(k, 1, perHour, 1, true)
		c.wantAcquire(k, 1, longTTL, true, 1)
		c.wantAcquireBurst(k, 1, 1, 0, longTTL, true, 1)
		c.set(k, []byte("value of "+k), longTTL)
		c.admitIfTaker(k, one)
	}
	for _, k := range keys {
		if g, ok := c.takeIfTaker(k, one); ok && g.OK {
			c.t.Errorf("Take(%q, %s) = %s a second time; want refused", k, one.desc, showGrant(g))
		}
		c.wantTake(k, 1, perHour, 1, false)
		c.wantAcquire(k, 1, longTTL, false, 1)
		c.wantAcquireBurst(k, 1, 1, 0, longTTL, false, 1)
		c.wantGet(k, "value of "+k)
	}
}

func testTokenBucketCapacity(c *check) {
	for range 5 {
		c.wantTake("k", 5, perHour, 1, true)
	}
	c.wantTake("k", 5, perHour, 1, false)
	c.wantTake("k", 5, perHour, 1, false)
}

func testTokenBucketFractional(c *check) {
	// 2.5 tokens hold two whole takes of one token, and one take of two.
	c.takeN("a", 2.5, perHour, 1, 4, 2)
	c.takeN("b", 2.5, perHour, 2, 3, 1)
}

func testTokenBucketCost(c *check) {
	c.takeN("k", 10, perHour, 3, 5, 3) // 9 of 10 tokens spent
	c.wantTake("k", 10, perHour, 1, true)
	c.wantTake("k", 10, perHour, 1, false)
	c.wantTake("k", 10, perHour, 0, true) // a cost of 0 fits an empty bucket
	c.wantTake("k", 10, perHour, 1, false)
}

func testTokenBucketCostEqualsCapacity(c *check) {
	c.wantTake("k", 3, perHour, 3, true)
	c.wantTake("k", 3, perHour, 3, false)
	c.wantTake("k", 3, perHour, 1, false)
}

// testTokenBucketRetryAfter pins retryAfter to the refill time of the
// missing tokens, less the little time the calls themselves took.
func testTokenBucketRetryAfter(c *check) {
	for _, tc := range []struct {
		k         string
		capacity  float64
		cost      float64
		takes     int
		wantRetry time.Duration
	}{
		{"one", 2, 1, 2, time.Hour},
		{"two", 2, 2, 1, 2 * time.Hour},
		{"half", 3, 2, 1, time.Hour}, // 1 token left, 2 needed: one more at 1/h
	} {
		for range tc.takes {
			c.wantTake(tc.k, tc.capacity, perHour, tc.cost, true)
		}
		retry := c.wantTake(tc.k, tc.capacity, perHour, tc.cost, false)
		if retry > tc.wantRetry || retry < tc.wantRetry-time.Minute {
			c.t.Errorf("TokenBucket(%q, %v, %v, %v) = false, %v, nil; want retryAfter in (%v, %v]", tc.k, tc.capacity, perHour, tc.cost, retry, tc.wantRetry-time.Minute, tc.wantRetry)
		}
	}
}

// testTokenBucketRetryAfterSuffices checks that waiting retryAfter is
// enough: the store's clock cannot have moved less than the suite's.
func testTokenBucketRetryAfterSuffices(c *check) {
	const rate = 10 // one token per 100ms
	var retry time.Duration
	for i := 0; ; i++ {
		ok, r := c.tokenBucket("k", 1, rate, 1)
		if !ok {
			retry = r
			break
		}
		if i == 100 {
			c.t.Fatalf("TokenBucket(%q, 1, %v, 1) allowed 100 calls in a row; want a refusal", "k", rate)
		}
	}
	if retry <= 0 || retry > 100*time.Millisecond {
		c.t.Fatalf("TokenBucket(%q, 1, %v, 1) = false, %v, nil; want retryAfter in (0, 100ms]", "k", rate, retry)
	}
	c.wait(retry)
	c.wantTake("k", 1, rate, 1, true)
}

func testTokenBucketRefills(c *check) {
	const rate = 20
	c.takeN("k", 2, rate, 1, 2, 2) // a new bucket is full
	for i := 0; ; i++ {            // empty it
		if ok, _ := c.tokenBucket("k", 2, rate, 1); !ok {
			break
		}
		if i == 100 {
			c.t.Fatalf("TokenBucket(%q, 2, %v, 1) allowed 100 calls in a row; want a refusal", "k", rate)
		}
	}
	c.eventually(`TokenBucket("k", 2, 20, 1) allowed again`, func() bool {
		ok, _ := c.tokenBucket("k", 2, rate, 1)
		return ok
	})
}

func testTokenBucketKeys(c *check) {
	c.wantTake("a", 1, perHour, 1, true)
	c.wantTake("a", 1, perHour, 1, false)
	c.wantTake("b", 1, perHour, 1, true)
}

func testAcquireSlotLimit(c *check) {
	for i := int64(1); i <= 3; i++ {
		c.wantAcquire("k", 3, longTTL, true, i)
	}
	c.wantAcquire("k", 3, longTTL, false, 3)
	c.wantAcquire("k", 3, longTTL, false, 3)
	c.release("k")
	c.wantAcquire("k", 3, longTTL, true, 3)
	c.wantAcquire("k", 3, longTTL, false, 3)
}

// testAcquireSlotRejection pins that a rejection reports the counter, left
// unchanged, even when a lower limit than before leaves it above the limit.
func testAcquireSlotRejection(c *check) {
	for i := int64(1); i <= 3; i++ {
		c.wantAcquire("k", 5, longTTL, true, i)
	}
	c.wantAcquire("k", 2, longTTL, false, 3)
	c.wantAcquire("k", 3, longTTL, false, 3)
	c.release("k")
	c.wantAcquire("k", 5, longTTL, true, 3)
}

func testReleaseSlotClamps(c *check) {
	c.release("absent")
	c.wantAcquire("absent", 1, longTTL, true, 1)
	c.wantAcquire("absent", 1, longTTL, false, 1)

	c.wantAcquire("k", 2, longTTL, true, 1)
	c.release("k")
	c.release("k")
	c.release("k")
	c.wantAcquire("k", 1, longTTL, true, 1)
	c.wantAcquire("k", 1, longTTL, false, 1)
}

func testAcquireSlotExpires(c *check) {
	c.wantAcquire("long", 1, longTTL, true, 1)
	c.wantAcquire("short", 1, shortTTL, true, 1)
	c.eventually(fmt.Sprintf("AcquireSlot(%q, 1, %v) admitted after the TTL", "short", shortTTL), func() bool {
		ok, cur := c.acquire("short", 1, shortTTL)
		if ok && cur != 1 {
			c.t.Fatalf("AcquireSlot(%q, 1, %v) = true, %d, nil after expiry; want true, 1, nil", "short", shortTTL, cur)
		}
		return ok
	})
	c.wantAcquire("long", 1, longTTL, false, 1)
}

// keepAlive acquires a slot with a TTL of 400ms through acquire and
// refreshes it for an hour through refresh, retrying with a new key if the
// two calls were more than 200ms apart (a loaded machine), so that the
// refresh surely reached the store before the first TTL ran out. Then it lets
// that TTL surely pass and returns the key.
func (c *check) keepAlive(acquire func(k string, ttl time.Duration), refresh func(k string, ttl time.Duration)) string {
	c.t.Helper()
	const ttl = 400 * time.Millisecond
	for attempt := 0; ; attempt++ {
		k := fmt.Sprintf("k%d", attempt)
		start := time.Now()
		acquire(k, ttl)
		refresh(k, longTTL)
		if c.cfg.advance == nil && time.Since(start) > ttl/2 {
			if attempt == 10 {
				c.t.Fatalf("could not acquire and refresh a slot within %v in 10 attempts", ttl/2)
			}
			continue
		}
		// The store received the acquisition before now, so its first
		// TTL ends before now + ttl.
		c.wait(ttl + ttl/2)
		return k
	}
}

func testRefreshSlotKeepsAlive(c *check) {
	k := c.keepAlive(func(k string, ttl time.Duration) { c.wantAcquire(k, 1, ttl, true, 1) }, c.refresh)
	c.wantAcquire(k, 1, longTTL, false, 1)
	c.refresh(k, longTTL) // idempotent
	c.refresh(k, longTTL)
	c.wantAcquire(k, 2, longTTL, true, 2)
}

func testRefreshSlotNoResurrection(c *check) {
	c.refresh("absent", longTTL)
	c.wantAcquire("absent", 1, longTTL, true, 1)

	c.wantAcquire("k", 2, 50*time.Millisecond, true, 1)
	c.wait(200 * time.Millisecond) // four TTLs
	c.refresh("k", longTTL)
	c.wantAcquire("k", 1, longTTL, true, 1)
}

func testBurstSustained(c *check) {
	for i := int64(1); i <= 3; i++ {
		c.wantAcquireBurst("k", 3, 6, 0, longTTL, true, i)
	}
	// With no budget nothing is admitted above sustained.
	c.wantAcquireBurst("k", 3, 6, 0, longTTL, false, 3)
	c.wantAcquireBurst("k", 3, 6, 0, longTTL, false, 3)
}

func testBurstCeiling(c *check) {
	for _, tc := range []struct {
		k                  string
		sustained, ceiling int64
	}{{"a", 3, 5}, {"b", 2, 4}, {"c", 2, 2}} {
		for i := int64(1); i <= tc.ceiling; i++ {
			c.wantAcquireBurst(tc.k, tc.sustained, tc.ceiling, time.Hour, longTTL, true, i)
		}
		c.wantAcquireBurst(tc.k, tc.sustained, tc.ceiling, time.Hour, longTTL, false, tc.ceiling)
		c.wantAcquireBurst(tc.k, tc.sustained, tc.ceiling, time.Hour, longTTL, false, tc.ceiling)
	}
}

// Burst scenario parameters: one connection above a sustained 2 drains a
// budget of 200ms in 400ms, two drain it in 200ms; at or below sustained it
// refills by 200ms per hour, 56µs a second.
const (
	sustained = 2
	ceiling   = 4
	budget    = 200 * time.Millisecond
)

func (c *check) burst(k string, ttl time.Duration, want bool, wantCur int64) {
	c.t.Helper()
	c.wantAcquireBurst(k, sustained, ceiling, budget, ttl, want, wantCur)
}

func testBurstExhausted(c *check) {
	for i := int64(1); i <= 3; i++ {
		c.burst("k", longTTL, true, i)
	}
	c.wait(500 * time.Millisecond)  // one above sustained for 500ms burns 250ms of budget
	c.burst("k", longTTL, false, 3) // below the ceiling: the budget is spent
	c.releaseBurst("k")
	c.releaseBurst("k")
	c.burst("k", longTTL, true, 2) // sustained is always admitted
}

func testBurstRefills(c *check) {
	for i := int64(1); i <= 3; i++ {
		c.burst("k", longTTL, true, i)
	}
	c.wait(500 * time.Millisecond)
	c.burst("k", longTTL, false, 3)
	c.releaseBurst("k")
	c.wait(100 * time.Millisecond) // at sustained: 5µs of budget back
	c.burst("k", longTTL, true, 3)
}

// exhaustedAgain checks that a burst slot at sustained, with a budget of
// far less than 100ms, is admitted once above sustained (any budget left
// admits) and then, 200ms later, refused for lack of budget. A store that
// forgot the debt would still have 100ms left.
func (c *check) exhaustedAgain(k string) {
	c.t.Helper()
	c.wait(100 * time.Millisecond) // a few µs of budget back, so that one is admitted
	c.burst(k, longTTL, true, 3)
	c.wait(200 * time.Millisecond) // one above sustained burns 100ms
	c.burst(k, longTTL, false, 3)
}

func testBurstExpiryKeepsDebt(c *check) {
	// Four holders with a TTL of 250ms: two above sustained until the TTL
	// ends, so the budget is spent. Each admission restarts the TTL; if the
	// machine stalled so long between two of them that the slot expired in
	// between, start again on a new key.
	const ttl = 250 * time.Millisecond
	var k string
	for attempt := 0; k == ""; attempt++ {
		key := fmt.Sprintf("k%d", attempt)
		start := time.Now()
		for i := int64(1); i <= 4; i++ {
			ok, cur := c.acquireBurst(key, sustained, ceiling, budget, ttl)
			if ok && cur == i {
				continue
			}
			if c.cfg.advance == nil && time.Since(start) >= ttl && attempt < 10 {
				break // the slot may have expired under a stall
			}
			c.t.Fatalf("AcquireSlotBurst(%q, %d, %d, %v, %v) = %v, %d, nil; want true, %d, nil", key, sustained, ceiling, budget, ttl, ok, cur, i)
		}
		if c.cfg.advance == nil && time.Since(start) >= ttl/2 && attempt < 10 {
			continue
		}
		k = key
	}
	// Then the holders are presumed gone, but the debt stays.
	c.wait(2 * ttl)
	c.burst(k, longTTL, true, 1)
	c.burst(k, longTTL, true, 2)
	c.exhaustedAgain(k)
}

func testReleaseBurstCharges(c *check) {
	for i := int64(1); i <= 4; i++ {
		c.burst("k", longTTL, true, i)
	}
	c.wait(300 * time.Millisecond) // two above sustained: spent after 200ms
	c.releaseBurst("k")            // charged at 4 first, so the budget stays spent
	c.releaseBurst("k")
	c.exhaustedAgain("k")
}

func testRefreshBurstCharges(c *check) {
	for i := int64(1); i <= 4; i++ {
		c.burst("k", longTTL, true, i)
	}
	c.wait(300 * time.Millisecond)
	c.refreshBurst("k", longTTL) // charged at 4: the budget is spent
	c.releaseBurst("k")
	c.releaseBurst("k")
	c.exhaustedAgain("k")
}

func testReleaseBurstClamps(c *check) {
	c.releaseBurst("absent")
	c.wantAcquireBurst("absent", 1, 1, 0, longTTL, true, 1)
	c.wantAcquireBurst("absent", 1, 1, 0, longTTL, false, 1)

	c.wantAcquireBurst("k", 1, 1, 0, longTTL, true, 1)
	c.releaseBurst("k")
	c.wantAcquireBurst("k", 1, 1, 0, longTTL, true, 1)
	c.releaseBurst("k")
	c.releaseBurst("k")
	c.releaseBurst("k")
	c.wantAcquireBurst("k", 1, 1, 0, longTTL, true, 1)
	c.wantAcquireBurst("k", 1, 1, 0, longTTL, false, 1)
}

func testBurstExpires(c *check) {
	c.wantAcquireBurst("long", 1, 1, 0, longTTL, true, 1)
	c.wantAcquireBurst("short", 1, 1, 0, shortTTL, true, 1)
	c.eventually(fmt.Sprintf("AcquireSlotBurst(%q, 1, 1, 0, %v) admitted after the TTL", "short", shortTTL), func() bool {
		ok, cur := c.acquireBurst("short", 1, 1, 0, shortTTL)
		if ok && cur != 1 {
			c.t.Fatalf("AcquireSlotBurst(%q, 1, 1, 0, %v) = true, %d, nil after expiry; want true, 1, nil", "short", shortTTL, cur)
		}
		return ok
	})
	c.wantAcquireBurst("long", 1, 1, 0, longTTL, false, 1)
}

func testRefreshBurstKeepsAlive(c *check) {
	k := c.keepAlive(func(k string, ttl time.Duration) { c.wantAcquireBurst(k, 1, 1, 0, ttl, true, 1) }, c.refreshBurst)
	c.wantAcquireBurst(k, 1, 1, 0, longTTL, false, 1)
	c.refreshBurst(k, longTTL) // idempotent
	c.refreshBurst(k, longTTL)
	c.wantAcquireBurst(k, 2, 2, 0, longTTL, true, 2)
}

func testRefreshBurstNoResurrection(c *check) {
	// Neither a heartbeat nor a release creates a slot: a new one has a
	// full budget.
	c.refreshBurst("absent", longTTL)
	c.releaseBurst("absent")
	c.wantAcquireBurst("absent", 1, 2, time.Hour, longTTL, true, 1)
	c.wantAcquireBurst("absent", 1, 2, time.Hour, longTTL, true, 2)

	c.wantAcquireBurst("k", 1, 1, 0, 50*time.Millisecond, true, 1)
	c.wait(200 * time.Millisecond) // four TTLs
	c.refreshBurst("k", longTTL)
	c.wantAcquireBurst("k", 1, 1, 0, longTTL, true, 1)
}

// fill puts k in all five namespaces: a spent bucket of one token, a full
// plain slot and a full burst slot of limit one, a value, and a spent Take
// of one shape of one take (the shape of the bucket, so that a store keeping
// both in one place fails here).
func (c *check) fill(k string) {
	c.t.Helper()
	c.wantTake(k, 1, perHour, 1, true)
	c.wantAcquire(k, 1, longTTL, true, 1)
	c.wantAcquireBurst(k, 1, 1, 0, longTTL, true, 1)
	c.set(k, []byte("v"), longTTL)
	c.admitIfTaker(k, c.shapes(spec{1, perHour}))
}

// wantSpent fails unless a Take of one shape of one take at k is refused.
func (c *check) wantSpent(k string) {
	c.t.Helper()
	if c.tk == nil {
		return
	}
	one := c.shapes(spec{1, perHour})
	if g := c.take(k, one); g.OK {
		c.t.Errorf("Take(%q, %s) = %s; want refused", k, one.desc, showGrant(g))
	}
}

func testNamespaces(c *check) {
	c.fill("k") // each namespace found the key absent
	c.wantTake("k", 1, perHour, 1, false)
	c.wantAcquire("k", 1, longTTL, false, 1)
	c.wantAcquireBurst("k", 1, 1, 0, longTTL, false, 1)
	c.wantGet("k", "v")

	c.release("k") // releases the plain slot only
	c.wantAcquireBurst("k", 1, 1, 0, longTTL, false, 1)
	c.wantAcquire("k", 1, longTTL, true, 1)

	c.releaseBurst("k") // releases the burst slot only
	c.wantAcquire("k", 1, longTTL, false, 1)
	c.wantAcquireBurst("k", 1, 1, 0, longTTL, true, 1)

	c.wantTake("k", 1, perHour, 1, false)
	c.wantGet("k", "v")
	c.wantSpent("k")
}

func testDelete(c *check) {
	c.del("absent")
	c.fill("k")
	c.fill("other")
	c.del("k")
	c.fill("k") // each namespace finds the key absent again
	_, err := c.s.Get(c.ctx, c.key("gone"))
	c.wantErr(`Get("gone")`, err, pace.ErrNotFound)
	c.set("gone", []byte("v"), 0)
	c.del("gone")
	_, err = c.s.Get(c.ctx, c.key("gone"))
	c.wantErr(`Get("gone") after Delete`, err, pace.ErrNotFound)
	// Other keys are untouched.
	c.wantTake("other", 1, perHour, 1, false)
	c.wantAcquire("other", 1, longTTL, false, 1)
	c.wantAcquireBurst("other", 1, 1, 0, longTTL, false, 1)
	c.wantGet("other", "v")
	c.wantSpent("other")
}

func testGetNotFound(c *check) {
	v, err := c.s.Get(c.ctx, c.key("absent"))
	c.wantErr(fmt.Sprintf("Get(%q) = %q, %v", "absent", v, err), err, pace.ErrNotFound)
	// A key in the other namespaces has no value.
	c.wantTake("k", 1, perHour, 1, true)
	c.wantAcquire("k", 1, longTTL, true, 1)
	c.wantAcquireBurst("k", 1, 1, 0, longTTL, true, 1)
	_, err = c.s.Get(c.ctx, c.key("k"))
	c.wantErr(`Get("k") of a key with a bucket and slots but no value`, err, pace.ErrNotFound)
}

func testGetCopy(c *check) {
	v := []byte("value")
	c.set("k", v, longTTL)
	v[0] = 'X' // the store kept its own copy
	c.wantGet("k", "value")

	got, err := c.s.Get(c.ctx, c.key("k"))
	if err != nil {
		c.t.Fatalf("Get(%q) = %q, %v; want \"value\", nil", "k", got, err)
	}
	got[0] = 'Y' // the caller got its own copy
	c.wantGet("k", "value")

	a, _ := c.s.Get(c.ctx, c.key("k"))
	b, _ := c.s.Get(c.ctx, c.key("k"))
	if len(a) > 0 && len(b) > 0 && &a[0] == &b[0] {
		c.t.Errorf("two Get(%q) returned the same backing array", "k")
	}
}

func testSetOverwrites(c *check) {
	c.set("k", []byte("one"), longTTL)
	c.set("k", []byte("two"), longTTL)
	c.wantGet("k", "two")
	c.set("k", []byte{}, longTTL)
	c.wantGet("k", "")
	c.set("nil", nil, longTTL)
	c.wantGet("nil", "")

	bin := make([]byte, 256)
	for i := range bin {
		bin[i] = byte(i)
	}
	big := bytes.Repeat(bin, 256) // 64 KiB of every byte value
	if err := c.s.Set(c.ctx, c.key("bin"), big, longTTL); err != nil {
		c.t.Fatalf("Set(%q, <64 KiB>, %v) = %v; want nil", "bin", longTTL, err)
	}
	if got, err := c.s.Get(c.ctx, c.key("bin")); err != nil || !bytes.Equal(got, big) {
		c.t.Fatalf("Get(%q) = <%d bytes>, %v; want the 64 KiB that were set", "bin", len(got), err)
	}
}

func testSetTTL(c *check) {
	c.set("long", []byte("v"), longTTL)
	c.set("short", []byte("v"), shortTTL)
	c.eventually(fmt.Sprintf("Get(%q) not found after the TTL of %v", "short", shortTTL), func() bool {
		v, err := c.s.Get(c.ctx, c.key("short"))
		switch {
		case errors.Is(err, pace.ErrNotFound):
			return true
		case err != nil || string(v) != "v":
			c.t.Fatalf("Get(%q) = %q, %v; want \"v\", nil or pace.ErrNotFound", "short", v, err)
		}
		return false
	})
	c.wantGet("long", "v")
}

func testSetTTLZero(c *check) {
	c.set("k", []byte("v"), 0)
	c.set("over", []byte("one"), shortTTL)
	c.set("over", []byte("two"), 0) // the new TTL replaces the old
	c.wait(3 * shortTTL)
	c.wantGet("k", "v")
	c.wantGet("over", "two")
}

func testClose(c *check) {
	c.fill("k")
	one := c.shapes(spec{1, perHour})
	r := c.admitIfTaker("r", one).Receipt
	for i := range 2 {
		if err := c.s.Close(c.ctx); err != nil {
			c.t.Fatalf("Close #%d = %v; want nil", i+1, err)
		}
	}
	k := c.key("k")
	_, _, err := c.s.TokenBucket(c.ctx, k, 1, perHour, 1)
	c.wantErr("TokenBucket after Close", err, pace.ErrClosed)
	_, _, err = c.s.AcquireSlot(c.ctx, k, 1, longTTL)
	c.wantErr("AcquireSlot after Close", err, pace.ErrClosed)
	_, _, err = c.s.AcquireSlotBurst(c.ctx, k, 1, 1, 0, longTTL)
	c.wantErr("AcquireSlotBurst after Close", err, pace.ErrClosed)
	c.wantErr("ReleaseSlot after Close", c.s.ReleaseSlot(c.ctx, k), pace.ErrClosed)
	c.wantErr("RefreshSlot after Close", c.s.RefreshSlot(c.ctx, k, longTTL), pace.ErrClosed)
	c.wantErr("ReleaseSlotBurst after Close", c.s.ReleaseSlotBurst(c.ctx, k), pace.ErrClosed)
	c.wantErr("RefreshSlotBurst after Close", c.s.RefreshSlotBurst(c.ctx, k, longTTL), pace.ErrClosed)
	_, err = c.s.Get(c.ctx, k)
	c.wantErr("Get after Close", err, pace.ErrClosed)
	c.wantErr("Set after Close", c.s.Set(c.ctx, k, []byte("v"), 0), pace.ErrClosed)
	c.wantErr("Delete after Close", c.s.Delete(c.ctx, k), pace.ErrClosed)
	if c.tk != nil {
		_, err = c.tk.Take(c.ctx, k, one.b)
		c.wantErr("Take after Close", err, pace.ErrClosed)
		c.wantErr("TakeMany after Close", c.tk.TakeMany(c.ctx, []string{k}, one.b, make([]driver.Grant, 1)), pace.ErrClosed)
		c.wantErr("Refund after Close", c.tk.Refund(c.ctx, c.key("r"), one.b, r), pace.ErrClosed)
	}
}

func testContextCanceled(c *check) {
	one := c.shapes(spec{1, perHour})
	r := c.admitIfTaker("r", one).Receipt
	ctx, cancel := context.WithCancel(c.ctx)
	cancel()
	k := c.key("k")
	_, _, err := c.s.TokenBucket(ctx, k, 1, perHour, 1)
	c.wantErr("TokenBucket with a canceled context", err, context.Canceled)
	_, _, err = c.s.AcquireSlot(ctx, k, 1, longTTL)
	c.wantErr("AcquireSlot with a canceled context", err, context.Canceled)
	_, _, err = c.s.AcquireSlotBurst(ctx, k, 1, 1, 0, longTTL)
	c.wantErr("AcquireSlotBurst with a canceled context", err, context.Canceled)
	c.wantErr("ReleaseSlot with a canceled context", c.s.ReleaseSlot(ctx, k), context.Canceled)
	c.wantErr("RefreshSlot with a canceled context", c.s.RefreshSlot(ctx, k, longTTL), context.Canceled)
	c.wantErr("ReleaseSlotBurst with a canceled context", c.s.ReleaseSlotBurst(ctx, k), context.Canceled)
	c.wantErr("RefreshSlotBurst with a canceled context", c.s.RefreshSlotBurst(ctx, k, longTTL), context.Canceled)
	_, err = c.s.Get(ctx, k)
	c.wantErr("Get with a canceled context", err, context.Canceled)
	c.wantErr("Set with a canceled context", c.s.Set(ctx, k, []byte("v"), 0), context.Canceled)
	c.wantErr("Delete with a canceled context", c.s.Delete(ctx, k), context.Canceled)
	if c.tk != nil {
		_, err = c.tk.Take(ctx, k, one.b)
		c.wantErr("Take with a canceled context", err, context.Canceled)
		c.wantErr("TakeMany with a canceled context", c.tk.TakeMany(ctx, []string{k}, one.b, make([]driver.Grant, 1)), context.Canceled)
		c.wantErr("Refund with a canceled context", c.tk.Refund(ctx, c.key("r"), one.b, r), context.Canceled)
	}
	// Nothing was done.
	c.fill("k")
	c.wantSpent("r")
}

// race runs f(i) on n goroutines released together and waits for them.
func race(n int, f func(i int)) {
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			f(i)
		}()
	}
	close(start)
	wg.Wait()
}

type outcome struct {
	ok  bool
	cur int64
	err error
}

// wantExactly checks n outcomes of racing acquisitions against a limit:
// exactly limit admitted, with the counts 1..limit each reported once, and
// every rejection reporting the limit.
func (c *check) wantExactly(call string, got []outcome, limit int64) {
	c.t.Helper()
	var admitted []int64
	for _, o := range got {
		switch {
		case o.err != nil:
			c.t.Fatalf("%s = %v, %d, %v; want no error", call, o.ok, o.cur, o.err)
		case o.ok:
			admitted = append(admitted, o.cur)
		case o.cur != limit:
			c.t.Errorf("%s = false, %d, nil; want false, %d, nil", call, o.cur, limit)
		}
	}
	slices.Sort(admitted)
	want := make([]int64, limit)
	for i := range want {
		want[i] = int64(i + 1)
	}
	if !slices.Equal(admitted, want) {
		c.t.Errorf("%d racing %s admitted with counts %v; want %v", len(got), call, admitted, want)
	}
}

const racers = 64

func testConcurrentAcquireSlot(c *check) {
	got := make([]outcome, racers)
	race(racers, func(i int) {
		ok, cur, err := c.s.AcquireSlot(c.ctx, c.key("k"), 10, longTTL)
		got[i] = outcome{ok, cur, err}
	})
	c.wantExactly(fmt.Sprintf("AcquireSlot(%q, 10, %v)", "k", longTTL), got, 10)
}

func testConcurrentAcquireSlotBurst(c *check) {
	got := make([]outcome, racers)
	race(racers, func(i int) {
		ok, cur, err := c.s.AcquireSlotBurst(c.ctx, c.key("k"), 5, 8, time.Hour, longTTL)
		got[i] = outcome{ok, cur, err}
	})
	c.wantExactly(fmt.Sprintf("AcquireSlotBurst(%q, 5, 8, 1h, %v)", "k", longTTL), got, 8)
}

func testConcurrentTokenBucket(c *check) {
	got := make([]outcome, 2*racers)
	race(len(got), func(i int) {
		ok, _, err := c.s.TokenBucket(c.ctx, c.key("k"), 20, perHour, 1)
		got[i] = outcome{ok: ok, err: err}
	})
	n := 0
	for _, o := range got {
		if o.err != nil {
			c.t.Fatalf("TokenBucket(%q, 20, %v, 1): %v; want no error", "k", perHour, o.err)
		}
		if o.ok {
			n++
		}
	}
	if n != 20 {
		c.t.Errorf("%d racing TokenBucket(%q, 20, %v, 1): %d allowed; want 20", len(got), "k", perHour, n)
	}
}

// testConcurrentAcquireRelease races holders that acquire and release: the
// limit holds throughout, and every slot is free at the end.
func testConcurrentAcquireRelease(c *check) {
	const limit, rounds = 4, 25
	var mu sync.Mutex
	var errs []string
	race(16, func(int) {
		for range rounds {
			ok, cur, err := c.s.AcquireSlot(c.ctx, c.key("k"), limit, longTTL)
			if err == nil && ok {
				err = c.s.ReleaseSlot(c.ctx, c.key("k"))
			}
			if err != nil || cur > limit || cur < 0 || ok && cur < 1 {
				mu.Lock()
				errs = append(errs, fmt.Sprintf("AcquireSlot(%q, %d, %v) = %v, %d, %v", "k", limit, longTTL, ok, cur, err))
				mu.Unlock()
			}
			ok, cur, err = c.s.AcquireSlotBurst(c.ctx, c.key("k"), limit, limit, 0, longTTL)
			if err == nil && ok {
				err = c.s.ReleaseSlotBurst(c.ctx, c.key("k"))
			}
			if err != nil || cur > limit || cur < 0 || ok && cur < 1 {
				mu.Lock()
				errs = append(errs, fmt.Sprintf("AcquireSlotBurst(%q, %d, %d, 0, %v) = %v, %d, %v", "k", limit, limit, longTTL, ok, cur, err))
				mu.Unlock()
			}
		}
	})
	for _, e := range errs {
		c.t.Errorf("%s; want no error and a count in [0, %d]", e, limit)
	}
	for i := int64(1); i <= limit; i++ {
		c.wantAcquire("k", limit, longTTL, true, i)
		c.wantAcquireBurst("k", limit, limit, 0, longTTL, true, i)
	}
	c.wantAcquire("k", limit, longTTL, false, limit)
	c.wantAcquireBurst("k", limit, limit, 0, longTTL, false, limit)
}

// testConcurrentDeleteTokenBucket races Delete with takes on the same key:
// a Delete is never lost. Each key first spends 1000 tokens; then one
// goroutine deletes the keys one after another while another keeps taking
// one token from the key being deleted (each Delete waits until a take on
// its key has been admitted, so that the next one is under way). Whatever the order, the takes after
// a Delete draw from a full bucket, so with n takes admitted on a key a take
// of capacity − n − 1 fits (one token of margin for rounding); a Delete lost
// to a racing take leaves 1000 fewer.
func testConcurrentDeleteTokenBucket(c *check) {
	const keys, capacity, spent = 100, 1 << 16, 1000
	name := func(i int) string { return fmt.Sprintf("k%d", i) }
	for i := range keys {
		c.wantTake(name(i), capacity, perHour, spent, true)
	}
	admitted := make([]atomic.Int64, keys)
	var cur atomic.Int64 // the key being deleted; keys when done
	var stopped atomic.Bool
	var mu sync.Mutex
	var errs []string
	fail := func(format string, args ...any) {
		mu.Lock()
		errs = append(errs, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	race(2, func(g int) {
		if g == 0 {
			defer stopped.Store(true)
			for i := cur.Load(); i < keys; i = cur.Load() {
				ok, _, err := c.s.TokenBucket(c.ctx, c.key(name(int(i))), capacity, perHour, 1)
				if err != nil {
					fail("TokenBucket(%q, %d, %v, 1): %v; want no error", name(int(i)), capacity, perHour, err)
					return
				}
				if ok {
					admitted[i].Add(1)
				}
				runtime.Gosched() // on one core, let the deleter in
			}
			return
		}
		defer cur.Store(keys)
		for i := range keys {
			cur.Store(int64(i))
			// Delete once the taker has reached this key, so that
			// its next take is under way.
			for admitted[i].Load() == 0 && !stopped.Load() {
				runtime.Gosched()
			}
			if err := c.s.Delete(c.ctx, c.key(name(i))); err != nil {
				fail("Delete(%q) = %v; want nil", name(i), err)
				return
			}
		}
	})
	if len(errs) > 0 {
		c.t.Fatalf("%s", strings.Join(errs, "; "))
	}
	lost := 0
	for i := range keys {
		n := admitted[i].Load()
		cost := float64(capacity - n - 1)
		if ok, _ := c.tokenBucket(name(i), capacity, perHour, cost); !ok {
			if lost == 0 {
				c.t.Errorf("TokenBucket(%q, %d, %v, %v) = false after a Delete racing %d admitted takes; want true: the Delete was lost",
					name(i), capacity, perHour, cost, n)
			}
			lost++
		}
	}
	if lost > 0 {
		c.t.Errorf("%d of %d Deletes racing TokenBucket on their key were lost", lost, keys)
	}
}
