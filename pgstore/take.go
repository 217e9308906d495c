package pgstore

import (
	"context"
	"fmt"
	"github.com/ratepace/pace/driver"
	"github.com/ratepace/pace/internal/storekit"
	"math"
	"time"
)

// shapeArgs returns the intervals and tolerances of shapes, in nanoseconds,
// the bigint[] parameters of take_all, take_many and refund_all.
func shapeArgs(shapes []driver.Shape) (intervals, tolerances []int64) {
	intervals, tolerances = make([]int64, len(shapes)), make([]int64, len(shapes))
	for i, b := range shapes {
		intervals[i], tolerances[i] = int64(b.Interval()), int64(b.Tolerance())
	}
	return intervals, tolerances
}

// grant turns what take_all or take_many read into the grant of the take.
func grant(shapes []driver.Shape, taken bool, now, gen int64, tats []int64) (driver.Grant, error) {
	if len(tats) != len(shapes) {
		return driver.Grant{}, fmt.Errorf("pgstore: take returned %d arrival times for %d shapes", len(tats), len(shapes))
	}
	var at [driver.MaxShapes]time.Duration
	for i, t := range tats {
		at[i] = time.Duration(t)
	}
	return storekit.Grant(shapes, at[:len(shapes)], time.Duration(now), uint64(gen), taken)
}

// Take implements pace.Store.Take with driver.TakeAll, in one call of the
// take_all function at the database clock, which locks the key's row
// (arrival times in nanoseconds since the Unix epoch, one per shape) and
// decides to the nanosecond; Take derives the grant from what it read with
// driver.TakeAll and driver.RemainingAll. A refusal writes nothing; a take that
// leaves every shape full (cost zero) stores nothing.
func (s *Store) Take(ctx context.Context, key string, shapes []driver.Shape) (driver.Grant, error) {
	if s.closed.Load() {
		return driver.Grant{}, errClosed
	}
	if err := driver.ValidateTake(key, shapes); err != nil {
		return driver.Grant{}, err
	}
	intervals, tolerances := shapeArgs(shapes)
	var taken bool
	var now, gen int64
	var tats []int64
	err := s.pool.QueryRow(ctx, s.q.takeAll, s.rowKey(key), intervals, tolerances, int64(storekit.NewGen()), s.nowArg(), s.sweep).
		Scan(&taken, &now, &gen, &tats)
	if err != nil {
		return driver.Grant{}, fmt.Errorf("pgstore: Take: %w", err)
	}
	g, err := grant(shapes, taken, now, gen, tats)
	if err != nil {
		return driver.Grant{}, fmt.Errorf("pgstore: Take: %w", err)
	}
	return g, nil
}

// TakeMany implements pace.Store.TakeMany in one call of the take_many
// function over arrays: take_all on each key in turn, in one transaction,
// locking the keys in the order of their digests (so that concurrent calls
// never deadlock) and reading the clock after each lock. A key given twice
// is taken twice. A database error fails the whole call, and then no key
// was taken (the transaction rolls back).
func (s *Store) TakeMany(ctx context.Context, keys []string, shapes []driver.Shape, out []driver.Grant) error {
	if s.closed.Load() {
		return errClosed
	}
	if err := driver.ValidateTakeMany(keys, shapes, out); err != nil {
		return err
	}
	if len(keys) == 0 {
		return nil
	}
	digests := make([][]byte, len(keys))
	for i, k := range keys {
		digests[i] = s.rowKey(k)
	}
	intervals, tolerances := shapeArgs(shapes)
	rows, err := s.pool.Query(ctx, s.q.takeMany, digests, intervals, tolerances, int64(storekit.NewGen()), s.nowArg(), s.sweep)
	if err != nil {
		return fmt.Errorf("pgstore: TakeMany: %w", err)
	}
	defer rows.Close()
	seen := 0
	for rows.Next() {
		var ord int32
		var taken bool
		var now, gen int64
		var tats []int64
		if err := rows.Scan(&ord, &taken, &now, &gen, &tats); err != nil {
			return fmt.Errorf("pgstore: TakeMany: %w", err)
		}
		if ord < 1 || int(ord) > len(keys) {
			return fmt.Errorf("pgstore: TakeMany: take_many returned position %d for %d keys", ord, len(keys))
		}
		if out[ord-1], err = grant(shapes, taken, now, gen, tats); err != nil {
			return fmt.Errorf("pgstore: TakeMany: %w", err)
		}
		seen++
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("pgstore: TakeMany: %w", err)
	}
	if seen != len(keys) {
		return fmt.Errorf("pgstore: TakeMany: take_many returned %d rows for %d keys", seen, len(keys))
	}
	return nil
}

// Refund implements pace.Store.Refund with driver.RefundAll, in one call of the
// refund_all function at the database clock. The refund is exact while the
// key's reorder count still equals r.Gen; one that reorders raises the count
// and is remembered, so that refunding the same receipt again gives nothing.
// The zero Receipt, an absent or full key, and a receipt from before the
// key was last absent (full or deleted) are left alone; a refund that leaves
// every shape full deletes the row.
func (s *Store) Refund(ctx context.Context, key string, shapes []driver.Shape, r driver.Receipt) error {
	if s.closed.Load() {
		return errClosed
	}
	if err := driver.ValidateTake(key, shapes); err != nil {
		return err
	}
	if r == (driver.Receipt{}) || r.Gen > math.MaxInt64 {
		return nil // the zero Receipt, or none of this store's
	}
	intervals, _ := shapeArgs(shapes)
	reserved := make([]int64, len(shapes))
	for i := range reserved {
		reserved[i] = int64(r.Reserved[i])
	}
	if _, err := s.pool.Exec(ctx, s.q.refundAll, s.rowKey(key), intervals, int64(r.At), int64(r.Gen), reserved, s.nowArg()); err != nil {
		return fmt.Errorf("pgstore: Refund: %w", err)
	}
	return nil
}
