package pace_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/memory"
)

// A token endpoint reserves one exchange from the claimed client id before it
// checks the secret, and returns it when the secret is wrong: a forger naming
// someone else's id spends none of that client's pace.
func Example() {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p, err := pace.New(2, pace.WithClock(func() time.Time { return now }))
	if err != nil {
		panic(err)
	}
	exchange := func(id, secret string) string {
		res := p.Reserve(id)
		if !res.OK() {
			return fmt.Sprintf("429, retry after %v", res.RetryAfter())
		}
		if secret != "right" {
			res.Return()
			return "401"
		}
		return fmt.Sprintf("200, %d left", res.Remaining())
	}
	for range 100 {
		exchange("app-1", "guess") // the forger
	}
	fmt.Println(exchange("app-1", "right"))
	fmt.Println(exchange("app-1", "right"))
	fmt.Println(exchange("app-1", "right"))
	now = now.Add(500 * time.Millisecond)
	fmt.Println(exchange("app-1", "right"))
	fmt.Println("rows:", p.Len())
	// Output:
	// 200, 1 left
	// 200, 0 left
	// 429, retry after 500ms
	// 200, 0 left
	// rows: 1
}

// Allow is the per-source mode: every request that reached it spends.
func ExamplePace_Allow() {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p, _ := pace.New(3, pace.WithClock(func() time.Time { return now }))
	for i := range 5 {
		fmt.Println(i, p.Allow("203.0.113.7"))
	}
	// Output:
	// 0 true
	// 1 true
	// 2 true
	// 3 false
	// 4 false
}

// A reservation returned on a key never seen before leaves no row: memory is
// bounded by the keys that exchanged, not by the keys that were named.
func ExampleReservation_Return() {
	p, _ := pace.New(20)
	for i := range 1000 {
		res := p.Reserve(fmt.Sprintf("made-up-%d", i))
		res.Return()
	}
	fmt.Println(p.Len())
	// Output: 0
}

// Two replicas share one pace per key through a Store (here a memory store
// standing in for Redis or PostgreSQL): a forger's reservations, returned,
// spend nothing; a refusal is then answered by the replica's local tier
// without a round trip, with the wait left.
func ExampleShared() {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	store := memory.New(memory.WithClock(clock))
	ctx := context.Background()
	var replicas [2]*pace.Shared
	for i := range replicas {
		p, err := pace.NewShared(store, 2, pace.WithClock(clock))
		if err != nil {
			panic(err)
		}
		replicas[i] = p
	}
	exchange := func(replica int, id, secret string) string {
		res, err := replicas[replica].Reserve(ctx, id)
		if err != nil {
			return "503"
		}
		if !res.OK() {
			return fmt.Sprintf("429 (%v), retry after %v", res.Source(), res.RetryAfter())
		}
		if secret != "right" {
			res.Return(ctx)
			return "401"
		}
		return fmt.Sprintf("200, %d left", res.Remaining())
	}
	for range 100 {
		exchange(0, "app-1", "guess") // the forger, on replica 0
	}
	fmt.Println(exchange(1, "app-1", "right"))
	fmt.Println(exchange(0, "app-1", "right"))
	fmt.Println(exchange(1, "app-1", "right"))
	now = now.Add(200 * time.Millisecond)
	fmt.Println(exchange(1, "app-1", "right"))
	// Output:
	// 200, 1 left
	// 200, 0 left
	// 429 (store), retry after 500ms
	// 429 (held), retry after 300ms
}
