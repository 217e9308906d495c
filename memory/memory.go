// Package memory implements the process-local pace.Store used by every deployment.
package memory

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/driver"
	keyed "github.com/ratepace/pace/internal/table"
)

// Store is a pace.Store held in process memory: the fast tier for a single
// process, and the reference implementation of the contract that package
// storetest checks. Token buckets live in the table behind pace.Pace (the arithmetic of
// pace.Pace); burst slots decide with pace.AdmitBurst and its companions,
// Take, TakeMany and Refund with driver.TakeAll, driver.RemainingAll and
// driver.RefundAll.
//
// Rows indistinguishable from absent ones (a slot with no holder or past its
// TTL, a burst slot with no holder and a full budget, an expired value, a
// Take key whose every shape is full) are reclaimed on the calling goroutine,
// with no background goroutine, within ten seconds of their reclaim time;
// memory is bounded by about twice the rows live within the last ten seconds
// (docs/store.md). Time is read once per call, from WithClock's clock.
//
// Store must be created with New. It is safe for concurrent use by multiple
// goroutines; methods honour ctx only by returning ctx.Err() when it is
// already done, since none of them blocks.
type Store struct {
	shards  [numShards]shard
	seed    maphash.Seed
	buckets *keyed.Table
	clock   func() time.Time
	closed  atomic.Bool

	// The longest lifetime given to a row of each namespace, in
	// nanoseconds (see sweep).
	slotHorizon, burstHorizon, valueHorizon atomic.Int64
	cursor                                  atomic.Uint32 // the next shard sweepIdle looks at
	takeHorizon                             atomic.Int64  // the longest Tolerance given to Take

	shapes [1 << shapeBits]atomic.Pointer[shapeEntry] // see shape
}

// shapeEntry is a validated bucket shape and the arguments it came from.
type shapeEntry struct {
	capacity, rate, cost float64
	b                    driver.Shape
}

var _ pace.Store = (*Store)(nil)

const (
	shardBits = 6
	numShards = 1 << shardBits

	shapeBits = 4

	// minRows is the size below which a namespace of a shard is not swept
	// for having doubled.
	minRows = 8
)

type shard struct {
	mu     sync.Mutex
	last   time.Time // latest clock reading seen; guarded by mu
	slots  table[slotRow]
	bursts table[pace.BurstSlotState]
	values table[valueRow]
	takes  table[takeRow] // see take.go
	// takeSeq is the last reorder count handed to a Take row of this shard
	// (see takeRow.gen); guarded by mu.
	takeSeq uint64
	_       [64]byte // keep neighbouring shards' locks off this cache line
}

// table is one namespace of a shard. Rows are pointers so that an update is
// one map lookup and the stored key is never replaced: assigning to an
// existing string key would store the caller's string in place of the clone.
type table[R any] struct {
	m         map[string]*R
	swept     int       // rows after the last pass
	high      int       // most rows since the map was last built
	nextSweep time.Time // when a horizon pass is due
}

type slotRow struct {
	count   int64
	expires time.Time
}

type valueRow struct {
	value   []byte
	expires time.Time // zero: never
}

// Option configures New.
type Option func(*Store)

// WithClock makes the store read time from now instead of the monotonic
// clock, for tests and simulations. now is called once per call, possibly
// from many goroutines at once, and must never return the zero time.Time.
// The token buckets read it too. A nil now keeps the default: the monotonic
// time elapsed since New.
func WithClock(now func() time.Time) Option {
	return func(s *Store) { s.clock = now }
}

// New returns an empty Store.
func New(opts ...Option) *Store {
	s := &Store{seed: maphash.MakeSeed()}
	for _, o := range opts {
		if o != nil {
			o(s)
		}
	}
	// Without a clock of the caller's, the buckets keep their own default
	// (time.Since a monotonic epoch), cheaper than a time.Now per take.
	s.buckets = keyed.New(s.clock)
	if s.clock == nil {
		// The epoch plus the monotonic time since: one monotonic reading,
		// half the cost of time.Now, which also reads the wall clock.
		epoch := time.Now()
		s.clock = func() time.Time { return epoch.Add(time.Since(epoch)) }
	}
	return s
}

// closedErr is what every method returns after Close.
func closedErr(op string) error { return fmt.Errorf("memory: %s: %w", op, pace.ErrClosed) }

// begin checks what every method checks first: ctx and Close.
func (s *Store) begin(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.closed.Load() {
		return closedErr(op)
	}
	return nil
}

