package storetest

// The suite's own tests run it on deliberately broken stores and check that
// it fails, and in the subtest that pins the broken behaviour. They cannot
// hand the suite a *testing.T whose failures do not fail the test itself, so
// the suite runs over the small interface tb: Run adapts a *testing.T to it,
// and these tests adapt a recorder, which runs each subtest on a goroutine
// of its own (so that Fatalf can end it with runtime.Goexit, as the testing
// package does) and collects the failures.

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/driver"
	"github.com/ratepace/pace/internal/fakeclock"
	"github.com/ratepace/pace/internal/storekit"
	"github.com/ratepace/pace/memory"
)

// recorder is a tb that records failures instead of reporting them.
type recorder struct {
	name     string
	failures *failures

	mu       sync.Mutex
	failed   bool
	cleanups []func()
}

type failures struct {
	mu   sync.Mutex
	msgs map[string][]string // by subtest name
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	r.failed = true
	r.mu.Unlock()
	r.failures.mu.Lock()
	r.failures.msgs[r.name] = append(r.failures.msgs[r.name], fmt.Sprintf(format, args...))
	r.failures.mu.Unlock()
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}

func (r *recorder) Cleanup(f func()) {
	r.mu.Lock()
	r.cleanups = append(r.cleanups, f)
	r.mu.Unlock()
}

func (r *recorder) Parallel() {}

func (r *recorder) Run(name string, f func(t tb)) bool {
	c := &recorder{name: name, failures: r.failures}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			for i := len(c.cleanups) - 1; i >= 0; i-- {
				c.cleanups[i]()
			}
		}()
		f(c)
	}()
	<-done
	if c.failed {
		r.mu.Lock()
		r.failed = true
		r.mu.Unlock()
	}
	return !c.failed
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// runRecorded runs the suite on the stores newStore makes from one fake
// clock, and returns the failures by subtest.
func runRecorded(newStore func(clk *fakeclock.Clock) TakeStore) map[string][]string {
	clk := fakeclock.New(epoch)
	f := &failures{msgs: make(map[string][]string)}
	rec := &recorder{name: "root", failures: f}
	run(rec, seed, func(tb) (pace.Store, driver.Taker) { return newStore(clk), nil }, WithAdvance(clk.Advance))
	run(rec, takes, func(tb) (pace.Store, driver.Taker) { s := newStore(clk); return s, s }, WithAdvance(clk.Advance))
	return f.msgs
}

func TestSuitePassesMemoryStore(t *testing.T) {
	got := runRecorded(func(clk *fakeclock.Clock) TakeStore { return memory.New(memory.WithClock(clk.Now)) })
	for name, msgs := range got {
		t.Errorf("%s failed on the memory store: %s", name, strings.Join(msgs, "; "))
	}
}

// TestSuiteCatchesBrokenStores runs the suite on stores that are each
// broken in one way and checks that the subtest pinning that behaviour
// fails.
func TestSuiteCatchesBrokenStores(t *testing.T) {
	for _, m := range mutants {
		t.Run(m.name, func(t *testing.T) {
			got := runRecorded(m.store)
			if len(got) == 0 {
				t.Fatalf("the suite passed a store with this bug: %s", m.bug)
			}
			if _, ok := got[m.caughtBy]; !ok {
				t.Errorf("%s did not fail on a store with this bug: %s", m.caughtBy, m.bug)
			}
			names := make([]string, 0, len(got))
			for name := range got {
				names = append(names, name)
			}
			sort.Strings(names)
			t.Logf("%s: caught by %s; first: %s", m.bug, strings.Join(names, ", "), got[m.caughtBy])
		})
	}
}

type mutant struct {
	name     string
	bug      string
	caughtBy string // the subtest that must fail
	store    func(clk *fakeclock.Clock) TakeStore
}

func mem(clk *fakeclock.Clock) *memory.Store { return memory.New(memory.WithClock(clk.Now)) }

