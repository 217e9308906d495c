// Package table is the sharded, lock-free table of token buckets behind
// pace.Pace, pace.Shared's local tier and memory.Store's TokenBucket: one
// int64 arrival time per key, forgotten once full (sweep.go).
package table

import (
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratepace/pace/driver"
	"github.com/ratepace/pace/internal/gcra"
)

// buckets is a table of token buckets, one per key, each kept as a single
// int64 (the theoretical arrival time of driver.Shape), whose shape is given on
// every call. A Pace is a buckets with one fixed shape; memory.Store keeps its
// token buckets in one.
//
// Full buckets are forgotten (see sweep.go), so memory is bounded by the
// keys that took within the last sweep period (at most a second), not by the
// keys ever named. Keys are stored as 64-bit hashes under a random seed per
// table, never as strings: two keys share a bucket only if their hashes
// collide, with odds of about n²/2⁶⁵ for n live keys (docs/pace.md).
//
// buckets must be created with newBuckets. It is safe for concurrent use by
// multiple goroutines.
type Table struct {
	shards  [numShards]shard
	seed    maphash.Seed
	Epoch   time.Time        // the first clock reading; readings are relative to it
	Clock   func() time.Time // nil: time.Since(Epoch), the cheapest monotonic reading
	horizon atomic.Int64     // the longest Tolerance used so far, in nanoseconds (see period)
	cursor  atomic.Uint32    // the next shard sweepIdle looks at
	// zero is every shard's first Gen; unknown is the Gen of a take that
	// overlapped an out-of-order refund's swap, and a shard's while one
	// swaps (see shard.gen).
	zero, unknown Gen
}

// A Gen is one value of a shard's out-of-order total (see shard.gen), with
// the owner of the table. A take reports the Gen it was decided under, and
// a refund of it compares that Gen with the shard's current one: so a
// pace.Reservation carries its Pace and its place among the refunds in one
// word. A Gen never changes once published; a new total is a new Gen.
type Gen struct {
	// Owner is what the table's owner gave Init (a *pace.Pace), for the
	// reservations it makes.
	Owner any
	// shifted is the total, in nanoseconds, that refunds of takes that were
	// not their bucket's latest had given back in the shard before this Gen
	// was published (see driver.Shape.Refund). It may wrap.
	shifted uint64
}

const (
	shardBits = 6
	numShards = 1 << shardBits
	minSlots  = 8

	// Slot values below any arrival time: a row being moved to a new table,
	// and a row deleted (its key stays to keep probe chains intact).
	moved   = math.MinInt64
	deleted = math.MinInt64 + 1
)

// shard is one lock domain of a buckets. Lookups and decisions on existing
// keys read tab and nextSweep and write only the key's own slot; mu is taken
// only to change the structure (insert, revive, sweep, rebuild).
type shard struct {
	tab       atomic.Pointer[slotTable]
	nextSweep atomic.Int64 // clock reading at which a horizon pass is due
	// gen holds the total that refunds of takes that were not their bucket's
	// latest have given back (see Gen), or the table's unknown Gen while
	// such a refund swaps its slot: a take's refill can have moved earlier
	// by at most the growth of this total since the take. Written under mu.
	gen atomic.Pointer[Gen]
	_   [40]byte // keep the read-mostly words apart from the written ones

	mu    sync.Mutex
	live  atomic.Int64 // rows not (known to be) full; written under mu, read without it by Len
	used  int          // slots with a key, live or deleted; guarded by mu
	swept int64        // keys that took within the horizon before the last sweep; guarded by mu
	// last is the take given back by the latest reordering refund, so that a
	// second refund of it (through a copy of its Reservation) gives nothing.
	// Guarded by mu.
	last takeID
}

