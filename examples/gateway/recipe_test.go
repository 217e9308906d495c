package main

import (
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/httplimit"
	"github.com/ratepace/pace/instrument"
	"github.com/ratepace/pace/redisstore"
)

// threeReplicas is the README's "three-replica gateway on Redis", word for
// word between the markers, so that the snippet always compiles and builds
// a working middleware.
func threeReplicas(addr string, trustedProxies []netip.Prefix) (*httplimit.Middleware, error) {
	// README begin
	client := redis.NewClient(&redis.Options{
		Addr:                  addr,
		ContextTimeoutEnabled: true, // a deadline ends a call: the failure paths rely on it
	})
	store, err := redisstore.New(client)
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()

	// Pace per address, in process: nothing to fail.
	perIP, err := instrument.NewPace(50, reg)
	if err != nil {
		return nil, err
	}
	// One pace per client across the replicas; this replica's third of it while Redis is down.
	fb, err := pace.New(20.0 / 3)
	if err != nil {
		return nil, err
	}
	perClient, err := instrument.NewShared(store, 20, reg,
		pace.WithQuota(1000, time.Hour), pace.WithFallback(fb, 50*time.Millisecond))
	if err != nil {
		return nil, err
	}
	// Slots (and Bucket limits) decide explicitly while Redis is down, without waiting for it.
	failures, err := instrument.Failures(reg)
	if err != nil {
		return nil, err
	}
	guarded, err := pace.WithFailurePolicy(store, pace.FailOpen, 50*time.Millisecond,
		pace.WithObserver(failures))
	if err != nil {
		return nil, err
	}

	return httplimit.New([]httplimit.Limit{
		httplimit.Pace(perIP, httplimit.ClientIP(trustedProxies...), httplimit.Name("per-ip")),
		httplimit.Shared(perClient, httplimit.ClientID(), httplimit.Name("per-client"),
			httplimit.ReturnOn(http.StatusUnauthorized)),
		httplimit.Slots(guarded, 4, 30*time.Second, httplimit.ClientID(), httplimit.Name("streams")),
	}, instrument.Middleware(reg))
	// README end
}

// TestThreeReplicasRecipe builds the README's recipe: every option it uses
// is valid for the constructor it is given to, and the metrics of all its
// limits share one registry. No call reaches Redis while building it.
func TestThreeReplicasRecipe(t *testing.T) {
	mw, err := threeReplicas("127.0.0.1:1", nil)
	if err != nil {
		t.Fatalf("the README's three-replica recipe: %v", err)
	}
	if got := mw.Names(); len(got) != 3 {
		t.Fatalf("Names() = %q; want the recipe's three limits", got)
	}
}