var mutants = []mutant{
	{"ExtraToken", "TokenBucket admits one token more than the capacity", "TokenBucketAdmitsCapacity",
		func(clk *fakeclock.Clock) TakeStore { return extraToken{mem(clk)} }},
	{"IgnoresCost", "TokenBucket debits one token whatever the cost", "TokenBucketCost",
		func(clk *fakeclock.Clock) TakeStore { return ignoresCost{mem(clk)} }},
	{"RetryAfterZero", "TokenBucket reports retryAfter 0 on a refusal", "TokenBucketRetryAfter",
		func(clk *fakeclock.Clock) TakeStore { return retryAfterZero{mem(clk)} }},
	{"AcceptsZeroLimit", "AcquireSlot treats a limit below 1 as 1", "AcquireSlotInvalidArguments",
		func(clk *fakeclock.Clock) TakeStore { return acceptsZeroLimit{mem(clk)} }},
	{"ReleaseDoesNothing", "ReleaseSlot does nothing", "AcquireSlotLimit",
		func(clk *fakeclock.Clock) TakeStore { return releaseNoop{mem(clk)} }},
	{"RejectionIncrements", "a rejected AcquireSlot still increments the counter", "AcquireSlotRejectionLeavesCounter",
		func(clk *fakeclock.Clock) TakeStore { return rejectionIncrements{mem(clk)} }},
	{"NoCeiling", "AcquireSlotBurst admits past the ceiling", "AcquireSlotBurstCeiling",
		func(clk *fakeclock.Clock) TakeStore { return noCeiling{mem(clk)} }},
	{"BudgetNeverDrains", "elapsed time is never charged, so the burst budget never drains", "AcquireSlotBurstBudgetExhausted",
		func(clk *fakeclock.Clock) TakeStore { return newBurstMutant(clk, burstBugs{noCharge: true}) }},
	{"ExpiryLaundersBudget", "an expired burst slot starts again with a full budget", "AcquireSlotBurstExpiryKeepsDebt",
		func(clk *fakeclock.Clock) TakeStore { return newBurstMutant(clk, burstBugs{launder: true}) }},
	{"ReleaseDoesNotCharge", "ReleaseSlotBurst decrements without charging the time at the old count", "ReleaseSlotBurstChargesTime",
		func(clk *fakeclock.Clock) TakeStore { return newBurstMutant(clk, burstBugs{releaseNoCharge: true}) }},
	{"RefreshResurrects", "RefreshSlotBurst extends an expired slot, bringing its holders back", "RefreshSlotBurstNoResurrection",
		func(clk *fakeclock.Clock) TakeStore { return newBurstMutant(clk, burstBugs{refreshResurrects: true}) }},
	{"MissingTTL", "Set ignores its TTL", "SetTTLExpires",
		func(clk *fakeclock.Clock) TakeStore { return missingTTL{mem(clk)} }},
	{"GetAliases", "Get returns the same slice to every caller", "GetReturnsCopy",
		func(clk *fakeclock.Clock) TakeStore { return newAliasing(mem(clk), false) }},
	{"SetAliases", "Set keeps the caller's slice", "GetReturnsCopy",
		func(clk *fakeclock.Clock) TakeStore { return newAliasing(mem(clk), true) }},
	{"NilErrorOnMissingKey", "Get returns nil, nil for an absent key", "GetNotFound",
		func(clk *fakeclock.Clock) TakeStore { return nilOnMissing{mem(clk)} }},
	{"SlotNamespacesCollide", "plain slots are kept as burst slots under the same key", "NamespacesSeparate",
		func(clk *fakeclock.Clock) TakeStore { return collide{mem(clk)} }},
	{"DeleteKeepsBuckets", "Delete leaves the token bucket in place", "DeleteClearsAllNamespaces",
		func(clk *fakeclock.Clock) TakeStore {
			return deleteKeepsBuckets{TakeStore: mem(clk), buckets: mem(clk)}
		}},
	{"RefundOverRefunds", "a refund gives back a whole interval of every shape, whatever has refilled", "RefundLateGivesOnlyItsOwnPart",
		func(clk *fakeclock.Clock) TakeStore { return newTakeMutant(clk, takeBugs{overRefund: true}) }},
	{"RefundIgnoresReorders", "a refund treats every receipt as intact, whatever was given back out of order since", "RefundNeverOverPace",
		func(clk *fakeclock.Clock) TakeStore { return newTakeMutant(clk, takeBugs{ignoreReorders: true}) }},
	{"RefundNeverIntact", "a refund treats every receipt as no longer intact", "RefundLateGivesOnlyItsOwnPart",
		func(clk *fakeclock.Clock) TakeStore { return newTakeMutant(clk, takeBugs{neverIntact: true}) }},
	{"RefundMemoWithoutGen", "the memo of the latest reordering refund ignores Gen, so another take with the same At and Reserved gives nothing", "RefundAtOnceIsExact",
		func(clk *fakeclock.Clock) TakeStore { return newTakeMutant(clk, takeBugs{memoWithoutGen: true}) }},
	{"TakeDebitsOnRefusal", "a take refused by one shape debits the shapes that would have admitted it", "TakeSeveralShapesAllOrNothing",
		func(clk *fakeclock.Clock) TakeStore { return newTakeMutant(clk, takeBugs{debitOnRefusal: true}) }},
	{"TakeFirstShapeOnly", "only the first shape decides and is debited", "TakeSeveralShapesAdmitWhatAllAllow",
		func(clk *fakeclock.Clock) TakeStore { return newTakeMutant(clk, takeBugs{firstShapeOnly: true}) }},
	{"RemainingPlusOne", "Remaining counts the take just made as still there", "TakeReportsGrant",
		func(clk *fakeclock.Clock) TakeStore { return newTakeMutant(clk, takeBugs{remainingPlusOne: true}) }},
	{"RemainingOfLoosestShape", "Remaining is that of the shape with the most left", "TakeReportsGrant",
		func(clk *fakeclock.Clock) TakeStore { return newTakeMutant(clk, takeBugs{loosestRemaining: true}) }},
	{"RetryAfterShortest", "RetryAfter is the shortest wait of the shapes that refuse", "TakeReportsGrant",
		func(clk *fakeclock.Clock) TakeStore { return newTakeMutant(clk, takeBugs{shortestRetry: true}) }},
	{"ResetOfFirstShape", "Reset is the first shape's", "TakeReportsGrant",
		func(clk *fakeclock.Clock) TakeStore { return newTakeMutant(clk, takeBugs{firstShapeReset: true}) }},
	{"TakeManyMixesKeys", "TakeMany writes the grants in the reverse order of the keys", "TakeManyEqualsTake",
		func(clk *fakeclock.Clock) TakeStore { return newTakeMutant(clk, takeBugs{manyMixesKeys: true}) }},
	{"RefundOutlivesDelete", "a refund of a take made before Delete gives back to the key made since", "RefundAfterDeleteGivesNothing",
		func(clk *fakeclock.Clock) TakeStore { return newTakeMutant(clk, takeBugs{refundsOldKeys: true}) }},
	{"DeleteKeepsTakes", "Delete leaves the Take rows", "DeleteClearsAllNamespaces",
		func(clk *fakeclock.Clock) TakeStore { return newTakeMutant(clk, takeBugs{deleteKeepsTakes: true}) }},
	{"ZeroReceiptRefunds", "a refund of the zero Receipt gives back one interval", "RefundZeroReceipt",
		func(clk *fakeclock.Clock) TakeStore { return newTakeMutant(clk, takeBugs{zeroRefunds: true}) }},
	{"TakeNotAtomic", "a take reads and writes its key under two separate locks", "ConcurrentTake",
		func(clk *fakeclock.Clock) TakeStore { return newTakeMutant(clk, takeBugs{racyTake: true}) }},
	{"TakeAcceptsZeroBucket", "the zero Bucket is taken as a shape", "TakeInvalidArguments",
		func(clk *fakeclock.Clock) TakeStore { return newTakeMutant(clk, takeBugs{zeroBucketOK: true}) }},
	{"ReceiptInMicroseconds", "receipt times are microseconds", "TakeReceiptTimes",
		func(clk *fakeclock.Clock) TakeStore { return newTakeMutant(clk, takeBugs{microseconds: true}) }},
	{"TakeIgnoresClose", "Take, TakeMany and Refund work after Close", "Close",
		func(clk *fakeclock.Clock) TakeStore { return newTakeMutant(clk, takeBugs{ignoresClose: true}) }},
	{"DeleteLosesRace", "Delete gives up when a take changes the bucket while it runs", "ConcurrentDeleteTokenBucket",
		func(clk *fakeclock.Clock) TakeStore { return &deleteLosesRace{TakeStore: mem(clk)} }},
	{"CloseDoesNothing", "Close does nothing", "Close",
		func(clk *fakeclock.Clock) TakeStore { return closeNoop{mem(clk)} }},
	{"IgnoresContext", "a canceled context is ignored", "ContextCanceled",
		func(clk *fakeclock.Clock) TakeStore { return ignoresContext{mem(clk)} }},
}

