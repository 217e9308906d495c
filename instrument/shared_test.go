package instrument_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/driver"
	"github.com/ratepace/pace/instrument"
	"github.com/ratepace/pace/internal/fakeclock"
	"github.com/ratepace/pace/memory"
)

// downable is a memory store whose Take and TakeMany fail while down is set.
type downable struct {
	*memory.Store
	down atomic.Bool
}

func (s *downable) Take(ctx context.Context, key string, shapes []driver.Shape) (driver.Grant, error) {
	if s.down.Load() {
		return driver.Grant{}, errBackend
	}
	return s.Store.Take(ctx, key, shapes)
}

func (s *downable) TakeMany(ctx context.Context, keys []string, shapes []driver.Shape, out []driver.Grant) error {
	if s.down.Load() {
		return errBackend
	}
	return s.Store.TakeMany(ctx, keys, shapes, out)
}

func TestNewShared(t *testing.T) {
	reg := newCapture()
	clock := fakeclock.New(time.Unix(1_000_000, 0))
	s := &downable{Store: memory.New(memory.WithClock(clock.Now))}
	fb, err := pace.New(1, pace.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	p, err := instrument.NewShared(s, 2, reg, pace.WithClock(clock.Now), pace.WithFallback(fb, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	c := reg.one(t)
	ctx := context.Background()
	// A bucket of 2: two admitted by the store, then refused by the local
	// tier, which keeps a row for the key.
	for i, want := range []bool{true, true, false} {
		if got, err := p.Allow(ctx, "a"); got != want || err != nil {
			t.Fatalf("Allow(a) #%d = %v, %v; want %v", i+1, got, err, want)
		}
	}
	r, _ := p.Reserve(ctx, "b")
	r.Return(ctx)
	r.Return(ctx) // a second Return gives nothing back and is not counted
	// The store fails: the fallback admits one, refuses the next, and gives
	// back what it admitted.
	s.down.Store(true)
	fr, _ := p.Reserve(ctx, "c")
	p.Allow(ctx, "c")
	fr.Return(ctx)
	want := `
# HELP pace_shared_decisions_total Shared decisions by the tier that made them (source: store, held or fallback) and outcome (result: reserved or refused).
# TYPE pace_shared_decisions_total counter
pace_shared_decisions_total{result="refused",source="fallback"} 1
pace_shared_decisions_total{result="refused",source="held"} 1
pace_shared_decisions_total{result="refused",source="store"} 0
pace_shared_decisions_total{result="reserved",source="fallback"} 1
pace_shared_decisions_total{result="reserved",source="store"} 3
# HELP pace_shared_local_rows Rows of the Shared's local tier: keys refused within the last refill time of the longest limit.
# TYPE pace_shared_local_rows gauge
pace_shared_local_rows 1
# HELP pace_shared_returned_total Shared reservations given back by SharedReservation.Return, by the tier that had admitted them (source: store or fallback).
# TYPE pace_shared_returned_total counter
pace_shared_returned_total{source="fallback"} 1
pace_shared_returned_total{source="store"} 1
# HELP pace_shared_round_trip_decisions Decisions carried by each round trip of a Shared to its store.
# TYPE pace_shared_round_trip_decisions histogram
pace_shared_round_trip_decisions_bucket{le="1"} 4
pace_shared_round_trip_decisions_bucket{le="2"} 4
pace_shared_round_trip_decisions_bucket{le="4"} 4
pace_shared_round_trip_decisions_bucket{le="8"} 4
pace_shared_round_trip_decisions_bucket{le="16"} 4
pace_shared_round_trip_decisions_bucket{le="32"} 4
pace_shared_round_trip_decisions_bucket{le="64"} 4
pace_shared_round_trip_decisions_bucket{le="128"} 4
pace_shared_round_trip_decisions_bucket{le="256"} 4
pace_shared_round_trip_decisions_bucket{le="+Inf"} 4
pace_shared_round_trip_decisions_sum 4
pace_shared_round_trip_decisions_count 4
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	lint(t, c)
}

func TestNewSharedInvalid(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := memory.New()
	if p, err := instrument.NewShared(s, 0, reg); p != nil || !errors.Is(err, pace.ErrInvalidArgument) {
		t.Errorf("NewShared(rate 0) = %v, %v; want nil, ErrInvalidArgument", p, err)
	}
	if p, err := instrument.NewShared(s, 1, nil); p != nil || !errors.Is(err, pace.ErrInvalidArgument) {
		t.Errorf("NewShared(nil registerer) = %v, %v; want nil, ErrInvalidArgument", p, err)
	}
	if mfs, _ := reg.Gather(); len(mfs) != 0 {
		t.Errorf("%d metric families registered by failed constructors", len(mfs))
	}
	if _, err := instrument.NewShared(s, 1, reg); err != nil {
		t.Fatal(err)
	}
	var are prometheus.AlreadyRegisteredError
	if p, err := instrument.NewShared(s, 1, reg); p != nil || !errors.As(err, &are) {
		t.Errorf("second NewShared on one registry = %v, %v; want nil, AlreadyRegisteredError", p, err)
	}
}
