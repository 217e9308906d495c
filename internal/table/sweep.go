package table

import "time"

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
//   - one period has passed since its last pass (checked on every decision,
//     by one shared read, and by Len).
//
// The period is the longest Tolerance the table has seen (the time an empty
// bucket takes to refill, so that every row from before a pass is full at
// the next one), capped at maxSweepPeriod. Each row carries its own horizon,
// its arrival time, so the cap costs no precision: a row is reclaimed at the
// first pass after it is full, within one period of that at a shard that
// sees calls, whatever other shapes the table has seen. Without the cap one
// take of a shape that refills in hours kept every other row for hours. A
// pass reads one word per slot, so a pass per second over a million rows
// costs about a millisecond of one core per second.
//
// "Doubled" is measured against the keys that took within the last period,
// as counted by the last pass, not against the rows the pass left: keys well
// under their pace have full buckets most of the time, and a pass deletes
// them; measuring against what it left would have every such key deleted and
// inserted again at each of a run of small passes, instead of once per
// period. So a shard holds at most twice the keys that took within the last
// period, and every row full for a period is gone after the next pass.
// Go maps and slices do not shrink, so a pass that leaves the table far below
// its high-water mark (or mostly tombstones) rebuilds it at a size that fits,
// and an empty shard drops its table altogether: the heap really comes back
// after a flood.

// maxSweepPeriod caps the time between two passes over a shard, in
// nanoseconds (see above).
const maxSweepPeriod = int64(time.Second)

// period returns the time between two passes over a shard, in nanoseconds.
func (t *Table) period() int64 {
	return min(max(t.horizon.Load(), 1), maxSweepPeriod)
}

// trySweep runs a pass on sh if its period has passed, unless another
// goroutine holds its lock (that goroutine is inserting, and will sweep if
// the shard doubled; the next decision will try again). A pass that ran
// also passes over a few other shards whose period has passed (see
// sweepIdle).
func (t *Table) trySweep(sh *shard, now int64) {
	if t.sweepIfDue(sh, now) {
		t.sweepIdle(now)
	}
}

// sweepIfDue runs a pass on sh if its period has passed and no other
// goroutine holds its lock, and reports whether it ran.
func (t *Table) sweepIfDue(sh *shard, now int64) bool {
	if now < sh.nextSweep.Load() || !sh.mu.TryLock() {
		return false
	}
	due := now >= sh.nextSweep.Load()
	if due {
		t.sweep(sh, now)
	}
	sh.mu.Unlock()
	return due
}

// idleSpread is how many other shards a pass looks at.
const idleSpread = 8

// sweepIdle sweeps, in turn, up to idleSpread shards whose period has
// passed. Decisions sweep only the shard they touch, so without it the rows
// of a flood would stay in every shard that no later key happens to hash
// to; with it, any traffic at all cleans every shard within
// numShards/idleSpread periods, and no pass does more than a bounded share
// of the work.
func (t *Table) sweepIdle(now int64) {
	for range idleSpread {
		t.sweepIfDue(&t.shards[t.cursor.Add(1)%numShards], now)
	}
}

// sweepDue sweeps every shard whose period has passed, except those whose
// lock another goroutine holds. Len calls it, so that a table that sees no
// decisions at all after a flood still gives its rows back to whoever
// watches it (a metrics scrape, say).
func (t *Table) sweepDue(now int64) {
	for i := range t.shards {
		t.sweepIfDue(&t.shards[i], now)
	}
}

// sweep deletes the full rows of sh and rebuilds its table when it has
// shrunk far below its size. The caller holds sh.mu.
func (t *Table) sweep(sh *shard, now int64) {
	period := t.period()
	sh.nextSweep.Store(now + period)
	tab := sh.tab.Load()
	if tab == nil {
		sh.swept = 0
		return
	}
	recent := int64(0) // rows of keys that took within the last period
	for i := range tab.keys {
		if tab.keys[i].Load() == 0 {
			continue
		}
		s := &tab.tats[i]
		v := s.Load()
		if v > now-period {
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

// SweepDue runs the sweep of the shard of the key hashed to h if it is due
// at now, as a decision through TakeAt does: for callers that decide with
// PeekAt alone (Shared's local tier).
func (t *Table) SweepDue(h uint64, now int64) {
	if sh := t.shardOf(h); now >= sh.nextSweep.Load() {
		t.trySweep(sh, now)
	}
}