type extraToken struct{ TakeStore }

func (s extraToken) TokenBucket(ctx context.Context, key string, capacity, rate, cost float64) (bool, time.Duration, error) {
	return s.TakeStore.TokenBucket(ctx, key, capacity+1, rate, cost)
}

type ignoresCost struct{ TakeStore }

func (s ignoresCost) TokenBucket(ctx context.Context, key string, capacity, rate, cost float64) (bool, time.Duration, error) {
	if cost > 0 && cost <= capacity {
		cost = 1
	}
	return s.TakeStore.TokenBucket(ctx, key, capacity, rate, cost)
}

type retryAfterZero struct{ TakeStore }

func (s retryAfterZero) TokenBucket(ctx context.Context, key string, capacity, rate, cost float64) (bool, time.Duration, error) {
	ok, _, err := s.TakeStore.TokenBucket(ctx, key, capacity, rate, cost)
	return ok, 0, err
}

type acceptsZeroLimit struct{ TakeStore }

func (s acceptsZeroLimit) AcquireSlot(ctx context.Context, key string, limit int64, ttl time.Duration) (bool, int64, error) {
	return s.TakeStore.AcquireSlot(ctx, key, max(limit, 1), ttl)
}

type releaseNoop struct{ TakeStore }

func (s releaseNoop) ReleaseSlot(ctx context.Context, key string) error {
	return driver.ValidateKey(key)
}

