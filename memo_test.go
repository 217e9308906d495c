package pace_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/internal/fakeclock"
	"github.com/ratepace/pace/memory"
)

func newMemo(t *testing.T, s pace.Store, ttl time.Duration) *pace.Memo {
	t.Helper()
	m, err := pace.NewMemo(s, ttl)
	if err != nil {
		t.Fatalf("NewMemo(store, %v) = %v; want no error", ttl, err)
	}
	return m
}

// TestMemoConcurrentMissesLoadOnce races many goroutines missing on one
// key. The loader blocks until every goroutine has started and the loader
// itself has been entered, so a Memo that did not share the load would have
// them all loading at once; it must be called exactly once, and every
// caller gets the value in a slice of its own.
func TestMemoConcurrentMissesLoadOnce(t *testing.T) {
	const n = 64
	s := memory.New()
	m := newMemo(t, s, time.Hour)

	var calls atomic.Int32
	entered, release := make(chan struct{}), make(chan struct{})
	load := func(context.Context) ([]byte, error) {
		if calls.Add(1) == 1 {
			close(entered)
		}
		<-release
		return []byte("value"), nil
	}

	var started, done sync.WaitGroup
	got := make([][]byte, n)
	errs := make([]error, n)
	for i := range n {
		started.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			started.Done()
			got[i], errs[i] = m.Get(context.Background(), "k", load)
		}()
	}
	started.Wait()
	<-entered
	close(release)
	done.Wait()

	if c := calls.Load(); c != 1 {
		t.Errorf("%d concurrent Get(\"k\") on a miss called the loader %d times; want 1", n, c)
	}
	for i := range n {
		if errs[i] != nil || string(got[i]) != "value" {
			t.Fatalf("Get(\"k\") #%d = %q, %v; want \"value\", nil", i, got[i], errs[i])
		}
	}
	got[0][0] = 'X' // each caller has its own copy
	for i := 1; i < n; i++ {
		if string(got[i]) != "value" {
			t.Fatalf("Get(\"k\") #%d = %q after another caller changed its result; want \"value\"", i, got[i])
		}
	}
	if v, err := s.Get(context.Background(), "k"); err != nil || string(v) != "value" {
		t.Fatalf("Store.Get(\"k\") = %q, %v; want the loaded \"value\", nil", v, err)
	}
}

func TestMemoHitDoesNotLoad(t *testing.T) {
	s := memory.New()
	if err := s.Set(context.Background(), "k", []byte("stored"), 0); err != nil {
		t.Fatal(err)
	}
	m := newMemo(t, s, time.Hour)
	v, err := m.Get(context.Background(), "k", func(context.Context) ([]byte, error) {
		t.Error("loader called on a hit")
		return nil, nil
	})
	if err != nil || string(v) != "stored" {
		t.Fatalf("Get(\"k\") = %q, %v; want \"stored\", nil", v, err)
	}
}

func TestMemoLoaderErrorNotCached(t *testing.T) {
	m := newMemo(t, memory.New(), time.Hour)
	errBoom := errors.New("boom")
	var calls int
	load := func(context.Context) ([]byte, error) {
		calls++
		if calls == 1 {
			return nil, errBoom
		}
		return []byte("v"), nil
	}
	ctx := context.Background()
	if v, err := m.Get(ctx, "k", load); !errors.Is(err, errBoom) || v != nil {
		t.Fatalf("Get(\"k\") with a failing loader = %q, %v; want nil, boom", v, err)
	}
	for i := range 2 {
		if v, err := m.Get(ctx, "k", load); err != nil || string(v) != "v" {
			t.Fatalf("Get(\"k\") #%d after the failure = %q, %v; want \"v\", nil", i+2, v, err)
		}
	}
	if calls != 2 {
		t.Fatalf("loader called %d times; want 2 (the failure, then one load stored)", calls)
	}
}

func TestMemoReloadsAfterTTL(t *testing.T) {
	clk := fakeclock.New(t0)
	m := newMemo(t, memory.New(memory.WithClock(clk.Now)), time.Minute)
	var calls int
	load := func(context.Context) ([]byte, error) {
		calls++
		return fmt.Appendf(nil, "v%d", calls), nil
	}
	ctx := context.Background()
	for _, step := range []struct {
		advance time.Duration
		want    string
	}{{0, "v1"}, {59 * time.Second, "v1"}, {time.Second, "v2"}, {30 * time.Second, "v2"}} {
		clk.Advance(step.advance)
		if v, err := m.Get(ctx, "k", load); err != nil || string(v) != step.want {
			t.Fatalf("Get(\"k\") at t0+%v = %q, %v; want %q, nil", clk.Elapsed(), v, err, step.want)
		}
	}
}

func TestMemoCanceledWaiterReturns(t *testing.T) {
	m := newMemo(t, memory.New(), time.Hour)
	entered, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := m.Get(context.Background(), "k", func(context.Context) ([]byte, error) {
			close(entered)
			<-release
			return []byte("v"), nil
		})
		done <- err
	}()
	<-entered
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := m.Get(ctx, "k", func(context.Context) ([]byte, error) { return nil, nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("Get with a canceled context during a load = %v; want context.Canceled", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("the loading Get = %v; want nil", err)
	}
}

func TestMemoInvalidArguments(t *testing.T) {
	if _, err := pace.NewMemo(nil, time.Hour); !errors.Is(err, pace.ErrInvalidArgument) {
		t.Errorf("NewMemo(nil, 1h) = %v; want ErrInvalidArgument", err)
	}
	if _, err := pace.NewMemo(memory.New(), -time.Second); !errors.Is(err, pace.ErrInvalidArgument) {
		t.Errorf("NewMemo(store, -1s) = %v; want ErrInvalidArgument", err)
	}
	m := newMemo(t, memory.New(), 0)
	if _, err := m.Get(context.Background(), "k", nil); !errors.Is(err, pace.ErrInvalidArgument) {
		t.Errorf("Get(\"k\", nil) = %v; want ErrInvalidArgument", err)
	}
	if _, err := m.Get(context.Background(), "", func(context.Context) ([]byte, error) { return nil, nil }); !errors.Is(err, pace.ErrInvalidArgument) {
		t.Errorf("Get(\"\", load) = %v; want ErrInvalidArgument", err)
	}
}

func TestMemoStoreClosed(t *testing.T) {
	s := memory.New()
	m := newMemo(t, s, time.Hour)
	_ = s.Close(context.Background())
	_, err := m.Get(context.Background(), "k", func(context.Context) ([]byte, error) {
		t.Error("loader called on a closed store")
		return nil, nil
	})
	if !errors.Is(err, pace.ErrClosed) {
		t.Fatalf("Get on a closed store = %v; want ErrClosed", err)
	}
}

func ExampleMemo() {
	store := memory.New()
	defer store.Close(context.Background())
	quotas, _ := pace.NewMemo(store, time.Minute)

	lookup := func(ctx context.Context) ([]byte, error) {
		fmt.Println("loading the quota from the database")
		return []byte("100/s"), nil
	}
	for range 3 {
		q, _ := quotas.Get(context.Background(), "quota:alice", lookup)
		fmt.Println(string(q))
	}
	// Output:
	// loading the quota from the database
	// 100/s
	// 100/s
	// 100/s
}
