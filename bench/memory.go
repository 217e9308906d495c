package bench

import (
	"fmt"
	"runtime"
	"time"
)

// MemoryLimit is the limit MeasureMemory gives every implementation: the
// Flood shape (one event per second, so each key holds state for a second),
// with the timed cleanups of go-limiter and ulule set to one second, the
// horizon, instead of their defaults of hours and 30 s.
var MemoryLimit = Limit{Rate: Flood.Rate, Burst: Flood.Burst, Sweep: time.Second}

// Memory is what MeasureMemory found.
type Memory struct {
	// Keys is the number of distinct keys decided on, once each.
	Keys int
	// Held is the number of keys the implementation can hold: Keys, or its
	// cap if it has one (throttled's LRU).
	Held int
	// Live is the heap, in bytes, that the instance holds once every key
	// was decided on, over the heap of the empty instance.
	Live int64
	// Idle is the same once Wait has passed and a little traffic has come
	// (IdleTraffic decisions on other new keys, so that limiters that clean
	// up on a decision get the chance).
	Idle int64
	// Len is the number of keys the instance reported holding after the
	// wait, or -1 if it cannot count them.
	Len int
}

// PerKey reports the live heap per held key, in bytes.
func (m Memory) PerKey() float64 { return float64(m.Live) / float64(m.Held) }

// IdleTraffic is the number of decisions, on keys not seen before, that
// MeasureMemory makes after the wait and before it measures again.
const IdleTraffic = 1000

// MeasureMemory decides one event on each of keys new keys of KeyLen bytes,
// each a string of its own that only the instance may keep, under
// MemoryLimit, and measures the heap the instance holds then and again after
// wait (which should exceed the one-second horizon and the one-second
// sweeps). It measures this process's heap: run it in a process of its own,
// with nothing else allocating.
func MeasureMemory(impl Impl, keys int, wait time.Duration) (Memory, error) {
	d, err := impl.New(MemoryLimit)
	if err != nil {
		return Memory{}, err
	}
	defer d.Close()
	base := heap()
	for i := range keys {
		ok, err := d.Allow(Key(i))
		if err != nil {
			return Memory{}, err
		}
		if !ok {
			return Memory{}, fmt.Errorf("bench: %s refused the first event of a new key (%d of %d)", impl.Name, i, keys)
		}
	}
	m := Memory{Keys: keys, Held: keys, Live: heap() - base, Len: -1}
	if impl.MaxKeys > 0 {
		m.Held = min(keys, impl.MaxKeys)
	}
	time.Sleep(wait)
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
