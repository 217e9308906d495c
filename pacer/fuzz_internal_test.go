package pacer

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/ratepace/pace/internal/fakeclock"
)

// fuzzSteps bounds the steps one input drives, so that each input costs
// about a millisecond and CI's ten seconds of fuzzing cover thousands.
const fuzzSteps = 64

// fuzzCounts and fuzzDurations are the values a server may send, the
// absurd ones included; a byte picks one, or stands for itself.
var (
	fuzzCounts    = []int64{0, -1, 1, 2, 20, 100, maxCount, maxCount + 1, math.MaxInt64, math.MinInt64}
	fuzzDurations = []time.Duration{0, -time.Second, 1, time.Millisecond, 999 * time.Millisecond, time.Second,
		time.Minute, maxDuration, maxDuration + 1, math.MaxInt64, math.MinInt64}
)

// fuzzInput reads bytes as the steps of a story; past the end it reads
// zeros.
type fuzzInput []byte

func (in *fuzzInput) byte() byte {
	if len(*in) == 0 {
		return 0
	}
	b := (*in)[0]
	*in = (*in)[1:]
	return b
}

func (in *fuzzInput) count() int64 {
	b := in.byte()
	if int(b) < len(fuzzCounts) {
		return fuzzCounts[b]
	}
	return int64(b - byte(len(fuzzCounts)))
}

// duration reads a value, then a unit.
func (in *fuzzInput) duration() time.Duration {
	b := in.byte()
	if int(b) < len(fuzzDurations) {
		return fuzzDurations[b]
	}
	units := []time.Duration{time.Millisecond, 100 * time.Millisecond, time.Second, time.Minute}
	return time.Duration(b) * units[in.byte()%4]
}

// FuzzObserve drives a Pacer on a fake clock through any sequence of
// clock moves (backwards too), responses (any Signal, however absurd) and
// bookings, and checks after each step that its state stays finite and
// sane, that no slot is booked before the end of a Retry-After it was
// told, and that no booking is further away than a day's Retry-After and
// the bookings before it imply.
func FuzzObserve(f *testing.F) {
	f.Add([]byte{})
	// A lone client of a 100/min limit, counted as it calls.
	f.Add([]byte{1, 0x0e, 5, 5, 0, 0, 6, 0, 0, 2, 0, 200, 2, 1, 0x0e, 5, 5, 0, 0, 6, 0, 0, 2, 2, 2})
	// A refusal with a Retry-After of a minute, then bookings.
	f.Add([]byte{1, 0x10, 0, 0, 0, 0, 0, 0, 6, 2, 0, 10, 2, 2, 2})
	// Absurd values everywhere: MaxInt64 counts, negative durations.
	f.Add([]byte{1, 0x1f, 8, 8, 8, 10, 9, 10, 10, 2, 0, 9, 2, 1, 0x1f, 9, 9, 9, 9, 10, 9, 9, 2})
	// A token bucket naming its next token, then the clock going back.
	f.Add([]byte{1, 0x0e, 4, 4, 3, 0, 3, 0, 0, 2, 0, 3, 1, 2, 0, 1, 2})
	f.Fuzz(func(t *testing.T, data []byte) {
		in := fuzzInput(data)
		t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		c := fakeclock.New(t0)
		p := MustNew(WithClock(c), WithSeed(1))
		var retryEnd time.Time // the end of the latest Retry-After told
		var booked []time.Time // the slots booked since the latest response
		var story []string
		for i := 0; i < fuzzSteps && len(in) > 0; i++ {
			switch in.byte() % 3 {
			case 0:
				d := in.duration()
				if d > 48*time.Hour || d < -48*time.Hour {
					d = 48 * time.Hour // a clock, unlike a server, is sane
				}
				if in.byte()%8 == 0 {
					d = -d
				}
				c.Advance(d)
				story = append(story, "advance "+d.String())
			case 1:
				flags := in.byte()
				s := Signal{
					HasUsed:      flags&1 != 0,
					HasRemaining: flags&2 != 0,
					HasReset:     flags&4 != 0,
					Throttled:    flags&16 != 0,
				}
				s.Limit = in.count()
				s.Used = in.count()
				s.Remaining = in.count()
				s.Window = in.duration()
				s.Reset = in.duration()
				if flags&8 != 0 {
					s.Reset = -s.Reset
				}
				s.RetryAfter = in.duration()
				story = append(story, fmt.Sprintf("observe %+v", s))
				now := p.now()
				p.Observe(s)
				booked = booked[:0]
				if ra := s.clean().RetryAfter; ra > 0 && now.Add(ra).After(retryEnd) {
					retryEnd = now.Add(ra)
				}
			case 2:
				now := p.now()
				p.mu.Lock()
				before := latest(now, latest(p.hold, p.lastSlot()))
				p.mu.Unlock()
				d := p.Reserve()
				story = append(story, "reserve = "+d.String())
				p.mu.Lock()
				// A day's reset, then a window; the plan of a small
				// fixed window (see sparse) may skip to the regular
				// call of a later window, at least one in ownBuckets.
				bound := maxDuration + p.window
				if p.sp.on {
					bound = max(bound, (ownBuckets+1)*p.window)
				}
				p.mu.Unlock()
				if d < 0 {
					t.Fatalf("Reserve() = %v < 0 after\n%v", d, story)
				}
				if slot := now.Add(d); slot.Before(retryEnd) {
					t.Fatalf("Reserve() = %v: slot %v before the Retry-After's end %v after\n%v", d, slot, retryEnd, story)
				}
				if far := now.Add(d).Sub(before); far > bound {
					t.Fatalf("Reserve() = %v: %v beyond the hold and the slots before after\n%v", d, far, story)
				}
				booked = append(booked, now.Add(d))
				p.mu.Lock()
				limit, window := p.limit, p.window
				p.mu.Unlock()
				// Booked blind, with no count back, the rate may
				// overshoot the limit a little; twice it is calls
				// collapsing onto one point.
				if n := mostWithin(booked, window); limit >= 1 && float64(n) > max(2*limit, limit+1) {
					t.Fatalf("%d of the %d slots booked since the latest response fall within a window of %v, of a limit of %v, after\n%v", n, len(booked), window, limit, story)
				}
			}
			checkSane(t, p, story)
		}
	})
}

