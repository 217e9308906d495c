package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratepace/pace/internal/takemodel"
	"github.com/redis/go-redis/v9"
)

// storedTake decodes the state the scripts keep at key: nil when absent.
func storedTake(t *testing.T, c redis.UniversalClient, key string) *takemodel.State {
	t.Helper()
	v, err := c.Get(context.Background(), key).Result()
	if errors.Is(err, redis.Nil) {
		return nil
	}
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	f := unpack(t, v, len(v)/8)
	if len(f) < 9 || len(f)%2 == 0 {
		t.Fatalf("stored take state of %d doubles; want 7 + 2 per shape", len(f))
	}
	st := &takemodel.State{
		Gen:          uint64(f[0]),
		Born:         uint64(f[1]),
		MemoAt:       time.Duration(f[2])*time.Second + time.Duration(f[3]),
		MemoReserved: time.Duration(f[4])*time.Second + time.Duration(f[5]),
		MemoGen:      uint64(f[6]),
	}
	for i := 7; i < len(f); i += 2 {
		st.TATs = append(st.TATs, time.Duration(f[i])*time.Second+time.Duration(f[i+1]))
	}
	return st
}

// TestTakeMatchesReference runs the Take scenario against the Lua scripts on
// the test server, with the clock given to the scripts by the test.
func TestTakeMatchesReference(t *testing.T) {
	clock := newFakeClock()
	s, c := newTestStore(t, withClock(clock.Now))
	seed := testSeed(t)
	seen := takemodel.Scenario(t, s, seed, 2000, true,
		func() time.Duration { return time.Duration(clock.Now().UnixNano()) },
		clock.Advance,
		func(k string) *takemodel.State {
			key := s.keys.key(k, nsTake)
			st := storedTake(t, c, key)
			if st != nil {
				if got, want := expiryMillis(t, c, key), ceilUnixMillis(time.Unix(0, int64(st.Last()))); got != want {
					t.Fatalf("key %s expires at %d ms; want its latest arrival time, %d ms", k, got, want)
				}
			}
			return st
		})
	takemodel.RequireSeen(t, seen, append(takemodel.Situations, "refused, wait of 2^53 ns or more")...)
}
