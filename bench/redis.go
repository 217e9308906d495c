package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/ratepace/pace/redisstore"
	"github.com/redis/go-redis/v9"
)

// Redis returns the implementations that keep their state in Redis, all on
// client c, pace first. Each is one entry: a further implementation on Redis
// (pace's Shared, say) is one more entry here, and every Redis benchmark and
// the report pick it up.
func Redis(c *redis.Client) []Impl {
	return []Impl{
		{Name: "pace", Title: "pace redisstore", Module: "github.com/ratepace/pace/redisstore",
			Setup: "Store.TokenBucket(key, burst, rate, 1)",
			New: func(l Limit) (Decider, error) {
				s, err := redisstore.New(c)
				if err != nil {
					return nil, err
				}
				return &onRedis{c: c, ns: newNamespace(), period: l.Period(), allow: func(ctx context.Context, key string) (bool, error) {
					ok, _, err := s.TokenBucket(ctx, key, float64(l.Burst), l.Rate, 1)
					return ok, err
				}}, nil
			}},
		{Name: "redis_rate", Title: "go-redis/redis_rate", Module: "github.com/go-redis/redis_rate/v10",
			Setup: "Limiter.Allow(key, Limit{Rate, Burst, Period})",
			New: func(l Limit) (Decider, error) {
				rl, err := redisRateLimit(l)
				if err != nil {
					return nil, err
				}
				lim := redis_rate.NewLimiter(c)
				return &onRedis{c: c, ns: newNamespace(), period: l.Period(), allow: func(ctx context.Context, key string) (bool, error) {
					res, err := lim.Allow(ctx, key, rl)
					if err != nil {
						return false, err
					}
					return res.Allowed > 0, nil
				}}, nil
			}},
	}
}

// redisRateLimit expresses l as redis_rate's whole number of events per
// period.
func redisRateLimit(l Limit) (redis_rate.Limit, error) {
	if l.Rate >= 1 && l.Rate == math.Trunc(l.Rate) {
		return redis_rate.Limit{Rate: int(l.Rate), Burst: l.Burst, Period: time.Second}, nil
	}
	if per := 1 / l.Rate; per == math.Trunc(per) {
		return redis_rate.Limit{Rate: 1, Burst: l.Burst, Period: time.Duration(per) * time.Second}, nil
	}
	return redis_rate.Limit{}, fmt.Errorf("bench: %g events per second for redis_rate: %w", l.Rate, errShape)
}

// onRedis is a Decider on Redis. Its keys live in a namespace of their own,
// which the benchmarks put in front of every key (see Namespacer); Close
// deletes the keys that would otherwise stay more than a few seconds.
type onRedis struct {
	c      *redis.Client
	ns     string
	period time.Duration
	allow  func(ctx context.Context, key string) (bool, error)
}

func (d *onRedis) Allow(key string) (bool, error) { return d.allow(context.Background(), key) }
func (d *onRedis) Namespace() string              { return d.ns }

func (d *onRedis) Close() error {
	if d.period <= 5*time.Second {
		return nil // expires by itself
	}
	ctx := context.Background()
	iter := d.c.Scan(ctx, 0, "*"+d.ns+"*", 1000).Iterator()
	var batch []string
	for iter.Next(ctx) {
		if batch = append(batch, iter.Val()); len(batch) == 1000 {
			if err := d.c.Unlink(ctx, batch...).Err(); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		if err := d.c.Unlink(ctx, batch...).Err(); err != nil {
			return err
		}
	}
	return iter.Err()
}

// newNamespace returns a namespace no other instance has: "b" and 12 random
// hexadecimal digits and a colon.
func newNamespace() string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on the platforms Go supports
	}
	return "b" + hex.EncodeToString(b[:]) + ":"
}