// slotTable is an open-addressing table with linear probing. A slot's key is
// written once, after its value, and never changes for the life of the
// table; a table is replaced whole when it is rebuilt.
//
// Keys and values live in two arrays: the keys, which lookups probe, are
// never written once published, so they stay in every core's cache, and a
// decision writes only a value's line. Slots side by side would put the
// probed keys on the lines that decisions on neighbouring keys keep writing.
type slotTable struct {
	keys []atomic.Uint64 // 0: empty
	tats []atomic.Int64  // arrival time, or moved, or deleted
	mask uint64
}

// slot is a row's value: its arrival time, or moved, or deleted.
type slot = atomic.Int64

// New returns an empty table that reads time from now instead of the
// monotonic clock when now is not nil, as WithClock does for a Pace.
func New(now func() time.Time) *Table {
	t := new(Table)
	t.Init(now, nil)
	return t
}

// Init readies t to read time from clock (nil: the default), with owner as
// the Owner of its Gens.
func (t *Table) Init(clock func() time.Time, owner any) {
	t.zero, t.unknown = Gen{Owner: owner}, Gen{Owner: owner}
	for i := range t.shards {
		t.shards[i].gen.Store(&t.zero)
	}
	t.seed = maphash.MakeSeed()
	t.Clock = clock
	if t.Clock != nil {
		t.Epoch = t.Clock()
	} else {
		t.Epoch = time.Now()
	}
}

// now reads the table's clock once, in nanoseconds since its epoch.
func (t *Table) Now() int64 {
	if t.Clock == nil {
		return int64(time.Since(t.Epoch)) // monotonic, from the start of the process: far from the bounds
	}
	return t.Clamped()
}

// maxNow bounds a reading of an injected clock: arrival times (now plus at
// most driver.MaxTolerance) and their distance to any other reading (at most
// 2 × maxNow + driver.MaxTolerance < 2⁶³) stay far from overflowing, and from the
// slot values moved and deleted, whatever the clock says.
const maxNow = 1 << 61

func (t *Table) Clamped() int64 {
	return min(max(int64(t.Clock().Sub(t.Epoch)), -maxNow), maxNow)
}

func (t *Table) Hash(key string) uint64 {
	h := maphash.Comparable(t.seed, key)
	if h == 0 {
		h = 1
	}
	return h
}

func (t *Table) shardOf(h uint64) *shard { return &t.shards[h>>(64-shardBits)] }

// Take takes one shape-sized take from the bucket at key, now. It reports
// whether the take fits (and was debited) and, if not, how long until it
// would. A refused take changes nothing.
func (t *Table) Take(key string, b driver.Shape) (ok bool, wait time.Duration) {
	t.Widen(b)
	_, w, _, ok := t.TakeAt(t.Hash(key), b, t.Now())
	return ok, time.Duration(w)
}

// Forget drops the bucket at key, as if it were full. It is atomic: a take
// racing with it decides either before (and is forgotten with the rest) or
// after (on a full bucket).
func (t *Table) Forget(key string) {
	h := t.Hash(key)
	sh := t.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if s := sh.find(h); s != nil {
		// Takes change a live slot without the lock: retry until the swap
		// wins. Each failed swap is a take that succeeded, so this ends.
		// Under mu the slot is never moved, and only mu holders write a
		// deleted one.
		for v := s.Load(); v > deleted && !sh.drop(s, v); v = s.Load() {
		}
	}
}

// drop deletes the row in s if it still holds v, and reports whether it did.
// Every change of the live count happens under sh.mu, so a rebuild counts
// exactly; decisions racing on the slot itself are settled by the swap.
// The caller holds sh.mu.
func (sh *shard) drop(s *slot, v int64) bool {
	if v <= deleted || !s.CompareAndSwap(v, deleted) {
		return false
	}
	sh.live.Add(-1)
	return true
}

// Len reports the number of rows: buckets that were not full when last
// looked at. It first sweeps the shards whose period has passed (see
// sweep.go), so a table left without traffic after a flood gives its rows
// back when Len is called. Full rows are dropped as they are found (by
// Return, or by the sweep), so Len may count a few that have refilled since.
func (t *Table) Len() int {
	t.sweepDue(t.Now())
	n := int64(0)
	for i := range t.shards {
		n += t.shards[i].live.Load()
	}
	return int(n)
}