type rejectionIncrements struct{ TakeStore }

func (s rejectionIncrements) AcquireSlot(ctx context.Context, key string, limit int64, ttl time.Duration) (bool, int64, error) {
	ok, cur, err := s.TakeStore.AcquireSlot(ctx, key, limit, ttl)
	if err == nil && !ok {
		_, _, _ = s.TakeStore.AcquireSlot(ctx, key, cur+1, ttl) // the increment that was not rolled back
	}
	return ok, cur, err
}

type noCeiling struct{ TakeStore }

func (s noCeiling) AcquireSlotBurst(ctx context.Context, key string, sustained, ceiling int64, budget, ttl time.Duration) (bool, int64, error) {
	ok, cur, err := s.TakeStore.AcquireSlotBurst(ctx, key, sustained, ceiling, budget, ttl)
	if err == nil && !ok && cur >= ceiling {
		return true, cur + 1, nil
	}
	return ok, cur, err
}

type missingTTL struct{ TakeStore }

func (s missingTTL) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	if ttl < 0 {
		return s.TakeStore.Set(ctx, key, value, ttl)
	}
	return s.TakeStore.Set(ctx, key, value, 0)
}

// aliasing keeps the bytes of each value itself, and returns them (or
// stores the caller's) without copying; the wrapped store still decides
// presence and expiry.
type aliasing struct {
	TakeStore
	keepCallers bool
	mu          sync.Mutex
	values      map[string][]byte
}

func newAliasing(s TakeStore, keepCallers bool) *aliasing {
	return &aliasing{TakeStore: s, keepCallers: keepCallers, values: make(map[string][]byte)}
}

