package bench

import (
	"fmt"
	"runtime"
	"time"
)

// MemoryLimit returns the limit MeasureMemory gives every implementation:
// one event per horizon, so that each new key holds state for one horizon,
// with the timed cleanups of go-limiter and ulule running every second
// instead of their defaults of 6 h and 30 s.
func MemoryLimit(horizon time.Duration) Limit {
	return Limit{Rate: float64(time.Second) / float64(horizon), Burst: 1, Sweep: time.Second}
}

// Memory is what MeasureMemory found.
type Memory struct {
	// Keys is the number of distinct keys decided on, once each.
	Keys int
	// Held is the number of keys the implementation can hold: Keys, or its
	// cap if it has one (throttled's LRU).
	Held int
	// Flood is the time the decisions on the Keys took. Were it longer than
	// the horizon, the first keys would have expired before Live was
	// measured: MeasureMemory fails instead.
	Flood time.Duration
	// Live is the heap, in bytes, that the instance holds once every key
	// was decided on, over the heap of the empty instance.
	Live int64
	// Wait is the idle time after the flood: two horizons and a second
	// (httprate's sliding window forgets a key after two windows).
	Wait time.Duration
	// Idle is the heap over the empty instance's once Wait has passed and a
	// little traffic has come (IdleTraffic decisions on other new keys, so
	// that limiters that clean up on a decision get the chance).
	Idle int64
	// Len is the number of keys the instance reported holding after the
	// wait and that traffic, or -1 if it cannot count them.
	Len int
}

// PerKey reports the live heap per held key, in bytes.
func (m Memory) PerKey() float64 { return float64(m.Live) / float64(m.Held) }

// IdleTraffic is the number of decisions, on keys not seen before, that
// MeasureMemory makes after the wait and before it measures again.
const IdleTraffic = 1000

// MeasureMemory decides one event on each of keys new keys of KeyLen bytes,
// each a string of its own that only the instance may keep, under
// MemoryLimit(horizon), and measures the heap the instance holds then and
// again after the wait. It calls flooded, if not nil, once the keys are
// decided on and measured, before the wait. It measures this process's heap:
// run it in a process of its own, with nothing else allocating.
func MeasureMemory(impl Impl, keys int, horizon time.Duration, flooded func()) (Memory, error) {
	d, err := impl.New(MemoryLimit(horizon))
	if err != nil {
		return Memory{}, err
	}
	defer d.Close()
	base := heap()
	start := time.Now()
	for i := range keys {
		ok, err := d.Allow(Key(i))
		if err != nil {
			return Memory{}, err
		}
		if !ok {
			return Memory{}, fmt.Errorf("bench: %s refused the first event of a new key (%d of %d)", impl.Name, i, keys)
		}
	}
	m := Memory{Keys: keys, Held: keys, Flood: time.Since(start), Wait: 2*horizon + time.Second, Len: -1}
	if m.Flood >= horizon {
		return Memory{}, fmt.Errorf("bench: %s took %v to decide on %d keys, longer than the horizon of %v: measure with a longer one", impl.Name, m.Flood, keys, horizon)
	}
	m.Live = heap() - base
	if impl.MaxKeys > 0 {
		m.Held = min(keys, impl.MaxKeys)
	}
	if flooded != nil {
		flooded()
	}
	time.Sleep(m.Wait)
	for i := range IdleTraffic {
		if _, err := d.Allow("z" + Key(i)[1:]); err != nil {
			return Memory{}, err
		}
	}
	m.Idle = heap() - base
	if l, ok := d.(Lener); ok {
		m.Len = l.Len()
	}
	runtime.KeepAlive(d)
	return m, nil
}

// heap returns the bytes of live heap objects after a full collection.
func heap() int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}