// widen records b's tolerance as the sweep horizon if it is the longest seen.
func (t *Table) Widen(b driver.Shape) {
	for {
		h := t.horizon.Load()
		if int64(b.Tolerance()) <= h || t.horizon.CompareAndSwap(h, int64(b.Tolerance())) {
			return
		}
	}
}

// TakeAt decides one take of shape b for the key hashed to h at now. When
// ok, tat is the new arrival time and gen the Gen the take was decided under
// (for RefundAt); when not, wait is the time until the take would fit, and
// nothing was written. The zero driver.Shape refuses, even a full bucket.
func (t *Table) TakeAt(h uint64, b driver.Shape, now int64) (tat, wait int64, gen *Gen, ok bool) {
	if b.Tolerance() == 0 {
		return 0, int64(driver.MaxTolerance), nil, false
	}
	cost, tol := int64(b.Interval()), int64(b.Tolerance())
	d := int64(0)
	if cost > 0 { // decide's answer of 0 is "not decided", a free take's "admitted"
		d, gen = t.Decide(h, cost, tol, now)
	}
	if d == 0 {
		d, gen = t.DecideSlow(h, cost, tol, now)
	}
	if d < 0 {
		return 0, -d, gen, false
	}
	return now + d, 0, gen, true
}

// Decide takes, at now, cost nanoseconds of refill time from the bucket of
// tolerance tol (0 < cost <= tol <= driver.MaxTolerance) of the key hashed to h.
// Admitted, d is the new arrival time less now (at least cost) and gen the
// Gen the take was decided under (for RefundAt); refused, d is minus the
// wait until the take would fit, and nothing was written.
//
// decide is the common case: a key with a live row, in a shard whose sweep
// is not due, decided with only the loads the decision needs. For any other
// case it returns d = 0, having written nothing, and the caller goes on
// with decideSlow. It calls nothing, so that it needs no stack frame.
func (t *Table) Decide(h uint64, cost, tol, now int64) (d int64, gen *Gen) {
	sh := &t.shards[h>>(64-shardBits)]
	// Read before the slot and again after the swap: a take that overlapped
	// an out-of-order refund's swap (the Gen unknown, or replaced) records
	// the unknown Gen, for which how far it moved is unknown, since it may
	// have been decided on the refunded state yet counted before it.
	gen = sh.gen.Load()
	tab := sh.tab.Load()
	if tab == nil || now >= sh.nextSweep.Load() {
		return 0, nil
	}
	keys, mask := tab.keys, tab.mask
	i := h & mask
	for k := keys[i].Load(); k != h; k = keys[i].Load() {
		if k == 0 {
			return 0, nil
		}
		i = (i + 1) & mask
	}
	s := &tab.tats[i]
	v := s.Load()
	if v <= deleted {
		return 0, nil // deleted or moved
	}
	base := max(v, now)
	if d = base - now + cost; d > tol {
		return tol - d, gen // refused: nothing written
	}
	if !s.CompareAndSwap(v, base+cost) {
		return 0, nil // another decision moved the slot
	}
	return d, t.settled(sh, gen)
}

// decideSlow is decide for every case: a sweep due, a key absent or
// deleted (inserted under the lock), a row being moved, a swap lost to
// another decision. Unlike decide, it also takes a free take (cost 0),
// whose admission it reports as d = 0.
func (t *Table) DecideSlow(h uint64, cost, tol, now int64) (d int64, gen *Gen) {
	sh := t.shardOf(h)
	if now >= sh.nextSweep.Load() {
		t.trySweep(sh, now)
	}
	for {
		gen = sh.gen.Load() // see Decide
		if s := sh.find(h); s != nil {
			v := s.Load()
			if v > deleted {
				next, w, ok := gcra.Fit(v, now, cost, tol)
				if !ok {
					return -w, gen
				}
				if s.CompareAndSwap(v, next) {
					return next - now, t.settled(sh, gen)
				}
				continue
			}
			if v == moved {
				sh.waitRebuild()
				continue
			}
		}
		if tat, done := t.insert(sh, h, cost, now); done {
			return tat - now, t.settled(sh, gen)
		}
	}
}

