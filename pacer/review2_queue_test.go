package pacer

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ratepace/pace/internal/fakeclock"
)

// probeArmedPacer runs a client against a 20 s sliding log of 200 that
// sends no reset, shared with another calling 7.5 times a second, its
// window bounded at 47 s (as TestBurstReadsTheWindow), until the probe
// is armed; it returns the Pacer and its clock.
func probeArmedPacer(t *testing.T) (*Pacer, *fakeclock.Clock) {
	l := &logModel{limit: 200, window: 20 * time.Second}
	o := &others{next: ownT0.Add(-20 * time.Second), stop: ownT0.Add(time.Hour), gap: 133 * time.Millisecond}
	o.until(l, ownT0)
	c := fakeclock.New(ownT0)
	p := MustNew(WithClock(c), WithSeed(1))
	for i := 0; c.Now().Before(ownT0.Add(90 * time.Second)); i++ {
		c.Advance(p.Reserve() + 20*time.Millisecond)
		o.until(l, c.Now())
		p.Observe(l.signal(l.call(c.Now())))
		if i == 0 {
			p.mu.Lock()
			p.lw.bound = 47 * time.Second
			p.mu.Unlock()
		}
		p.mu.Lock()
		armed := p.probeArmed(c.Now())
		p.mu.Unlock()
		if armed {
			return p, c
		}
	}
	t.Fatal("the probe never armed")
	return nil, nil
}

// TestReviewProbeBurstWithWaiters: callers that queue in Wait while the
// probe is armed all get the burst's gap (zero), not only the burst's
// max(8, L/16) calls: gap gives it to every caller that queues before the
// burst's calls are booked (bookLocked counts them only as they go), and
// the barrier, checked at now, does not see the queued slots a second
// ahead. Sixty callers of a client that waits for one paced call a second
// ahead all go at that second: the count, 151 of 200 before, goes over
// the limit and the server refuses the calls beyond it. Without the
// probe, their slots are a gap apart.
func TestReviewProbeBurstWithWaiters(t *testing.T) {
	p, c := probeArmedPacer(t)
	p.mu.Lock()
	u, _ := p.predictedUsed(c.Now())
	k := probeSize(p.limit)
	// One caller already waits for a paced slot a second ahead (a
	// concurrent client's next call).
	p.last = c.Now().Add(time.Second)
	p.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	const waiters = 60
	for i := 0; i < waiters; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.Wait(ctx)
		}()
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		p.mu.Lock()
		n := p.queue.len()
		p.mu.Unlock()
		if n >= waiters || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	p.mu.Lock()
	n := p.queue.len()
	f := p.queue.first()
	same := 0
	for i := 0; i < n; i++ {
		if p.queue.slots.at(i).Sub(f) < 10*time.Millisecond {
			same++
		}
	}
	p.mu.Unlock()
	cancel()
	wg.Wait()
	t.Logf("count predicted %.0f of %.0f; queued %d callers, %d of them within 10 ms of the first slot (burst %d)", u, 200.0, n, same, k)
	if float64(same) > float64(k)+1 || u+float64(same) > 200 {
		t.Errorf("%d callers queued within 10 ms of each other while the probe was armed, on a count of %.0f of 200; want the burst's %d at most", same, u, k)
	}
}
