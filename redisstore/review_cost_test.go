package redisstore

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/ratepace/pace"
)

// TestReviewCostHugeOverdraftDebits: on Redis, a Shared reservation
// settled at math.MaxInt puts the key in debt (up to about 73 years):
// another replica refuses it an hour later.
func TestReviewCostHugeOverdraftDebits(t *testing.T) {
	c := testClient(t)
	prefix := fmt.Sprintf("review-cost:%d:", time.Now().UnixNano())
	t.Cleanup(func() {
		ctx := context.Background()
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
	})
	clock := newFakeClock()
	s := mustNew(t, c, WithPrefix(prefix), withClock(clock.Now))
	mk := func() *pace.Shared {
		p, err := pace.NewShared(s, 1, pace.WithClock(clock.Now), pace.WithBurst(10))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	a, b := mk(), mk()
	r, err := a.ReserveN(context.Background(), "k", 5)
	if err != nil || !r.OK() {
		t.Fatalf("ReserveN: %v %v", r.OK(), err)
	}
	if err := r.Settle(context.Background(), math.MaxInt); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour)
	x, err := b.ReserveN(context.Background(), "k", 1)
	if err != nil {
		t.Fatal(err)
	}
	if x.OK() {
		t.Fatal("another replica an hour after Settle(MaxInt) of 5: admitted; want refused (the debt)")
	}
}