func (s *aliasing) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	if err := s.TakeStore.Set(ctx, key, value, ttl); err != nil {
		return err
	}
	if !s.keepCallers {
		value = slices.Clone(value)
	}
	s.mu.Lock()
	s.values[key] = value
	s.mu.Unlock()
	return nil
}

func (s *aliasing) Get(ctx context.Context, key string) ([]byte, error) {
	if _, err := s.TakeStore.Get(ctx, key); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keepCallers {
		return slices.Clone(s.values[key]), nil
	}
	return s.values[key], nil
}

type nilOnMissing struct{ TakeStore }

func (s nilOnMissing) Get(ctx context.Context, key string) ([]byte, error) {
	v, err := s.TakeStore.Get(ctx, key)
	if err != nil && errors.Is(err, pace.ErrNotFound) {
		return nil, nil
	}
	return v, err
}

// collide keeps plain slots as burst slots with no budget, under the same
// keys as the burst slots.
type collide struct{ TakeStore }

func (s collide) AcquireSlot(ctx context.Context, key string, limit int64, ttl time.Duration) (bool, int64, error) {
	return s.TakeStore.AcquireSlotBurst(ctx, key, limit, limit, 0, ttl)
}
func (s collide) ReleaseSlot(ctx context.Context, key string) error {
	return s.TakeStore.ReleaseSlotBurst(ctx, key)
}
func (s collide) RefreshSlot(ctx context.Context, key string, ttl time.Duration) error {
	return s.TakeStore.RefreshSlotBurst(ctx, key, ttl)
}

// deleteKeepsBuckets keeps its buckets in a second store that Delete
// forgets to clear.
type deleteKeepsBuckets struct {
	TakeStore
	buckets pace.Store
}

func (s deleteKeepsBuckets) TokenBucket(ctx context.Context, key string, capacity, rate, cost float64) (bool, time.Duration, error) {
	if _, _, err := s.TakeStore.TokenBucket(ctx, key, capacity, rate, 0); err != nil { // for validation, ctx and Close
		return false, 0, err
	}
	return s.buckets.TokenBucket(ctx, key, capacity, rate, cost)
}

// deleteLosesRace deletes as a compare-and-swap done once: it reads the
// version of the key's bucket, lets other goroutines run (as a round trip
// would), and gives up, returning nil, when a take has changed the bucket
// in the meantime.
type deleteLosesRace struct {
	TakeStore
	mu       sync.Mutex
	versions map[string]int
}

func (s *deleteLosesRace) version(key string, bump bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.versions == nil {
		s.versions = make(map[string]int)
	}
	if bump {
		s.versions[key]++
	}
	return s.versions[key]
}

func (s *deleteLosesRace) TokenBucket(ctx context.Context, key string, capacity, rate, cost float64) (bool, time.Duration, error) {
	ok, retry, err := s.TakeStore.TokenBucket(ctx, key, capacity, rate, cost)
	if ok {
		s.version(key, true)
	}
	return ok, retry, err
}

func (s *deleteLosesRace) Delete(ctx context.Context, key string) error {
	v := s.version(key, false)
	runtime.Gosched()
	if s.version(key, false) != v {
		return driver.ValidateKey(key)
	}
	return s.TakeStore.Delete(ctx, key)
}

type closeNoop struct{ TakeStore }

func (s closeNoop) Close(context.Context) error { return nil }

type ignoresContext struct{ TakeStore }

func (s ignoresContext) TokenBucket(_ context.Context, key string, capacity, rate, cost float64) (bool, time.Duration, error) {
	return s.TakeStore.TokenBucket(context.Background(), key, capacity, rate, cost)
}

// burstMutant keeps burst slots in its own table, with pace's arithmetic
// and one bug, and everything else in a memory store.
type burstMutant struct {
	TakeStore
	clk  *fakeclock.Clock
	bugs burstBugs

	mu    sync.Mutex
	slots map[string]*pace.BurstSlotState
}

type burstBugs struct {
	noCharge          bool // elapsed time is never charged
	launder           bool // an expired slot starts afresh
	releaseNoCharge   bool // a release decrements without charging
	refreshResurrects bool // a refresh extends without assessing
}

