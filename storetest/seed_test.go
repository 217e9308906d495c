package storetest_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/memory"
	"github.com/ratepace/pace/storetest"
)

// seedStore is the Store interface of the seed (cache-store.txt), copied
// method for method: a store written against it must compile as a
// pace.Store, and a pace.Store must be one, so the two method sets are the
// same.
type seedStore interface {
	TokenBucket(ctx context.Context, key string, capacity, refillPerSec, cost float64) (allowed bool, retryAfter time.Duration, err error)
	AcquireSlot(ctx context.Context, key string, limit int64, ttl time.Duration) (acquired bool, current int64, err error)
	AcquireSlotBurst(ctx context.Context, key string, sustained, ceiling int64, burstBudget, ttl time.Duration) (acquired bool, current int64, err error)
	ReleaseSlot(ctx context.Context, key string) error
	RefreshSlot(ctx context.Context, key string, ttl time.Duration) error
	ReleaseSlotBurst(ctx context.Context, key string) error
	RefreshSlotBurst(ctx context.Context, key string, ttl time.Duration) error
	Get(ctx context.Context, key string) ([]byte, error)
	Set(ctx context.Context, key string, value []byte, ttl time.Duration) error
	Delete(ctx context.Context, key string) error
	Close(ctx context.Context) error
}

var (
	_ pace.Store = seedStore(nil)
	_ seedStore  = pace.Store(nil)
)

// seedOnly is a store with the seed's eleven methods and nothing else (the
// embedded interface hides the memory store's take methods), as a store
// written against the seed would be.
type seedOnly struct{ seedStore }

// TestSeedOnlyStorePassesRun: a store that implements only the seed's
// interface passes the part of the suite that covers it.
func TestSeedOnlyStorePassesRun(t *testing.T) {
	storetest.Run(t, func(t *testing.T) pace.Store { return seedOnly{memory.New()} })
}
