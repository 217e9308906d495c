// Package takemodel is the Go reference of what a pace.Store keeps for Take
// and Refund, against which the Redis and PostgreSQL stores' differential
// tests compare their scripts.
//
// It is driver.TakeAll, driver.RemainingAll and driver.RefundAll on one state per
// key, plus the rules a store adds around them:
//
//   - a key whose every arrival time is not after now is full, and full is
//     absent: a take on it starts afresh (and forgets the full state, even
//     when the take keeps nothing), a refund leaves it alone;
//   - a key created by a take starts its reorder count at a number (born)
//     that differs from every count the key had before (the store draws it;
//     the model is told it, and checks it is new), so that the receipts of
//     the key's present life are those with a Gen in [born, count]: a
//     refund of any other receipt (taken before the key was last absent)
//     gives nothing;
//   - a refund is intact while the key's count equals the receipt's Gen; one
//     that reorders raises the count by one and is remembered (its At,
//     first Reserved and Gen), and a refund of the remembered receipt that
//     is not intact gives nothing (pace.Buckets' rule, per key);
//   - a take with fewer shapes than the key holds keeps the others' arrival
//     times as they are.
package takemodel

import (
	"fmt"
	"github.com/ratepace/pace/driver"
	"github.com/ratepace/pace/internal/storekit"
	"slices"
	"time"
)

// State is what a store keeps for one key.
type State struct {
	// Gen is the reorder count; Born is what it was when the key was
	// created.
	Gen, Born uint64
	// MemoAt, MemoReserved and MemoGen identify the receipt of the latest
	// refund that reordered (zero: none).
	MemoAt, MemoReserved time.Duration
	MemoGen              uint64
	// TATs holds one arrival time per shape, since the Unix epoch.
	TATs []time.Duration
}

// Live reports whether some arrival time is after now.
func (st *State) Live(now time.Duration) bool {
	return st != nil && slices.ContainsFunc(st.TATs, func(t time.Duration) bool { return t > now })
}

// Last returns the latest arrival time: when the key is full again.
func (st *State) Last() time.Duration { return slices.Max(st.TATs) }

// same reports whether got is a stored state equal to want, field by field.
func same(got, want *State) bool {
	return got != nil && got.Gen == want.Gen && got.Born == want.Born && got.MemoAt == want.MemoAt &&
		got.MemoReserved == want.MemoReserved && got.MemoGen == want.MemoGen && slices.Equal(got.TATs, want.TATs)
}

// read returns the arrival times of the first n shapes; a shape the key
// holds none for is full (now).
func (st *State) read(n int, now time.Duration) []time.Duration {
	tats := make([]time.Duration, n)
	for i := range tats {
		tats[i] = now
		if i < len(st.TATs) {
			tats[i] = st.TATs[i]
		}
	}
	return tats
}

// write sets the arrival times of the first len(next) shapes, keeping the
// others.
func (st *State) write(next []time.Duration) {
	for i, t := range next {
		if i < len(st.TATs) {
			st.TATs[i] = t
		} else {
			st.TATs = append(st.TATs, t)
		}
	}
}

// Model is the reference store. The zero Model is empty and ready.
type Model struct {
	keys map[string]*State
	gens map[string]map[uint64]bool // every count each key has had
}

// Get returns the state of key at now, or nil when it is absent or full.
func (m *Model) Get(key string, now time.Duration) *State {
	st := m.keys[key]
	if !st.Live(now) {
		return nil
	}
	return st
}

// Take decides one take of every shape at key at now, and returns the
// grant a store must report. fresh is the count the store gave the key if
// this take created it (a store's Receipt.Gen then); Take returns an error
// when a created key's count is one the key had before.
func (m *Model) Take(key string, shapes []driver.Shape, now time.Duration, fresh uint64) (driver.Grant, error) {
	st := m.Get(key, now)
	created := st == nil
	if created {
		st = &State{Gen: fresh, Born: fresh}
	}
	n := len(shapes)
	tats := st.read(n, now)
	var next [driver.MaxShapes]time.Duration
	wait, ok := driver.TakeAll(shapes, tats, next[:n], now)
	remaining, reset := driver.RemainingAll(shapes, next[:n], now)
	g := driver.Grant{OK: ok, RetryAfter: wait, Remaining: remaining, Reset: reset}
	if !ok {
		return g, nil
	}
	g.Receipt = driver.Receipt{At: now, Gen: st.Gen, Reserved: next}
	st.write(next[:n])
	if !st.Live(now) {
		// Nothing to keep (a free take on a full key): the key is absent,
		// and so is the life it had before it was full, which a clock
		// stepped back must not revive.
		delete(m.keys, key)
		return g, nil
	}
	if created {
		if m.gens[key][fresh] {
			return g, fmt.Errorf("takemodel: a key created with count %d, which it had before", fresh)
		}
		m.remember(key, fresh)
	}
	if m.keys == nil {
		m.keys = map[string]*State{}
	}
	m.keys[key] = st
	return g, nil
}

func (m *Model) remember(key string, gen uint64) {
	if m.gens == nil {
		m.gens = map[string]map[uint64]bool{}
	}
	if m.gens[key] == nil {
		m.gens[key] = map[uint64]bool{}
	}
	m.gens[key][gen] = true
}

// Refund gives back the take r describes at key at now, and reports what
// happened: "absent", "older" (a receipt from before the key was created),
// "copy" (a second refund of the remembered receipt), "nothing", "exact"
// (intact, nothing reordered), "reordered" or "deleted" (the refund left
// every shape full).
func (m *Model) Refund(key string, shapes []driver.Shape, r driver.Receipt, now time.Duration) string {
	st := m.Get(key, now)
	if st == nil || r == (driver.Receipt{}) {
		return "absent"
	}
	if r.Gen < st.Born || r.Gen > st.Gen {
		return "older"
	}
	intact := st.Gen == r.Gen
	if !intact && st.MemoAt == r.At && st.MemoReserved == r.Reserved[0] && st.MemoGen == r.Gen {
		return "copy"
	}
	n := len(shapes)
	tats := st.read(n, now)
	next := make([]time.Duration, n)
	_, reorder := driver.RefundAll(shapes, tats, next, r, now, storekit.Shifted(intact))
	reordered := reorder > 0
	if !reordered && slices.Equal(next, tats) {
		return "nothing" // a reorder counts even when it changed only full shapes
	}
	st.write(next[:n])
	what := "exact"
	if reordered {
		st.Gen++
		st.MemoAt, st.MemoReserved, st.MemoGen = r.At, r.Reserved[0], r.Gen
		m.remember(key, st.Gen)
		what = "reordered"
	}
	if !st.Live(now) {
		delete(m.keys, key)
		return "deleted"
	}
	return what
}
