package pace

import "sync/atomic"

// The sweep is how a table of buckets forgets the keys that stopped taking.
//
// A row whose arrival time is not after now is a full bucket, which decides
// exactly like an absent one, so the sweep deletes it. A pass over a shard
// runs under that shard's lock, on the calling goroutine (there is no
// background goroutine to stop), when either
//
//   - the shard's live rows have doubled since its last pass (checked on
//     insert, so a flood of new keys pays for its own cleanup, amortised O(1)
//     per insert), or
//   - one horizon has passed since its last pass (checked on every decision,
//     by one shared read), after which every row from before the pass is full:
//     the horizon is the time an empty bucket takes to refill.
//
// "Doubled" is measured against the keys that took within the last horizon,
// as counted by the last pass, not against the rows the pass left: keys well
// under their pace have full buckets most of the time, and a pass deletes
// them; measuring against what it left would have every such key deleted and
// inserted again at each of a run of small passes, instead of once per
// horizon. So a shard holds at most twice the keys that took within the last
// horizon, and every row of a key silent for a horizon is gone after the next
// pass.
// Go maps and slices do not shrink, so a pass that leaves the table far below
// its high-water mark (or mostly tombstones) rebuilds it at a size that fits,
// and an empty shard drops its table altogether: the heap really comes back
// after a flood.

// trySweep runs a horizon pass on sh unless another goroutine holds its lock
// (that goroutine is inserting, and will sweep if the shard doubled; the next
// decision will try again). A pass that ran also passes over a few other
// shards whose horizon has passed (see sweepIdle).
func (t *Buckets) trySweep(sh *shard, now int64) {
	if !sh.mu.TryLock() {
		return
	}
	due := now >= sh.nextSweep.Load()
	if due {
		t.sweep(sh, now)
	}
	sh.mu.Unlock()
	if due {
		t.sweepIdle(now)
	}
}

// idleSpread is how many other shards a horizon pass looks at.
const idleSpread = 8

// sweepIdle sweeps, in turn, up to idleSpread shards whose horizon has
// passed. Decisions sweep only the shard they touch, so without it the rows
// of a flood would stay in every shard that no later key happens to hash
// to; with it, any traffic at all cleans every shard within
// numShards/idleSpread horizons, and no pass does more than a bounded share
// of the work.
func (t *Buckets) sweepIdle(now int64) {
	for range idleSpread {
		sh := &t.shards[t.cursor.Add(1)%numShards]
		if now < sh.nextSweep.Load() || !sh.mu.TryLock() {
			continue
		}
		if now >= sh.nextSweep.Load() {
			t.sweep(sh, now)
		}
		sh.mu.Unlock()
	}
}

// sweep deletes the full rows of sh and rebuilds its table when it has
// shrunk far below its size. The caller holds sh.mu.
func (t *Buckets) sweep(sh *shard, now int64) {
	horizon := max(t.horizon.Load(), 1)
	sh.nextSweep.Store(now + horizon)
	tab := sh.tab.Load()
	if tab == nil {
		sh.swept = 0
		return
	}
	recent := int64(0) // rows of keys that took within the last horizon
	for i := range tab.keys {
		if tab.keys[i].Load() == 0 {
			continue
		}
		s := &tab.tats[i]
		v := s.Load()
		if v > now-horizon {
			recent++ // a take sets the arrival time after itself
		}
		// A failed drop means a decision moved the row just now: it is live.
		if v <= now {
			sh.drop(s, v)
		}
	}
	live := int(sh.live.Load())
	if live == 0 || 8*live < len(tab.keys) || 2*live < sh.used {
		sh.rebuild(live)
	}
	sh.swept = max(int64(live), recent)
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
