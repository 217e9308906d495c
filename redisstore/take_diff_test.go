package redisstore

import (
	"context"
	"errors"
	"github.com/ratepace/pace/driver"
	"github.com/ratepace/pace/internal/takemodel"
	"github.com/redis/go-redis/v9"
	"strings"
	"testing"
	"time"
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

// storedExpiring returns the stored state of a key of s, as storedTake,
// after checking that a present key expires at its latest arrival time.
func storedExpiring(t *testing.T, s *Store, c *redis.Client) func(k string) *takemodel.State {
	return func(k string) *takemodel.State {
		key := s.keys.key(k, nsTake)
		st := storedTake(t, c, key)
		if st != nil {
			if got, want := expiryMillis(t, c, key), ceilUnixMillis(time.Unix(0, int64(st.Last()))); got != want {
				t.Fatalf("key %s expires at %d ms; want its latest arrival time, %d ms", k, got, want)
			}
		}
		return st
	}
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
		storedExpiring(t, s, c))
	takemodel.RequireSeen(t, seen, append(takemodel.Situations, "refused, wait of 2^53 ns or more")...)
}

// TestTakeFreeOnFullKeyClockBack replays the sequence a random scenario
// once found: a free take on a full key (which keeps nothing, so the script
// deletes the key) and then a clock stepped back to before the key's
// earlier state was full. The script and the reference must agree that the
// key is absent, and admit the next free take alike.
func TestTakeFreeOnFullKeyClockBack(t *testing.T) {
	clock := newFakeClock()
	s, c := newTestStore(t, withClock(clock.Now))
	ctx := context.Background()
	slow, free := takemodel.MustBucket(t, 10, 1, 1), takemodel.MustBucket(t, 100, 1e6, 0)
	var m takemodel.Model
	step := func(what string, shapes []driver.Shape) {
		t.Helper()
		g, err := s.Take(ctx, "k", shapes)
		if err != nil {
			t.Fatal(err)
		}
		want, err := m.Take("k", shapes, time.Duration(clock.Now().UnixNano()), g.Receipt.Gen)
		if err != nil {
			t.Fatal(err)
		}
		if g != want || !g.OK {
			t.Fatalf("%s = %+v; reference %+v, both want OK", what, g, want)
		}
	}
	step("Take(slow)", []driver.Shape{slow})
	clock.Advance(2 * time.Second) // full again
	step("Take(free) on the full key", []driver.Shape{free})
	if st := storedTake(t, c, s.keys.key("k", nsTake)); st != nil {
		t.Fatalf("after a free take on a full key the server holds %+v; want no key", *st)
	}
	clock.Advance(-1500 * time.Millisecond)
	step("Take(free) after the clock stepped back", []driver.Shape{free})
}

// TestTakeMatchesReferenceBefore70 runs the scenarios of
// TestTakeMatchesReference and TestTakeAlternatesShapesAtExtremes with
// takeOneScript as it runs on a server older than Redis 7.0 (no
// REDIS_VERSION_NUM: a GET, then a SET, where 7.0 creates a fresh key with
// one SET NX GET).
func TestTakeMatchesReferenceBefore70(t *testing.T) {
	body := strings.Replace(takeOneBody, "redis.REDIS_VERSION_NUM", "nil", 1)
	if body == takeOneBody {
		t.Fatal("takeOneBody no longer reads redis.REDIS_VERSION_NUM")
	}
	saved := takeOneScript
	takeOneScript = redis.NewScript(luaClock + luaCarry + body)
	t.Cleanup(func() { takeOneScript = saved })
	t.Run("scenario", TestTakeMatchesReference)
	t.Run("extremes", TestTakeAlternatesShapesAtExtremes)
}