func newBurstMutant(clk *fakeclock.Clock, bugs burstBugs) *burstMutant {
	return &burstMutant{TakeStore: mem(clk), clk: clk, bugs: bugs, slots: make(map[string]*pace.BurstSlotState)}
}

// check runs the wrapped store's checks (context, Close, the key) through a
// harmless call.
func (s *burstMutant) check(ctx context.Context, key string) error {
	_, err := s.TakeStore.Get(ctx, key)
	if err != nil && !errors.Is(err, pace.ErrNotFound) {
		return err
	}
	return nil
}

// slot returns the state of key at now, with the bugs that act before a
// decision applied. The caller holds mu.
func (s *burstMutant) slot(key string, now time.Time) *pace.BurstSlotState {
	st := s.slots[key]
	if st == nil {
		st = new(pace.BurstSlotState)
		s.slots[key] = st
	}
	if s.bugs.noCharge && !st.LastAssessed.IsZero() {
		st.LastAssessed = now
	}
	if s.bugs.launder && st.Count > 0 && !now.Before(st.Expires) {
		*st = pace.BurstSlotState{}
	}
	return st
}

func (s *burstMutant) AcquireSlotBurst(ctx context.Context, key string, sustained, ceiling int64, budget, ttl time.Duration) (bool, int64, error) {
	if err := s.check(ctx, key); err != nil {
		return false, 0, err
	}
	if err := driver.ValidateSlotBurst(key, sustained, ceiling, budget, ttl); err != nil {
		return false, 0, err
	}
	now := s.clk.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.slot(key, now)
	ok := pace.AdmitBurst(st, sustained, ceiling, budget, ttl, now)
	return ok, st.Count, nil
}

func (s *burstMutant) ReleaseSlotBurst(ctx context.Context, key string) error {
	if err := s.check(ctx, key); err != nil {
		return err
	}
	now := s.clk.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.slot(key, now)
	if s.bugs.releaseNoCharge && st.Count > 0 && now.Before(st.Expires) {
		st.Count--
		st.LastAssessed = now
		return nil
	}
	pace.ReleaseBurst(st, now)
	return nil
}

func (s *burstMutant) RefreshSlotBurst(ctx context.Context, key string, ttl time.Duration) error {
	if err := s.check(ctx, key); err != nil {
		return err
	}
	if err := driver.ValidateRefresh(key, ttl); err != nil {
		return err
	}
	now := s.clk.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.slot(key, now)
	if s.bugs.refreshResurrects {
		if st.Count > 0 {
			st.Expires = now.Add(ttl)
		}
		return nil
	}
	pace.RefreshBurst(st, ttl, now)
	return nil
}

func (s *burstMutant) Delete(ctx context.Context, key string) error {
	if err := s.TakeStore.Delete(ctx, key); err != nil {
		return err
	}
	s.mu.Lock()
	delete(s.slots, key)
	s.mu.Unlock()
	return nil
}

// takeMutant keeps the Take namespace in a table of its own, deciding with
// pace's arithmetic as memory.Store does, with the bugs it is given, and
// everything else in a memory store.
type takeMutant struct {
	TakeStore
	clk  *fakeclock.Clock
	bugs takeBugs

	mu   sync.Mutex
	rows map[string]*takeModelRow
	seq  uint64
}

type takeBugs struct {
	overRefund       bool // a refund gives back a whole interval of every shape, whatever has refilled
	ignoreReorders   bool // every receipt is intact, whatever was given back out of order since
	neverIntact      bool // no receipt is intact
	memoWithoutGen   bool // the copy memo tells receipts apart by At and Reserved only (not Gen)
	debitOnRefusal   bool // a refused take debits the shapes that would have admitted it
	firstShapeOnly   bool // only the first shape decides and is debited
	remainingPlusOne bool // Remaining counts the take just made as still there
	loosestRemaining bool // Remaining of the shape with the most left
	shortestRetry    bool // RetryAfter is the shortest wait of the shapes that refuse
	firstShapeReset  bool // Reset is the first shape's
	manyMixesKeys    bool // TakeMany writes the grants in the reverse order of the keys
	refundsOldKeys   bool // a refund of a take made before Delete gives back to the key made since
	deleteKeepsTakes bool // Delete leaves the Take rows
	zeroRefunds      bool // a refund of the zero Receipt gives back one interval of every shape
	racyTake         bool // a take reads and writes its key under two separate locks
	zeroBucketOK     bool // the zero Bucket is taken as a shape
	microseconds     bool // receipt times in microseconds
	ignoresClose     bool // Take works after Close
}