// settled returns the Gen a take that read gen before its swap records: gen
// when no out-of-order refund overlapped the take, else the unknown Gen.
func (t *Table) settled(sh *shard, gen *Gen) *Gen {
	if sh.gen.Load() != gen {
		return &t.unknown
	}
	return gen
}

// peek decides one take of shape b for the key hashed to h at now, as take
// would, but writes nothing.
func (t *Table) PeekAt(h uint64, b driver.Shape, now int64) (tat, wait int64, ok bool) {
	sh := t.shardOf(h)
	for {
		v := now // absent or deleted: a full bucket
		if s := sh.find(h); s != nil {
			switch x := s.Load(); {
			case x == moved:
				sh.waitRebuild()
				continue
			case x > deleted:
				v = x
			}
		}
		next, w, ok := b.Take(time.Duration(v), time.Duration(now))
		return int64(next), int64(w), ok
	}
}

// RefundAt gives back, at now, give nanoseconds of refill time of a take of
// cost nanoseconds decided at taken under gen that moved the bucket hashed
// to h to reserved (see driver.Shape.Refund), and drops the row if that
// leaves the bucket full. It reports whether anything was given back.
//
// Refunds run under the shard lock, so each one sees the total left by every
// refund before it; takes stay lock-free and race only on the slot.
func (t *Table) RefundAt(h uint64, cost, give, taken, reserved int64, gen *Gen, now int64) bool {
	sh := t.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	s := sh.find(h) // no rebuild can run while mu is held: never moved
	if s == nil {
		return false
	}
	cur := sh.gen.Load() // never unknown under mu: only mu holders publish that, and only during their swap
	known := gen != &t.unknown
	shifted := int64(-1) // unknown: the take overlapped a refund's swap
	if d := cur.shifted - gen.shifted; known && d <= math.MaxInt64 {
		shifted = int64(d)
	}
	if shifted != 0 && known && sh.last == (takeID{h, taken, reserved, gen}) {
		return false // given back already, through a copy
	}
	for {
		v := s.Load()
		if v == deleted {
			return false
		}
		next, full, reorder := gcra.Refund(v, taken, reserved, now, shifted, cost, give)
		if next == v && !full {
			return false // nothing to give back: reorder is 0 too
		}
		if reorder > 0 {
			sh.gen.Store(&t.unknown) // takes overlapping the swap do not know their place
		}
		var done bool
		if full {
			done = sh.drop(s, v)
		} else {
			done = s.CompareAndSwap(v, next)
		}
		if reorder > 0 {
			if done {
				sh.gen.Store(&Gen{Owner: cur.Owner, shifted: cur.shifted + uint64(reorder)})
			} else {
				sh.gen.Store(cur) // nothing moved: a take under cur still knows its place
			}
		}
		if !done {
			continue // a take moved the slot: decide again
		}
		if reorder > 0 && known {
			sh.last = takeID{h, taken, reserved, gen}
		}
		return next != v
	}
}

// charge debits cost nanoseconds of refill time (0 <= cost <= driver.MaxTolerance)
// from the bucket of the key hashed to h at now, whether or not they fit:
// an overdraft, which puts the bucket into debt up to driver.MaxTolerance, so that
// later takes are refused until the pace has repaid it. A charge is a take
// that always fits, not a refund: it moves the out-of-order total of none.
func (t *Table) Charge(h uint64, cost, now int64) {
	for cost > 0 {
		d, _ := t.DecideSlow(h, cost, int64(driver.MaxTolerance), now)
		if d >= 0 {
			return
		}
		cost += d // over the most debt by -d: take what room is left, if any
	}
}

// takeID identifies an admitted take to the copy check of RefundAt. Takes
// of one key under one known Gen form a stack with distinct arrival times,
// so no other outstanding take has the same.
type takeID struct {
	key             uint64
	taken, reserved int64
	gen             *Gen
}

