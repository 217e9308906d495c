package pace_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ratepace/pace/internal/sharedtest"
	"github.com/ratepace/pace/storetest"
)

// TestSharedScenarios runs the scenarios that redisstore and pgstore run on
// their servers, on a store in this process: the replicas are goroutine
// groups here, each with a Shared (and so a local tier) of its own.
func TestSharedScenarios(t *testing.T) {
	var (
		mu     sync.Mutex
		stores = map[string]*spy{}
	)
	store := func(ns string) *spy {
		mu.Lock()
		defer mu.Unlock()
		s := stores[ns]
		if s == nil {
			s = newSpy(nil)
			stores[ns] = s
		}
		return s
	}
	b := sharedtest.Backend{
		Open:  func(_ testing.TB, _, ns string) storetest.TakeStore { return store(ns) },
		Calls: func(_ testing.TB, _, ns string) int64 { return store(ns).Decisions.Load() },
	}
	t.Run("Admitted", func(t *testing.T) { sharedtest.Admitted(t, b, "") })
	t.Run("Forger", func(t *testing.T) { sharedtest.Forger(t, b, "") })
	t.Run("LocalTier", func(t *testing.T) { sharedtest.LocalTier(t, b, "") })
	t.Run("Fallback", func(t *testing.T) {
		// The store "dies": every call fails until it is "restarted".
		var down atomic.Bool
		hook := func(context.Context, int) error {
			if down.Load() {
				return errDown
			}
			return nil
		}
		var opened *spy
		fb := b
		fb.Open = func(t testing.TB, config, ns string) storetest.TakeStore {
			opened = store(ns)
			opened.Hook.Store(&hook)
			return opened
		}
		sharedtest.Fallback(t, fb, "", func() { down.Store(true) }, func() { down.Store(false) })
	})
}