type takeModelRow struct {
	tats      [driver.MaxShapes]time.Duration
	gen, born uint64
	memo      driver.Receipt // At, Gen and Reserved[0] of the latest reordering refund
}

func newTakeMutant(clk *fakeclock.Clock, bugs takeBugs) *takeMutant {
	return &takeMutant{TakeStore: mem(clk), clk: clk, bugs: bugs, rows: make(map[string]*takeModelRow)}
}

func (s *takeMutant) now() time.Duration { return s.clk.Now().Sub(time.Unix(0, 0)) }

func (r *takeModelRow) full(now time.Duration) bool {
	for _, t := range r.tats {
		if t > now {
			return false
		}
	}
	return true
}

// check runs the wrapped store's checks (context, Close, the key) through a
// harmless call, and validates the shapes.
func (s *takeMutant) check(ctx context.Context, key string, shapes []driver.Shape) error {
	if s.bugs.ignoresClose {
		if err := ctx.Err(); err != nil {
			return err
		}
	} else if _, err := s.TakeStore.Get(ctx, key); err != nil && !errors.Is(err, pace.ErrNotFound) {
		return err
	}
	if s.bugs.zeroBucketOK && len(shapes) >= 1 && len(shapes) <= driver.MaxShapes {
		return driver.ValidateKey(key)
	}
	return driver.ValidateTake(key, shapes)
}

func (s *takeMutant) Take(ctx context.Context, key string, shapes []driver.Shape) (driver.Grant, error) {
	if err := s.check(ctx, key, shapes); err != nil {
		return driver.Grant{}, err
	}
	return s.take(key, shapes), nil
}

func (s *takeMutant) TakeMany(ctx context.Context, keys []string, shapes []driver.Shape, out []driver.Grant) error {
	if len(out) != len(keys) {
		return driver.ValidateTakeMany(keys, shapes, out)
	}
	for _, k := range keys {
		if err := s.check(ctx, k, shapes); err != nil {
			return err
		}
	}
	for i, k := range keys {
		j := i
		if s.bugs.manyMixesKeys {
			j = len(keys) - 1 - i
		}
		out[j] = s.take(k, shapes)
	}
	return nil
}

func (s *takeMutant) take(key string, shapes []driver.Shape) driver.Grant {
	now := s.now()
	n := len(shapes)
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rows[key]
	live := r != nil && !r.full(now)
	var tats, next [driver.MaxShapes]time.Duration
	if live {
		tats = r.tats
	}
	if s.bugs.racyTake {
		s.mu.Unlock()
		runtime.Gosched() // a round trip between the read and the write
		s.mu.Lock()
	}
	decide := shapes
	if s.bugs.firstShapeOnly {
		decide = shapes[:1]
		copy(next[1:n], tats[1:n])
	}
	wait, ok := driver.TakeAll(decide, tats[:len(decide)], next[:len(decide)], now)
	remaining, reset := driver.RemainingAll(shapes, next[:n], now)
	switch {
	case s.bugs.loosestRemaining:
		for i, b := range shapes {
			remaining = max(remaining, b.Remaining(next[i], now))
		}
		if !ok {
			remaining = 0
		}
	case s.bugs.remainingPlusOne && ok:
		remaining++
	}
	if s.bugs.firstShapeReset {
		reset = max(next[0]-now, 0)
	}
	if !ok {
		if s.bugs.shortestRetry {
			for i, b := range shapes {
				if _, w, fits := b.Take(tats[i], now); !fits {
					wait = min(wait, w)
				}
			}
		}
		if s.bugs.debitOnRefusal {
			debited := tats
			for i, b := range shapes {
				if nx, _, fits := b.Take(tats[i], now); fits {
					debited[i] = nx
				}
			}
			s.write(key, r, live, debited)
		}
		return driver.Grant{RetryAfter: wait, Remaining: remaining, Reset: reset}
	}
	g := driver.Grant{OK: true, Remaining: remaining, Reset: reset, Receipt: driver.Receipt{At: now, Reserved: next}}
	if reset > 0 || live {
		g.Receipt.Gen = s.write(key, r, live, next)
	}
	if s.bugs.microseconds {
		g.Receipt.At /= 1000
		for i := range g.Receipt.Reserved {
			g.Receipt.Reserved[i] /= 1000
		}
	}
	return g
}

