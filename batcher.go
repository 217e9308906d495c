package pace

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ratepace/pace/driver"
)

// batcher gathers the decisions of a Shared into round trips to its store,
// at most max in flight at once. A decision that finds a round trip free
// goes at once, alone, in its caller's goroutine and with its caller's
// context: no one else waits on that round trip. The others queue, and the
// queue goes whole as the next round trip as soon as one ends (while round
// trips are free the queue is empty, so no decision waits while one is).
//
// A round trip of queued decisions runs in a goroutine of its own (the one
// of the round trip before it, when that was one too), with a context
// detached from its callers' and cancelled once every one of them has given
// up: a caller whose context ends returns at once, and its departure cuts
// short no store call that others wait on (one cut short after the store
// took would leave their debits spent without their decisions). A queued
// decision whose context ends leaves the queue at once.
type batcher struct {
	mu       sync.Mutex
	inflight int     // round trips in flight; guarded by mu
	carried  int     // decisions in flight; guarded by mu
	queue    []*call // decisions waiting for a round trip; guarded by mu
	max      int
	// trip makes the round trip of b with ctx and delivers a result to
	// every call of b that is still waiting.
	trip func(ctx context.Context, b *batch)
}

// call is one decision on its way to the store.
type call struct {
	ctx   context.Context
	key   string
	h     uint64
	n     int // the units reserved
	state atomic.Int32
	wake  chan struct{} // a result was delivered
	fl    *flight       // the round trip carrying it, once launched from the queue; guarded by batcher.mu
	dec   decision
	err   error
	// panicked is what the store panicked with in the round trip, to go
	// on in this caller.
	panicked any
}

// Call states. A call that leads its own round trip is alone, and owns its
// result. A queued call is waiting until its round trip resolves it, unless
// its caller abandons it first (its context ended): whoever moves it out of
// waiting owns what happens next.
const (
	alone int32 = iota
	waiting
	resolved
	abandoned
)

// batch is the decisions of one round trip, with their buffers.
type batch struct {
	calls    []*call
	keys     []string
	out      []driver.Grant
	shapes   [driver.MaxShapes]driver.Shape // the shapes of a size other than 1
	launched int                            // decisions launched with it, for the accounting of its end
}

// flight is the context of a round trip of queued decisions: detached
// from its callers', and cancelled (with errCallersGone) once the last of
// them has given up. It is not pooled: a caller that gave up may still
// count itself out of it after the round trip ended.
type flight struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	live   atomic.Int32 // callers neither answered nor gone
}

// errCallersGone is the cause of a flight cancelled because every caller
// it carried gave up.
var errCallersGone = errors.New("pace: shared decision: every caller of the round trip gave up")

var (
	callPool  = sync.Pool{New: func() any { return &call{wake: make(chan struct{}, 1)} }}
	batchPool = sync.Pool{New: func() any { return new(batch) }}
)

// do decides c: in a round trip of its own at once when one is free, else
// in the next one to go, unless c.ctx ends first. It takes c (and returns
// it to the pool). A store that panics in c's own round trip panics here;
// one that panics in a shared round trip panics in one of its callers, and
// the others get errStorePanicked.
func (q *batcher) do(c *call) (decision, error) {
	q.mu.Lock()
	if q.inflight < q.max {
		// Every round trip free finds the queue empty: the end of a round
		// trip takes the whole queue.
		q.inflight++
		q.carried++
		q.mu.Unlock()
		c.state.Store(alone)
		b := batchPool.Get().(*batch)
		b.calls, b.launched = append(b.calls[:0], c), 1
		q.lead(c.ctx, b)
		dec, err := c.dec, c.err
		c.recycle()
		return dec, err
	}
	c.state.Store(waiting)
	c.fl = nil
	q.queue = append(q.queue, c)
	q.mu.Unlock()
	select {
	case <-c.wake:
	case <-c.ctx.Done():
		if c.state.CompareAndSwap(waiting, abandoned) {
			err := fmt.Errorf("pace: shared decision: %w", c.ctx.Err())
			q.abandon(c)
			return decision{}, err
		}
		<-c.wake // resolved just now: the result is on its way
	}
	dec, err, v := c.dec, c.err, c.panicked
	c.panicked = nil
	c.recycle()
	if v != nil {
		panic(v)
	}
	return dec, err
}

