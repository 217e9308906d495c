package httplimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratepace/pace/httplimit"
	"github.com/ratepace/pace/memory"
)

// TestLimiterOtherTransport drives a Limiter as a transport other than
// HTTP does (package grpclimit): keys given by the caller, limits without
// KeyFuncs, statuses mapped by the caller.
func TestLimiterOtherTransport(t *testing.T) {
	clk := newClock()
	s := memory.New(memory.WithClock(clk.Now))
	perPeer, perClient := newPace(t, 10, clk), newPace(t, 1, clk)
	var c counter
	l, err := httplimit.NewLimiter([]httplimit.Limit{
		httplimit.Pace(perPeer, nil, httplimit.Name("per-peer")),
		httplimit.Slots(s, 1, time.Minute, nil, httplimit.Name("streams")),
		httplimit.Pace(perClient, nil, httplimit.Name("per-client"), httplimit.ReturnOn(401), httplimit.DecideAfterVerify()),
	}, c.Option())
	if err != nil {
		t.Fatal(err)
	}
	if l.Policy() != `"per-peer";q=10;w=1, "per-client";q=1;w=1` {
		t.Fatalf("Policy = %s", l.Policy())
	}
	keys := func(peer, client string) func(int) (string, error) {
		return func(i int) (string, error) {
			return [...]string{peer, peer, client}[i], nil
		}
	}
	ctx := context.Background()

	// A stream: admitted, its slot held until Finish.
	var first httplimit.Ticket
	if got := l.Decide(ctx, &first, keys("10.0.0.1", "app-1")); got != httplimit.Admitted || first.Outcome() != httplimit.Admitted {
		t.Fatalf("Decide = %v", got)
	}
	if first.RateLimit() != `"per-peer";r=9;t=1` {
		t.Fatalf("RateLimit before Verify = %q", first.RateLimit())
	}
	var second httplimit.Ticket
	if got := l.Decide(ctx, &second, keys("10.0.0.1", "app-2")); got != httplimit.Refused {
		t.Fatalf("a second stream from the peer: %v; want Refused", got)
	}
	if i, name, wait := second.Refusal(); i != 1 || name != "streams" || wait != time.Second {
		t.Fatalf("Refusal = %d %q %v", i, name, wait)
	}
	if got := c.Get("per-peer", httplimit.Returned); got != 1 {
		t.Fatalf("per-peer returned %d; want 1 (all or nothing)", got)
	}
	if !first.Verify() || first.RateLimit() != `"per-peer";r=9;t=1, "per-client";r=0;t=1` {
		t.Fatalf("after Verify: RateLimit %q", first.RateLimit())
	}
	first.Finish(200)
	first.Finish(200)
	if got := l.Decide(ctx, &second, keys("10.0.0.1", "app-2")); got != httplimit.Admitted {
		t.Fatalf("after Finish: %v; want the slot free", got)
	}
	second.Finish(401) // never verified, not accepted: app-2 spends nothing
	if got := l.Decide(ctx, &second, keys("10.0.0.1", "app-2")); got != httplimit.Admitted {
		t.Fatalf("app-2 again: %v", got)
	}
	second.Return()
	second.Finish(200)
	if perClient.Len() != 1 {
		t.Fatalf("per-client rows %d; want only app-1's", perClient.Len())
	}

	// A key error from the caller's key source.
	errNoMD := errors.New("grpclimit: no client id in metadata")
	var bad httplimit.Ticket
	got := l.Decide(ctx, &bad, func(i int) (string, error) {
		if i == 2 {
			return "", errNoMD
		}
		return "10.0.0.1", nil
	})
	if i, err := bad.Err(); got != httplimit.KeyFailed || i != 2 || !errors.Is(err, errNoMD) {
		t.Fatalf("Decide = %v, Err = %d %v", got, i, err)
	}
	bad.Finish(200)
	if got := l.Decide(ctx, &bad, keys("10.0.0.1", "")); got != httplimit.KeyFailed {
		t.Fatalf("empty key: %v; want KeyFailed", got)
	}
	if l.DryRun() {
		t.Fatal("DryRun without the option")
	}
	// Spent: the first stream, and app-2's first (no ReturnOn on per-peer);
	// the refusal, the Return and the key errors gave theirs back.
	if got := c.Get("per-peer", httplimit.Admitted) - c.Get("per-peer", httplimit.Returned); got != 2 {
		t.Fatalf("per-peer spent %d; want 2", got)
	}
}

// TestRefusedVerifyReleasesSlots: when Verify refuses (the event was taken
// by another request meanwhile), Finish still releases the ticket's slots.
func TestRefusedVerifyReleasesSlots(t *testing.T) {
	clk := newClock()
	s := memory.New(memory.WithClock(clk.Now))
	perClient := newPace(t, 1, clk)
	l, err := httplimit.NewLimiter([]httplimit.Limit{
		httplimit.Slots(s, 1, time.Minute, nil, httplimit.Name("streams")),
		httplimit.Pace(perClient, nil, httplimit.Name("per-client"), httplimit.DecideAfterVerify()),
	})
	if err != nil {
		t.Fatal(err)
	}
	key := func(int) (string, error) { return "app", nil }
	ctx := context.Background()
	var first httplimit.Ticket
	if got := l.Decide(ctx, &first, key); got != httplimit.Admitted {
		t.Fatalf("Decide = %v; want admitted", got)
	}
	perClient.Allow("app") // another request takes the client's only event
	if first.Verify() {
		t.Fatal("Verify = true after the event was taken; want false")
	}
	first.Finish(429)
	clk.Advance(time.Second) // the client's event refilled; the slot's ttl is a minute
	var second httplimit.Ticket
	if got := l.Decide(ctx, &second, key); got != httplimit.Admitted {
		_, name, _ := second.Refusal()
		t.Fatalf("Decide after a refused Verify and Finish = %v by %q; want admitted (the slot released)", got, name)
	}
}

// TestDecidePanickingKeyGivesBack pins that a key function (user code) that
// panics mid-decision leaves nothing spent: the event the per-peer limit
// took before the panic and the slot acquired are given back as the panic
// goes up, so the peer's next request is admitted.
func TestDecidePanickingKeyGivesBack(t *testing.T) {
	clk := newClock()
	s := memory.New(memory.WithClock(clk.Now))
	l, err := httplimit.NewLimiter([]httplimit.Limit{
		httplimit.Pace(newPace(t, 1, clk), nil, httplimit.Name("per-peer")),
		httplimit.Slots(s, 1, time.Minute, nil, httplimit.Name("streams")),
		httplimit.Pace(newPace(t, 1, clk), nil, httplimit.Name("per-client")),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	decide := func(client func() string) (got httplimit.Outcome, panicked any) {
		defer func() { panicked = recover() }()
		var tk httplimit.Ticket
		got = l.Decide(ctx, &tk, func(i int) (string, error) {
			if i == 2 {
				return client(), nil
			}
			return "10.0.0.1", nil
		})
		tk.Finish(200)
		return got, nil
	}
	if _, p := decide(func() string { panic("key function bug") }); p != "key function bug" {
		t.Fatalf("recovered %v; want the key function's panic to go on", p)
	}
	if got, p := decide(func() string { return "app-1" }); got != httplimit.Admitted || p != nil {
		t.Fatalf("the peer's next request: %v (panic %v); want Admitted, nothing spent by the panicked one", got, p)
	}
	if got, _ := decide(func() string { return "app-2" }); got != httplimit.Refused {
		t.Fatalf("a third request within the second: %v; want Refused (the per-peer limit is 1/s)", got)
	}
}
