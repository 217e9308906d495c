package memory

import (
	"context"
	"github.com/ratepace/pace/driver"
	"github.com/ratepace/pace/internal/storekit"
	"slices"
	"time"
)

// takeRow is a key of the Take namespace: an arrival time per shape, by
// position, in nanoseconds since the Unix epoch, and what a refund needs to
// judge a receipt. A row whose arrival times are all not after now is full,
// which is the same as absent: a take finding it so starts a new row.
type takeRow struct {
	tats [driver.MaxShapes]time.Duration
	// gen is the key's reorder count (driver.Receipt.Gen). It is drawn from
	// its shard's sequence, at creation and at every refund that reorders,
	// so it never repeats for a key, even across deletion.
	gen uint64
	// born is gen at creation: a receipt with a Gen below it was taken
	// before the key was last absent, and gives nothing back.
	born uint64
	// memo is the receipt (At, Gen and first Reserved) of the latest
	// refund that reordered, so that a second refund through a copy of it
	// gives nothing, as in the table behind pace.Pace. Gen tells apart two takes at one
	// instant that a refund between them gave the same Reserved.
	memo struct {
		at, reserved time.Duration
		gen          uint64
	}
}

// full reports whether every arrival time of r is not after now.
func (r *takeRow) full(now time.Duration) bool {
	for _, t := range r.tats {
		if t > now {
			return false
		}
	}
	return true
}

// takeLeft returns how long a Take row stays distinguishable from an absent
// one after now: until its latest arrival time (at most 0 once full).
func takeLeft(r *takeRow, now time.Time) time.Duration {
	return slices.Max(r.tats[:]) - unixNanos(now)
}

// maxUnixNanos bounds the clock readings of the Take namespace, far from
// overflowing an arrival time (now plus at most a shape's tolerance).
const maxUnixNanos = 1 << 62

var unixEpoch = time.Unix(0, 0)

// unixNanos returns now as the Take namespace keeps time: nanoseconds since
// the Unix epoch, as the Redis and PostgreSQL stores do, clamped to
// [1ns, 2^62ns] so that an injected clock far outside (before 1970, or past
// 2116) cannot overflow the arithmetic or make an absent row look indebted.
func unixNanos(now time.Time) time.Duration {
	return min(max(now.Sub(unixEpoch), 1), maxUnixNanos)
}

// Take implements pace.Store with driver.TakeAll and driver.RemainingAll, under
// the lock of the key's shard, at one reading of the store's clock. Receipt
// times are nanoseconds since the Unix epoch. A take that leaves every shape
// full (shapes of cost zero) keeps no row.
func (s *Store) Take(ctx context.Context, key string, shapes []driver.Shape) (driver.Grant, error) {
	if err := s.begin(ctx, "Take"); err != nil {
		return driver.Grant{}, err
	}
	if err := driver.ValidateTake(key, shapes); err != nil {
		return driver.Grant{}, err
	}
	s.widenTake(shapes)
	sh, now, err := s.lock(key, "Take")
	if err != nil {
		return driver.Grant{}, err
	}
	g := s.take(sh, key, shapes, now)
	sh.mu.Unlock()
	return g, nil
}

// TakeMany implements pace.Store: Take on each key in turn, each under its
// shard's lock, so a key that appears twice is taken twice, in order. Every
// argument is checked before any key is taken, so an invalid call changes
// nothing.
func (s *Store) TakeMany(ctx context.Context, keys []string, shapes []driver.Shape, out []driver.Grant) error {
	if err := s.begin(ctx, "TakeMany"); err != nil {
		return err
	}
	if err := driver.ValidateTakeMany(keys, shapes, out); err != nil {
		return err
	}
	s.widenTake(shapes)
	for i, key := range keys {
		sh, now, err := s.lock(key, "TakeMany")
		if err != nil {
			return err
		}
		out[i] = s.take(sh, key, shapes, now)
		sh.mu.Unlock()
	}
	return nil
}

// widenTake records the longest tolerance of shapes as the sweep horizon of
// the Take namespace, if it is the longest seen.
func (s *Store) widenTake(shapes []driver.Shape) {
	longest := time.Duration(0)
	for _, b := range shapes {
		longest = max(longest, b.Tolerance())
	}
	widen(&s.takeHorizon, longest)
}

// take decides one take of shapes at key at now. The caller has validated
// the arguments and holds the shard lock.
func (s *Store) take(sh *shard, key string, shapes []driver.Shape, now time.Time) driver.Grant {
	t := unixNanos(now)
	n := len(shapes)
	r := sh.takes.m[key]
	live := r != nil && !r.full(t)
	var tats, next [driver.MaxShapes]time.Duration
	if live {
		tats = r.tats
	}
	wait, ok := driver.TakeAll(shapes, tats[:n], next[:n], t)
	remaining, reset := driver.RemainingAll(shapes, next[:n], t)
	if !ok {
		return driver.Grant{RetryAfter: wait, Remaining: remaining, Reset: reset}
	}
	g := driver.Grant{OK: true, Remaining: remaining, Reset: reset, Receipt: driver.Receipt{At: t, Reserved: next}}
	switch {
	case live:
		copy(r.tats[:n], next[:n]) // positions past n keep what other calls left there
		g.Receipt.Gen = r.gen
	case reset > 0: // a new row; none when every shape is still full
		if r == nil {
			r = insert(&sh.takes, key, now, &s.takeHorizon, takeLeft)
		}
		sh.takeSeq++
		*r = takeRow{tats: next, gen: sh.takeSeq, born: sh.takeSeq}
		g.Receipt.Gen = r.gen
	}
	return g
}

// Refund implements pace.Store with driver.RefundAll, under the lock of the
// key's shard. The receipt is intact while the key's reorder count still
// equals r.Gen. It does nothing for the zero Receipt, for a key that is
// absent or full, for a receipt taken before the key was last absent (or
// deleted), and for a second refund of the receipt the key's latest
// reordering refund gave back. A refund that leaves the key full deletes
// its row.
func (s *Store) Refund(ctx context.Context, key string, shapes []driver.Shape, rc driver.Receipt) error {
	if err := s.begin(ctx, "Refund"); err != nil {
		return err
	}
	if err := driver.ValidateTake(key, shapes); err != nil {
		return err
	}
	if rc == (driver.Receipt{}) {
		return nil
	}
	sh, now, err := s.lock(key, "Refund")
	if err != nil {
		return err
	}
	defer sh.mu.Unlock()
	t := unixNanos(now)
	r := sh.takes.m[key]
	switch {
	case r == nil || rc.Gen < r.born:
		return nil
	case r.full(t):
		delete(sh.takes.m, key)
		return nil
	}
	intact := r.gen == rc.Gen
	if !intact && r.memo.at == rc.At && r.memo.reserved == rc.Reserved[0] && r.memo.gen == rc.Gen {
		return nil // given back already, through a copy
	}
	n := len(shapes)
	var next [driver.MaxShapes]time.Duration
	_, reorder := driver.RefundAll(shapes, r.tats[:n], next[:n], rc, t, storekit.Shifted(intact))
	reordered := reorder > 0
	copy(r.tats[:n], next[:n])
	if reordered {
		sh.takeSeq++
		r.gen = sh.takeSeq
		r.memo.at, r.memo.reserved, r.memo.gen = rc.At, rc.Reserved[0], rc.Gen
	}
	if r.full(t) {
		delete(sh.takes.m, key)
	}
	return nil
}