// abandon takes c, whose caller gave up, out of the queue, or counts it out
// of the round trip carrying it (which then drops its result). In the
// queue, c is no one's any more and goes back to the pool; in a round trip,
// the round trip holds it, and it never does.
func (q *batcher) abandon(c *call) {
	q.mu.Lock()
	if fl := c.fl; fl != nil {
		q.mu.Unlock()
		if fl.live.Add(-1) == 0 {
			fl.cancel(errCallersGone)
		}
		return
	}
	for i, qc := range q.queue {
		if qc == c {
			n := copy(q.queue[i:], q.queue[i+1:])
			q.queue[i+n] = nil
			q.queue = q.queue[:i+n]
			break
		}
	}
	q.mu.Unlock()
	c.recycle()
}

// recycle returns c to the pool.
func (c *call) recycle() {
	c.ctx, c.key, c.fl, c.dec, c.err = nil, "", nil, decision{}, nil
	callPool.Put(c)
}

// lead makes the round trip of b, a lone decision's, in its caller's
// goroutine: a panic of the store goes on in that caller, once the round
// trip's accounting has ended and the queue has gone on.
func (q *batcher) lead(ctx context.Context, b *batch) {
	ended := false
	defer func() {
		if !ended {
			q.launch(q.done(b))
		}
	}()
	q.trip(ctx, b)
	ended = true
	q.launch(q.done(b))
}

// launch starts the round trip of b, of queued decisions, in a goroutine of
// its own; it does nothing when b is nil.
func (q *batcher) launch(b *batch, fl *flight) {
	if b != nil {
		go q.fly(b, fl)
	}
}

// fly makes the round trip of b, and the next ones the queue makes, until
// the queue is empty at the end of one.
func (q *batcher) fly(b *batch, fl *flight) {
	for b != nil {
		b, fl = q.flyOnce(b, fl)
	}
}

// flyOnce makes the round trip of b and returns the next one, if the queue
// made one. Should the store panic (or end the goroutine), one waiting
// caller gets the panic to go on in its own goroutine, the others
// errStorePanicked, and the queue goes on in a goroutine of its own.
func (q *batcher) flyOnce(b *batch, fl *flight) (*batch, *flight) {
	ended := false
	defer func() {
		if ended {
			return
		}
		v := recover() // nil after runtime.Goexit: then every caller gets the error
		for _, c := range b.calls {
			if c.state.CompareAndSwap(waiting, resolved) {
				c.panicked, v = v, nil
				if c.panicked == nil {
					c.err = errStorePanicked
				}
				c.wake <- struct{}{}
			}
		}
		fl.cancel(nil)
		q.launch(q.done(b))
	}()
	q.trip(fl.ctx, b)
	ended = true
	fl.cancel(nil)
	return q.done(b)
}

// errStorePanicked ends the decisions that shared a round trip whose store
// call panicked; the panic itself goes on in one of them.
var errStorePanicked = errors.New("pace: shared decision: the store panicked in the round trip")

// done ends the round trip of b: it recycles b and, when decisions queued
// meanwhile, takes the whole queue as the next round trip in b's place.
func (q *batcher) done(b *batch) (*batch, *flight) {
	launched := b.launched
	clear(b.calls[:cap(b.calls)])
	b.calls = b.calls[:0]
	batchPool.Put(b)
	q.mu.Lock()
	defer q.mu.Unlock()
	q.inflight--
	q.carried -= launched
	if len(q.queue) == 0 {
		return nil, nil
	}
	nb := batchPool.Get().(*batch)
	nb.calls, q.queue = q.queue, nb.calls[:0]
	nb.launched = len(nb.calls)
	// The first caller's values (a trace, say) go with the round trip; its
	// cancellation does not.
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(nb.calls[0].ctx))
	fl := &flight{ctx: ctx, cancel: cancel}
	fl.live.Store(int32(len(nb.calls)))
	for _, c := range nb.calls {
		c.fl = fl
	}
	q.inflight++
	q.carried += nb.launched
	return nb, fl
}

// deliver gives c its result, and wakes its caller unless c is alone in its
// round trip (its caller is the one delivering). A call abandoned meanwhile
// gets nothing.
func (c *call) deliver(dec decision, err error) {
	if c.state.Load() == alone {
		c.dec, c.err = dec, err
		return
	}
	if !c.state.CompareAndSwap(waiting, resolved) {
		return
	}
	c.dec, c.err = dec, err
	c.fl.live.Add(-1)
	c.wake <- struct{}{}
}

// gone reports whether c's caller gave up before its result.
func (c *call) gone() bool { return c.state.Load() == abandoned }