// lock reads the clock, locks the shard of key and returns it with the time
// of the decision, clamped so that it never moves backwards in a shard. It
// runs the sweeps that are due. It fails only when the store was closed.
func (s *Store) lock(key, op string) (*shard, time.Time, error) {
	now := s.clock()
	sh := &s.shards[maphash.String(s.seed, key)>>(64-shardBits)]
	sh.mu.Lock()
	if s.closed.Load() { // Close clears the maps under this lock
		sh.mu.Unlock()
		return nil, now, closedErr(op)
	}
	if now.Before(sh.last) {
		now = sh.last
	} else {
		sh.last = now
	}
	if s.sweepDue(sh, now) {
		s.sweepIdle(now)
	}
	return sh, now, nil
}

// sweepDue runs the passes due at now over the namespaces of sh, and
// reports whether any ran. The caller holds sh.mu.
func (s *Store) sweepDue(sh *shard, now time.Time) bool {
	ran := false
	if sh.slots.m != nil && !now.Before(sh.slots.nextSweep) {
		sweep(&sh.slots, now, &s.slotHorizon, slotLeft)
		ran = true
	}
	if sh.bursts.m != nil && !now.Before(sh.bursts.nextSweep) {
		sweep(&sh.bursts, now, &s.burstHorizon, burstLeft)
		ran = true
	}
	if sh.values.m != nil && !now.Before(sh.values.nextSweep) {
		sweep(&sh.values, now, &s.valueHorizon, valueLeft)
		ran = true
	}
	if sh.takes.m != nil && !now.Before(sh.takes.nextSweep) {
		sweep(&sh.takes, now, &s.takeHorizon, takeLeft)
		ran = true
	}
	return ran
}

// idleSpread is how many other shards a call that ran a pass looks at.
const idleSpread = 8

// sweepIdle runs the passes due on up to idleSpread other shards, in turn,
// skipping those whose lock is held. Calls sweep only the shard of their
// key, so without it the rows of a flood would stay in every shard that no
// later key hashes to; with it, any traffic at all cleans every shard
// within numShards/idleSpread periods. A shard's own latest reading stands
// if it is later than now. The caller may hold one shard's lock: TryLock
// never waits, so two callers cannot deadlock.
func (s *Store) sweepIdle(now time.Time) {
	for range idleSpread {
		sh := &s.shards[s.cursor.Add(1)%numShards]
		if sh.mu.TryLock() {
			s.sweepDue(sh, latest(now, sh.last))
			sh.mu.Unlock()
		}
	}
}

func latest(a, b time.Time) time.Time {
	if a.Before(b) {
		return b
	}
	return a
}

// TokenBucket implements pace.Store. The buckets are those of pace.Pace's table:
// retryAfter is exact to the nanosecond, and a full bucket holds no row.
func (s *Store) TokenBucket(ctx context.Context, key string, capacity, refillPerSec, cost float64) (bool, time.Duration, error) {
	if err := s.begin(ctx, "TokenBucket"); err != nil {
		return false, 0, err
	}
	b, err := s.shape(key, capacity, refillPerSec, cost)
	if err != nil {
		return false, 0, err
	}
	ok, wait := s.buckets.Take(key, b)
	return ok, wait, nil
}

// shape returns the bucket shape of a TokenBucket call, validated by
// driver.ValidateTokenBucket. Shapes are remembered in a small direct-mapped
// cache, since a service uses few of them and building one costs as much as
// the rest of the decision; a shape that misses allocates its entry once.
func (s *Store) shape(key string, capacity, rate, cost float64) (driver.Shape, error) {
	h := (math.Float64bits(capacity)*0x9e3779b97f4a7c15 ^ math.Float64bits(rate)) * 0xbf58476d1ce4e5b9
	h = (h ^ math.Float64bits(cost)) * 0x94d049bb133111eb
	slot := &s.shapes[h>>(64-shapeBits)]
	if e := slot.Load(); e != nil && e.capacity == capacity && e.rate == rate && e.cost == cost { // NaN never matches
		return e.b, driver.ValidateKey(key)
	}
	b, err := driver.ValidateTokenBucket(key, capacity, rate, cost)
	if err == nil {
		slot.Store(&shapeEntry{capacity: capacity, rate: rate, cost: cost, b: b})
	}
	return b, err
}

