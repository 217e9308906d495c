package pacer

import (
	"testing"
	"time"

	"github.com/ratepace/pace/internal/fakeclock"
)

// nextToken is a token bucket of limit tokens refilled at limit per
// window, full at the start, whose reset names the next token: the
// time until it holds one token more than now (never more than
// window/limit). A refused call takes no token.
type nextToken struct {
	limit  int64
	window time.Duration
	tokens float64   // at at
	at     time.Time // of the latest call
}

func (b *nextToken) call(now time.Time) Signal {
	refill := float64(b.limit) / b.window.Seconds()
	b.tokens = min(float64(b.limit), b.tokens+refill*now.Sub(b.at).Seconds())
	b.at = now
	s := Signal{Limit: b.limit, HasRemaining: true}
	if b.tokens >= 1 {
		b.tokens--
	} else {
		s.Throttled = true
		s.RetryAfter = time.Duration((1 - b.tokens) / refill * float64(time.Second))
	}
	s.Remaining = int64(b.tokens)
	if b.tokens < float64(b.limit) {
		frac := b.tokens - float64(int64(b.tokens))
		s.Reset = time.Duration((1 - frac) / refill * float64(time.Second))
	}
	return s
}

// TestNextTokenBucketBarrierIsShort: four clients of a bucket of 300
// refilled over 30 s whose reset names the next token (a tenth of a
// second at most, so that nothing reads the window and they keep the
// default minute). The count is the tokens missing, not the calls of a
// window: a minute in, each client's own calls of the first minute leave
// its record while the count stays at the limit, the reconstruction reads
// them as the others' calls, and the barrier parked clients for the
// maximum delay, half the default minute, while another took their
// share. On a server whose resets all read under half a second, the
// barrier waits at most a sixth of the window.
func TestNextTokenBucketBarrierIsShort(t *testing.T) {
	const clients = 4
	b := &nextToken{limit: 300, window: 30 * time.Second, tokens: 300, at: ownT0}
	type client struct {
		c      *fakeclock.Clock
		p      *Pacer
		at     time.Time // of its next event
		booked bool      // whether that event is the call it was handed a slot for
	}
	var cs [clients]*client
	for i := range cs {
		c := fakeclock.New(ownT0)
		at := ownT0.Add(time.Duration(i) * 100 * time.Millisecond)
		cs[i] = &client{c: c, p: New(WithClock(c), WithSeed(uint64(i+1))), at: at}
	}
	end := ownT0.Add(150 * time.Second)
	var longest time.Duration
	for {
		k := 0
		for i := range cs {
			if cs[i].at.Before(cs[k].at) {
				k = i
			}
		}
		cl := cs[k]
		if !cl.at.Before(end) {
			break
		}
		if !cl.booked {
			cl.c.Set(cl.at)
			d := cl.p.Reserve()
			if cl.at.After(ownT0.Add(5 * time.Second)) {
				longest = max(longest, d)
			}
			cl.at, cl.booked = cl.at.Add(d), true
			continue
		}
		s := b.call(cl.at)
		cl.at, cl.booked = cl.at.Add(20*time.Millisecond), false
		cl.c.Set(cl.at)
		cl.p.Observe(s)
	}
	if longest > 10*time.Second {
		t.Errorf("longest wait for a slot on a bucket naming its next token = %v; want at most 10s (a sixth of the default minute)", longest)
	}
}