// write stores tats at key, in a new row unless live, and returns the key's
// reorder count. The caller holds mu.
func (s *takeMutant) write(key string, r *takeModelRow, live bool, tats [driver.MaxShapes]time.Duration) uint64 {
	if !live {
		s.seq++
		r = &takeModelRow{gen: s.seq, born: s.seq}
		s.rows[key] = r
	}
	r.tats = tats
	return r.gen
}

func (s *takeMutant) Refund(ctx context.Context, key string, shapes []driver.Shape, rc driver.Receipt) error {
	if err := s.check(ctx, key, shapes); err != nil {
		return err
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rows[key]
	n := len(shapes)
	if rc == (driver.Receipt{}) {
		if s.bugs.zeroRefunds && r != nil {
			for i, b := range shapes {
				r.tats[i] = max(r.tats[i]-b.Interval(), now)
			}
		}
		return nil
	}
	if s.bugs.microseconds {
		rc.At *= 1000
		for i := range rc.Reserved {
			rc.Reserved[i] *= 1000
		}
	}
	if r == nil || rc.Gen < r.born && !s.bugs.refundsOldKeys {
		return nil
	}
	if r.full(now) {
		delete(s.rows, key)
		return nil
	}
	intact := r.gen == rc.Gen && !s.bugs.neverIntact || s.bugs.ignoreReorders
	if !intact && r.memo.At == rc.At && r.memo.Reserved[0] == rc.Reserved[0] && (r.memo.Gen == rc.Gen || s.bugs.memoWithoutGen) {
		return nil
	}
	var next [driver.MaxShapes]time.Duration
	reordered := true
	if s.bugs.overRefund {
		for i, b := range shapes {
			next[i] = max(r.tats[i]-b.Interval(), now)
		}
	} else {
		var reorder time.Duration
		_, reorder = driver.RefundAll(shapes, r.tats[:n], next[:n], rc, now, storekit.Shifted(intact))
		reordered = reorder > 0
	}
	copy(r.tats[:n], next[:n])
	if reordered {
		s.seq++
		r.gen = s.seq
		r.memo = driver.Receipt{At: rc.At, Gen: rc.Gen, Reserved: [driver.MaxShapes]time.Duration{rc.Reserved[0]}}
	}
	if r.full(now) {
		delete(s.rows, key)
	}
	return nil
}

func (s *takeMutant) Delete(ctx context.Context, key string) error {
	if err := s.TakeStore.Delete(ctx, key); err != nil {
		return err
	}
	if !s.bugs.deleteKeepsTakes {
		s.mu.Lock()
		delete(s.rows, key)
		s.mu.Unlock()
	}
	return nil
}

// TestSuitePassesTakeModel runs the suite on the Take model of the mutants
// without a bug: what fails on a mutant fails for its bug.
func TestSuitePassesTakeModel(t *testing.T) {
	got := runRecorded(func(clk *fakeclock.Clock) TakeStore { return newTakeMutant(clk, takeBugs{}) })
	for name, msgs := range got {
		t.Errorf("%s failed on the Take model without a bug: %s", name, strings.Join(msgs, "; "))
	}
}