// AcquireSlot implements pace.Store. An admission sets the counter's expiry
// to now + ttl; a rejection changes nothing and reports the counter.
func (s *Store) AcquireSlot(ctx context.Context, key string, limit int64, ttl time.Duration) (bool, int64, error) {
	if err := s.begin(ctx, "AcquireSlot"); err != nil {
		return false, 0, err
	}
	if err := driver.ValidateSlot(key, limit, ttl); err != nil {
		return false, 0, err
	}
	sh, now, err := s.lock(key, "AcquireSlot")
	if err != nil {
		return false, 0, err
	}
	defer sh.mu.Unlock()
	r := sh.slots.m[key]
	if r != nil && slotGone(r, now) {
		r.count = 0
	}
	count := int64(0)
	if r != nil {
		count = r.count
	}
	if count >= limit {
		return false, count, nil
	}
	if r == nil {
		widen(&s.slotHorizon, ttl)
		r = insert(&sh.slots, key, now, &s.slotHorizon, slotLeft)
	}
	r.count++
	r.expires = now.Add(ttl)
	return true, r.count, nil
}

// ReleaseSlot implements pace.Store. Releasing an absent or expired counter
// does nothing.
func (s *Store) ReleaseSlot(ctx context.Context, key string) error {
	if err := s.begin(ctx, "ReleaseSlot"); err != nil {
		return err
	}
	if err := driver.ValidateKey(key); err != nil {
		return err
	}
	sh, now, err := s.lock(key, "ReleaseSlot")
	if err != nil {
		return err
	}
	defer sh.mu.Unlock()
	if r := sh.slots.m[key]; r != nil && !slotGone(r, now) {
		r.count-- // at least 1: slotGone reports a zero count
	}
	return nil
}

// RefreshSlot implements pace.Store. It sets a live counter's expiry to
// now + ttl, and does nothing to an absent or expired one.
func (s *Store) RefreshSlot(ctx context.Context, key string, ttl time.Duration) error {
	if err := s.begin(ctx, "RefreshSlot"); err != nil {
		return err
	}
	if err := driver.ValidateRefresh(key, ttl); err != nil {
		return err
	}
	sh, now, err := s.lock(key, "RefreshSlot")
	if err != nil {
		return err
	}
	defer sh.mu.Unlock()
	if r := sh.slots.m[key]; r != nil && !slotGone(r, now) {
		widen(&s.slotHorizon, ttl)
		r.expires = now.Add(ttl)
	}
	return nil
}

// AcquireSlotBurst implements pace.Store with pace.AdmitBurst.
func (s *Store) AcquireSlotBurst(ctx context.Context, key string, sustained, ceiling int64, burstBudget, ttl time.Duration) (bool, int64, error) {
	if err := s.begin(ctx, "AcquireSlotBurst"); err != nil {
		return false, 0, err
	}
	if err := driver.ValidateSlotBurst(key, sustained, ceiling, burstBudget, ttl); err != nil {
		return false, 0, err
	}
	sh, now, err := s.lock(key, "AcquireSlotBurst")
	if err != nil {
		return false, 0, err
	}
	defer sh.mu.Unlock()
	widen(&s.burstHorizon, ttl+2*pace.BurstRefillWindow)
	if st := sh.bursts.m[key]; st != nil {
		if burstGone(st, now) {
			// Decide as for an absent slot whether or not the sweep has
			// run, so that the parameters of this call apply afresh.
			*st = pace.BurstSlotState{}
		}
		ok := pace.AdmitBurst(st, sustained, ceiling, burstBudget, ttl, now)
		return ok, st.Count, nil
	}
	var st pace.BurstSlotState
	if !pace.AdmitBurst(&st, sustained, ceiling, burstBudget, ttl, now) {
		return false, st.Count, nil // unreachable with valid arguments: sustained ≥ 1
	}
	*insert(&sh.bursts, key, now, &s.burstHorizon, burstLeft) = st
	return true, st.Count, nil
}

// ReleaseSlotBurst implements pace.Store with pace.ReleaseBurst. Releasing
// an absent slot does nothing.
func (s *Store) ReleaseSlotBurst(ctx context.Context, key string) error {
	if err := s.begin(ctx, "ReleaseSlotBurst"); err != nil {
		return err
	}
	if err := driver.ValidateKey(key); err != nil {
		return err
	}
	sh, now, err := s.lock(key, "ReleaseSlotBurst")
	if err != nil {
		return err
	}
	defer sh.mu.Unlock()
	if st := sh.bursts.m[key]; st != nil {
		pace.ReleaseBurst(st, now)
	}
	return nil
}

