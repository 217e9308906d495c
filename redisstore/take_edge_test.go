package redisstore

import (
	"fmt"
	"testing"
	"time"

	"github.com/ratepace/pace/internal/fakeclock"
	"github.com/ratepace/pace/internal/takemodel"
)

// TestTakeAlternatesShapesAtExtremes drives one key through single-shape
// takes (takeOneScript) and multi-shape takes (takeScript), TakeMany of the
// key repeated, and refunds of either, on the shapes at the edges of what
// pace.NewBucket accepts, from instants an hour ahead and in 2116 (Redis expires keys on its own
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
