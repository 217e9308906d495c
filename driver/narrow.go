package driver

import (
	"context"
	"time"
)

// Values is the part of a pace.Store that pace.Memo uses: Get and Set, with
// the pace.Store contract's semantics. Every pace.Store is one.
type Values interface {
	Get(ctx context.Context, key string) ([]byte, error)
	Set(ctx context.Context, key string, value []byte, ttl time.Duration) error
}

// Slots is the part of a pace.Store that the Slots limits of httplimit and
// grpclimit use: the plain connection-slot counter, with the pace.Store
// contract's semantics. Every pace.Store is one.
type Slots interface {
	AcquireSlot(ctx context.Context, key string, limit int64, ttl time.Duration) (acquired bool, current int64, err error)
	ReleaseSlot(ctx context.Context, key string) error
	RefreshSlot(ctx context.Context, key string, ttl time.Duration) error
}