// RefreshSlotBurst implements pace.Store with pace.RefreshBurst: an absent
// or expired slot is left as it is.
func (s *Store) RefreshSlotBurst(ctx context.Context, key string, ttl time.Duration) error {
	if err := s.begin(ctx, "RefreshSlotBurst"); err != nil {
		return err
	}
	if err := driver.ValidateRefresh(key, ttl); err != nil {
		return err
	}
	sh, now, err := s.lock(key, "RefreshSlotBurst")
	if err != nil {
		return err
	}
	defer sh.mu.Unlock()
	if st := sh.bursts.m[key]; st != nil {
		widen(&s.burstHorizon, ttl+2*pace.BurstRefillWindow)
		pace.RefreshBurst(st, ttl, now)
	}
	return nil
}

// Get implements pace.Store. The result is a new slice, never nil on
// success, that the caller may keep and modify.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	if err := s.begin(ctx, "Get"); err != nil {
		return nil, err
	}
	if err := driver.ValidateKey(key); err != nil {
		return nil, err
	}
	sh, now, err := s.lock(key, "Get")
	if err != nil {
		return nil, err
	}
	defer sh.mu.Unlock()
	r := sh.values.m[key]
	if r == nil || valueGone(r, now) {
		return nil, fmt.Errorf("memory: Get: %w", pace.ErrNotFound)
	}
	return append(make([]byte, 0, len(r.value)), r.value...), nil
}

// Set implements pace.Store. It stores a copy of value, so the caller may
// reuse its slice.
func (s *Store) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	if err := s.begin(ctx, "Set"); err != nil {
		return err
	}
	if err := driver.ValidateSet(key, ttl); err != nil {
		return err
	}
	v := append([]byte(nil), value...) // copied before the lock is taken
	sh, now, err := s.lock(key, "Set")
	if err != nil {
		return err
	}
	defer sh.mu.Unlock()
	var expires time.Time
	if ttl > 0 {
		widen(&s.valueHorizon, ttl)
		expires = now.Add(ttl)
	}
	r := sh.values.m[key]
	if r == nil {
		r = insert(&sh.values, key, now, &s.valueHorizon, valueLeft)
	}
	*r = valueRow{value: v, expires: expires}
	return nil
}

// Delete implements pace.Store.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := s.begin(ctx, "Delete"); err != nil {
		return err
	}
	if err := driver.ValidateKey(key); err != nil {
		return err
	}
	sh, _, err := s.lock(key, "Delete")
	if err != nil {
		return err
	}
	delete(sh.slots.m, key)
	delete(sh.bursts.m, key)
	delete(sh.values.m, key)
	delete(sh.takes.m, key)
	s.buckets.Forget(key) // under the shard lock, so Delete is atomic per key against this shard's namespaces
	sh.mu.Unlock()
	return nil
}

// Close implements pace.Store. There is no goroutine to stop: it drops the
// slots, burst slots, values and Take rows at once (the token buckets go with the
// Store when it is unreachable) and is idempotent; every other method
// returns an error wrapping pace.ErrClosed after it. Close never blocks, so
// it does not consult ctx: a Close with an expired context still closes.
func (s *Store) Close(ctx context.Context) error {
	if s.closed.Swap(true) {
		return nil
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.slots, sh.bursts, sh.values = table[slotRow]{}, table[pace.BurstSlotState]{}, table[valueRow]{}
		sh.takes = table[takeRow]{}
		sh.mu.Unlock()
	}
	return nil
}

// Len reports the number of rows the store holds across its five
// namespaces, including rows that are reclaimable but not yet swept. It is
// meant for tests and metrics, and locks each shard in turn. It first runs
// the passes that are due, so a store left without traffic after a flood
// gives its rows back when Len is called (by a metrics scrape, say).
func (s *Store) Len() int {
	n := s.buckets.Len()
	now := s.clock()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		s.sweepDue(sh, latest(now, sh.last))
		n += len(sh.slots.m) + len(sh.bursts.m) + len(sh.values.m) + len(sh.takes.m)
		sh.mu.Unlock()
	}
	return n
}

// slotLeft returns how long a plain counter stays distinguishable from an
// absent one after now: at most 0 once it is not.
func slotLeft(r *slotRow, now time.Time) time.Duration {
	if r.count <= 0 {
		return 0
	}
	return r.expires.Sub(now)
}

