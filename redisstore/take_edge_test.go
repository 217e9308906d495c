package redisstore

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/ratepace/pace/driver"
	"github.com/ratepace/pace/internal/fakeclock"
	"github.com/ratepace/pace/internal/storekit"
	"github.com/ratepace/pace/internal/takemodel"
)

// TestTakeAlternatesShapesAtExtremes drives one key through single-shape
// takes (takeOneScript) and multi-shape takes (takeScript), TakeMany of the
// key repeated, and refunds of either, on the shapes at the edges of what
// driver.NewShape accepts, from instants an hour ahead and in 2116 (Redis expires keys on its own
// clock, so the fake one must stay ahead of it),
// with the clock stepped back now and then, and requires the grants and
// stored states of the Go arithmetic (takemodel) to the nanosecond, and
// the key to expire at its latest arrival time.
func TestTakeAlternatesShapesAtExtremes(t *testing.T) {
	starts := []time.Time{
		time.Now().Add(time.Hour).Round(0).Add(123),
		time.Unix(0, 1<<62+999_999_999),
	}
	seed := testSeed(t)
	seen := map[string]int{}
	for i, shapes := range takemodel.ExtremeShapes(t) {
		for j, start := range starts {
			t.Run(fmt.Sprintf("shapes%d/start%d", i, j), func(t *testing.T) {
				clock := fakeclock.New(start)
				s, c := newTestStore(t, withClock(clock.Now))
				for what, n := range takemodel.Alternate(t, s, seed+uint64(10*i+j), 300, shapes, true,
					func() time.Duration { return time.Duration(clock.Now().UnixNano()) }, clock.Advance,
					storedExpiring(t, s, c)) {
					seen[what] += n
				}
			})
		}
	}
	takemodel.RequireSeen(t, seen, "taken, 1 of 3 shapes", "taken, 3 of 3 shapes", "refused, 1 of 3 shapes", "refused, 3 of 3 shapes",
		"taken, 1 of 2 shapes", "taken, 2 of 2 shapes", "refund of 1 shapes: exact", "refund of 3 shapes: exact",
		"refund of 1 shapes: reordered", "refund of 3 shapes: reordered")
}

// TestReadTakesOne checks the parsing of takeOneScript's reply: one number
// for a fresh key (its gen the caller's, its arrival time now), four for a
// live one, in the order of the keys; a reply of the wrong length or with an
// unknown code is an error, not a grant.
func TestReadTakesOne(t *testing.T) {
	shapes := []driver.Shape{takemodel.MustBucket(t, 5, 5, 1)}
	const nowS, nowNs, gen, liveGen = 1_700_000_000, 250_000_000, 77, 42
	now := time.Duration(nowS)*time.Second + nowNs
	tat := now + 300*time.Millisecond
	b := takeBatch{keys: []string{"fresh", "live"}, at: []int{1, 0}}
	out := make([]driver.Grant, 2)
	res := []int64{nowS, nowNs, 1, 3, liveGen, int64(tat / time.Second), int64(tat % time.Second)}
	if err := readTakesOne(res, b, shapes, gen, out); err != nil {
		t.Fatalf("readTakesOne(%v) = %v", res, err)
	}
	wantFresh, err := storekit.Grant(shapes, []time.Duration{now}, now, gen, true)
	if err != nil {
		t.Fatal(err)
	}
	wantLive, err := storekit.Grant(shapes, []time.Duration{tat}, now, liveGen, true)
	if err != nil {
		t.Fatal(err)
	}
	if out[1] != wantFresh || out[0] != wantLive {
		t.Errorf("grants %+v; want fresh %+v at 1, live %+v at 0", out, wantFresh, wantLive)
	}
	for name, bad := range map[string][]int64{
		"no clock":            {nowS},
		"a key missing":       {nowS, nowNs, 1},
		"a live key cut":      {nowS, nowNs, 1, 3, liveGen, 5},
		"a number left over":  append(append([]int64(nil), res...), 0),
		"an unknown code":     {nowS, nowNs, 1, 4, liveGen, 5, 6},
		"a fresh code of two": {nowS, nowNs, 2, 1},
	} {
		if err := readTakesOne(bad, b, shapes, gen, out); err == nil {
			t.Errorf("%s: readTakesOne(%v) = nil; want an error", name, bad)
		}
	}
}

// TestUnpackDoubles checks the decoding of takeOneScript's packed reply:
// integers below 2^53 come back exact, in order; a reply that is not a
// whole number of doubles, or holds a number that is not an integer an
// int64 holds, is an error.
func TestUnpackDoubles(t *testing.T) {
	pack := func(vs ...float64) string {
		b := make([]byte, 0, 8*len(vs))
		for _, v := range vs {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
		}
		return string(b)
	}
	want := []int64{1_700_000_000, 999_999_999, 3, 1<<53 - 1, -1, 0}
	got, err := unpackDoubles(pack(1_700_000_000, 999_999_999, 3, 1<<53-1, -1, 0), nil)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("unpackDoubles = %v, %v; want %v, nil", got, err, want)
	}
	for name, bad := range map[string]string{
		"a double cut":    pack(1, 2)[:15],
		"a fraction":      pack(1, 0.5),
		"not a number":    pack(math.NaN()),
		"infinite":        pack(math.Inf(-1)),
		"beyond an int64": pack(1 << 63),
	} {
		if got, err := unpackDoubles(bad, nil); err == nil {
			t.Errorf("%s: unpackDoubles = %v, nil; want an error", name, got)
		}
	}
}