// find returns the slot holding h, or nil. The slot may hold a deleted or
// moved row; callers look at its value.
func (sh *shard) find(h uint64) *slot {
	tab := sh.tab.Load()
	if tab == nil {
		return nil
	}
	for i := h & tab.mask; ; i = (i + 1) & tab.mask {
		switch tab.keys[i].Load() {
		case h:
			return &tab.tats[i]
		case 0:
			return nil
		}
	}
}

// waitRebuild blocks until a rebuild in progress on sh has published its new
// table: the rebuild holds mu throughout.
func (sh *shard) waitRebuild() {
	sh.mu.Lock()
	sh.mu.Unlock() //lint:ignore SA2001 an empty critical section is the point: it waits for the rebuild
}

// insert takes a first take of cost from an absent (full) bucket hashed to h, under
// the shard lock. It reports done=false when the key turned out to be live
// already (another goroutine inserted it), so the caller decides on the lock-
// free path again.
func (t *Table) insert(sh *shard, h uint64, cost, now int64) (tat int64, done bool) {
	next := now + cost // a full bucket admits any valid take
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.live.Load() >= 2*max(sh.swept, minSlots) {
		t.sweep(sh, now)
	}
	tab := sh.tab.Load()
	free := -1
	if tab != nil {
		for i := h & tab.mask; ; i = (i + 1) & tab.mask {
			k := tab.keys[i].Load()
			if k == h {
				s := &tab.tats[i]
				if s.Load() != deleted {
					return 0, false
				}
				if cost > 0 {
					s.Store(next) // revive: only mu holders write a deleted slot
					sh.live.Add(1)
				}
				return next, true
			}
			if k == 0 {
				free = int(i)
				break
			}
		}
	}
	if cost == 0 {
		return next, true // a take of cost zero leaves the bucket full: no row
	}
	if tab == nil || 4*(sh.used+1) > 3*len(tab.keys) {
		tab = sh.rebuild(int(sh.live.Load()) + 1)
		free = tab.free(h)
	}
	tab.tats[free].Store(next)
	tab.keys[free].Store(h) // publish after the value
	sh.used++
	sh.live.Add(1)
	return next, true
}

// free returns the index of the empty slot where h would be inserted. The
// table must not hold h and must have an empty slot.
func (tab *slotTable) free(h uint64) int {
	for i := h & tab.mask; ; i = (i + 1) & tab.mask {
		if tab.keys[i].Load() == 0 {
			return int(i)
		}
	}
}

// rebuild replaces sh's table by one sized for n rows (nil when the shard
// holds none), moving every live row across, and returns it. Each old slot is
// marked moved first, so a decision racing with the move retries on the new
// table instead of writing to the old one. The caller holds sh.mu.
func (sh *shard) rebuild(n int) *slotTable {
	old := sh.tab.Load()
	var tab *slotTable
	if n > 0 {
		tab = newSlotTable(n)
	}
	copied := 0
	if old != nil {
		for i := range old.keys {
			k := old.keys[i].Load()
			if k == 0 {
				continue
			}
			v := old.tats[i].Swap(moved)
			if v <= deleted {
				continue
			}
			if tab == nil { // n undercounted the live rows; never drop one
				tab = newSlotTable(1)
			}
			d := tab.free(k)
			tab.tats[d].Store(v)
			tab.keys[d].Store(k)
			copied++
		}
	}
	sh.tab.Store(tab)
	sh.used = copied
	sh.live.Store(int64(copied))
	return tab
}

// newSlotTable returns an empty table for n rows: the smallest power of two,
// at least minSlots, that keeps the load at or below one half.
func newSlotTable(n int) *slotTable {
	size := minSlots
	for 2*n > size {
		size *= 2
	}
	return &slotTable{keys: make([]atomic.Uint64, size), tats: make([]atomic.Int64, size), mask: uint64(size - 1)}
}