// slotGone reports whether a plain counter is indistinguishable from an
// absent one at now.
func slotGone(r *slotRow, now time.Time) bool { return slotLeft(r, now) <= 0 }

// burstLeft returns how long a burst slot stays distinguishable from an
// absent one after now.
func burstLeft(st *pace.BurstSlotState, now time.Time) time.Duration { return st.ReclaimAt().Sub(now) }

// burstGone reports whether a burst slot is indistinguishable from an absent
// one at now.
func burstGone(st *pace.BurstSlotState, now time.Time) bool { return burstLeft(st, now) <= 0 }

// valueLeft returns how long a value lives after now (the largest Duration
// if it never expires).
func valueLeft(r *valueRow, now time.Time) time.Duration {
	if r.expires.IsZero() {
		return math.MaxInt64
	}
	return r.expires.Sub(now)
}

// valueGone reports whether a value has expired at now.
func valueGone(r *valueRow, now time.Time) bool { return valueLeft(r, now) <= 0 }

// widen records d as the sweep horizon of a namespace if it is the longest
// seen. It saturates rather than overflows.
func widen(h *atomic.Int64, d time.Duration) {
	if d < 0 { // ttl + BurstRefillWindow overflowed
		d = 1<<63 - 1
	}
	for {
		cur := h.Load()
		if int64(d) <= cur || h.CompareAndSwap(cur, int64(d)) {
			return
		}
	}
}

// insert adds a zero row for key, a clone of it, sweeping the namespace
// first if it has doubled since its last pass. The caller holds the shard
// lock and has checked that key is absent.
func insert[R any](t *table[R], key string, now time.Time, horizon *atomic.Int64, left func(*R, time.Time) time.Duration) *R {
	if len(t.m) >= 2*max(t.swept, minRows) {
		sweep(t, now, horizon, left)
	}
	if t.m == nil {
		t.m = make(map[string]*R)
	}
	r := new(R)
	t.m[strings.Clone(key)] = r
	t.high = max(t.high, len(t.m))
	return r
}

// Bounds of the time between two passes over a namespace of a shard. A pass
// reads every row of the map (about 50 ns a row in a large map, a cache miss
// each), so the passes follow the rows: the next one comes when at least
// half the rows left will be reclaimable, so that it pays for itself, but
// no sooner than minSweepPeriod (or the namespace's horizon, the longest
// lifetime it has given a row, if shorter: its rows all go by then) and no
// later than maxSweepPeriod. A row is thus reclaimed within maxSweepPeriod
// of its reclaim time at a shard that sees calls, whatever lifetimes the
// other rows have; the horizon alone, the longest lifetime ever given, kept
// a flood of one-second rows for as long as one row given an hour. A map of
// rows that all live long costs a pass per maxSweepPeriod: about 5 ms of one
// core every 10 s per million rows.
const (
	minSweepPeriod = time.Second
	maxSweepPeriod = 10 * time.Second
)

// sweep deletes the rows of t that are gone at now, copies the map into a
// smaller one when it has shrunk to a quarter of its high-water mark, so
// that the heap comes back after a flood, and schedules the next pass (see
// minSweepPeriod). The caller holds the shard lock.
func sweep[R any](t *table[R], now time.Time, horizon *atomic.Int64, left func(*R, time.Time) time.Duration) {
	var byLog [64]int // rows left, by bits.Len64 of the time they have left
	for k, r := range t.m {
		d := left(r, now)
		if d <= 0 {
			delete(t.m, k)
			continue
		}
		byLog[bits.Len64(uint64(d))-1]++
	}
	n := len(t.m)
	next, seen := maxSweepPeriod, 0
	for i, c := range byLog {
		if seen += c; 2*seen >= n && i < 62 {
			next = min(time.Duration(1)<<(i+1), maxSweepPeriod) // every row counted so far has less left than this
			break
		}
	}
	t.nextSweep = now.Add(max(next, min(time.Duration(max(horizon.Load(), 1)), minSweepPeriod)))
	switch {
	case n == 0:
		t.m, t.high = nil, 0
	case t.high >= 4*minRows && 4*n < t.high:
		m := make(map[string]*R, n)
		for k, r := range t.m {
			m[k] = r
		}
		t.m, t.high = m, n
	}
	t.swept = len(t.m)
}
