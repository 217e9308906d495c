package memory_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ratepace/pace/memory"
)

func ExampleStore_AcquireSlotBurst() {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	store := memory.New(memory.WithClock(func() time.Time { return now }))
	defer store.Close(context.Background())
	ctx := context.Background()

	// Two connections sustained, a third while a minute of burst budget
	// lasts, never a fourth.
	connect := func() {
		ok, n, err := store.AcquireSlotBurst(ctx, "player:42", 2, 3, time.Minute, time.Hour)
		fmt.Println(ok, n, err)
	}
	connect()
	connect()
	connect()
	connect() // the ceiling

	now = now.Add(5 * time.Minute) // one above sustained of two for 5m spends 2m30s: more than the minute
	_ = store.ReleaseSlotBurst(ctx, "player:42")
	connect() // below the ceiling, but the budget is spent
	// Output:
	// true 1 <nil>
	// true 2 <nil>
	// true 3 <nil>
	// false 3 <nil>
	// false 2 <nil>
}

func ExampleStore_TokenBucket() {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	store := memory.New(memory.WithClock(func() time.Time { return now }))
	defer store.Close(context.Background())
	ctx := context.Background()

	// A bucket of 3 tokens refilled at one per second: three requests pass,
	// the fourth must wait a second.
	for range 4 {
		ok, retry, _ := store.TokenBucket(ctx, "ip:192.0.2.1", 3, 1, 1)
		fmt.Println(ok, retry)
	}
	now = now.Add(time.Second)
	ok, retry, _ := store.TokenBucket(ctx, "ip:192.0.2.1", 3, 1, 1)
	fmt.Println(ok, retry)
	// Output:
	// true 0s
	// true 0s
	// true 0s
	// false 1s
	// true 0s
}