// mostWithin returns the most of slots that fall within one span of w
// (half open).
func mostWithin(slots []time.Time, w time.Duration) int {
	most := 0
	for _, a := range slots {
		n := 0
		for _, b := range slots {
			if !b.Before(a) && b.Sub(a) < w {
				n++
			}
		}
		most = max(most, n)
	}
	return most
}

// checkSane fails t if p's state is not finite, positive where it must be,
// or its hold is further than a day's reset and the day-long window after.
func checkSane(t *testing.T, p *Pacer, story []string) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, v := range []struct {
		name string
		x    float64
	}{{"rate", p.rate}, {"others", p.others}, {"limit", p.limit}, {"used", p.used},
		{"othersUsed", p.othersUsed}, {"remaining", p.remaining}, {"joinOthers", p.joinOthers}} {
		if !finite(v.x) || v.x < 0 {
			t.Fatalf("%s = %v after\n%v", v.name, v.x, story)
		}
	}
	if p.limit > 0 && p.rate > p.limit/p.window.Seconds()*1.000001 {
		t.Fatalf("rate = %v above the limit %v per %v after\n%v", p.rate, p.limit, p.window, story)
	}
	if p.window <= 0 || p.window > maxDuration {
		t.Fatalf("window = %v after\n%v", p.window, story)
	}
	// A day's reset or Retry-After, then a point of the next window, a
	// day at most (see sparseWait), or jitter of at most a window.
	if h := p.hold.Sub(p.latest); h > 2*maxDuration {
		t.Fatalf("hold %v ahead after\n%v", h, story)
	}
}

// TestSparseEndDayAhead: a reset of a day on a window of a millisecond
// names an instant 86.4 million windows ahead. sparseEnd stepped back to
// the window holding now one window at a time, for seconds per decision
// (FuzzObserve's sparse-end-a-day-ahead); it must land on the same window
// as stepping would.
func TestSparseEndDayAhead(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := MustNew(WithSeed(1))
	p.window = time.Millisecond
	for _, ahead := range []time.Duration{1, time.Millisecond - 1, time.Millisecond, time.Millisecond + 1, 2 * time.Millisecond, maxDuration, maxDuration + 7} {
		p.lw.instant = t0.Add(ahead)
		want := p.lw.instant
		for want.Sub(t0) > p.window && ahead < time.Second {
			want = want.Add(-p.window)
		}
		got := p.sparseEnd(t0)
		if d := got.Sub(t0); d <= 0 || d > p.window || (ahead < time.Second && !got.Equal(want)) || (ahead-d)%p.window != 0 {
			t.Errorf("sparseEnd(now) with the instant %v ahead = now+%v; want now+%v, within a window after now", ahead, d, want.Sub(t0))
		}
	}
}

// TestHoleBelowOneCall: a count that leaves less than one call below the
// target of a limit of one is no hole to fill at twice the limit's pace
// (FuzzObserve booked three calls within one window of a limit of one).
func TestHoleBelowOneCall(t *testing.T) {
	c := fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	p := MustNew(WithClock(c), WithSeed(1))
	p.Observe(Signal{Limit: 38, Used: 38, HasUsed: true, Remaining: 38, Window: 48 * time.Millisecond, Reset: 48 * time.Millisecond, RetryAfter: 48 * time.Millisecond})
	p.Observe(Signal{Limit: 1, Used: 38, Remaining: 38, HasRemaining: true, Window: 213 * time.Millisecond, Reset: 48 * time.Millisecond, RetryAfter: 48 * time.Millisecond})
	var booked []time.Time
	for i := 0; i < 3; i++ {
		booked = append(booked, c.Now().Add(p.Reserve()))
		if i == 0 {
			c.Advance(200 * time.Millisecond)
		}
	}
	if n := mostWithin(booked, 213*time.Millisecond); n > 2 {
		t.Errorf("%d of %v within one window of 213ms of a limit of 1; want at most 2", n, booked)
	}
}
