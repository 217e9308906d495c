package fakeclock_test

import (
	"sync"
	"testing"
	"time"

	"github.com/ratepace/pace/internal/fakeclock"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestStandsStillUntilMoved(t *testing.T) {
	c := fakeclock.New(t0)
	if got := c.Now(); !got.Equal(t0) {
		t.Fatalf("Now() = %v; want %v", got, t0)
	}
	c.Advance(1500 * time.Millisecond)
	if got, want := c.Now(), t0.Add(1500*time.Millisecond); !got.Equal(want) {
		t.Fatalf("after Advance(1.5s): Now() = %v; want %v", got, want)
	}
	c.Advance(-2 * time.Second)
	if got := c.Elapsed(); got != -500*time.Millisecond {
		t.Fatalf("after Advance(-2s): Elapsed() = %v; want -500ms", got)
	}
	c.Set(t0.Add(time.Hour))
	if got := c.Elapsed(); got != time.Hour {
		t.Fatalf("after Set(t0+1h): Elapsed() = %v; want 1h", got)
	}
	if got, want := c.Step(time.Second), t0.Add(time.Hour+time.Second); !got.Equal(want) {
		t.Fatalf("Step(1s) = %v; want %v", got, want)
	}
	if got, want := c.Step(time.Second), t0.Add(time.Hour+2*time.Second); !got.Equal(want) || !c.Now().Equal(want) {
		t.Fatalf("second Step(1s) = %v, Now() = %v; want %v", got, c.Now(), want)
	}
}

// TestSetFarAway: Set takes times further from the start than a Duration
// reaches, such as the zero time.Time.
func TestSetFarAway(t *testing.T) {
	c := fakeclock.New(time.Time{})
	c.Set(t0)
	if got := c.Now(); !got.Equal(t0) {
		t.Fatalf("Now() = %v; want %v", got, t0)
	}
	c.Set(time.Time{})
	if got := c.Now(); !got.IsZero() {
		t.Fatalf("Now() = %v; want the zero time", got)
	}
}

func TestTimersFireWhenDue(t *testing.T) {
	c := fakeclock.New(t0)
	a, _ := c.After(2 * time.Second)
	b, _ := c.After(time.Second)
	s, stop := c.After(time.Second)
	stop()
	stop() // twice is harmless
	for range 3 {
		select {
		case <-c.Started():
		default:
			t.Fatal("Started did not report one of three timers")
		}
	}
	if at, ok := c.Next(); !ok || !at.Equal(t0.Add(time.Second)) {
		t.Fatalf("Next() = %v, %v; want %v, true", at, ok, t0.Add(time.Second))
	}
	c.Advance(999 * time.Millisecond)
	select {
	case <-a:
		t.Fatal("the 2s timer fired at +999ms")
	case <-b:
		t.Fatal("the 1s timer fired at +999ms")
	default:
	}
	c.Advance(time.Millisecond)
	if got := <-b; !got.Equal(t0.Add(time.Second)) {
		t.Fatalf("the 1s timer received %v; want %v", got, t0.Add(time.Second))
	}
	select {
	case <-a:
		t.Fatal("the 2s timer fired at +1s")
	case <-s:
		t.Fatal("a stopped timer fired")
	default:
	}
	c.Set(t0.Add(time.Minute))
	if got := <-a; !got.Equal(t0.Add(time.Minute)) {
		t.Fatalf("the 2s timer received %v; want %v (the time it was set to)", got, t0.Add(time.Minute))
	}
	if _, ok := c.Next(); ok {
		t.Fatal("Next() reports a timer after all fired or stopped")
	}
	if z, _ := c.After(0); len(z) != 1 {
		t.Fatal("After(0) did not fire at once")
	}
}

// TestStartedDropsRatherThanBlocks: a test that never reads Started does
// not block After.
func TestStartedDropsRatherThanBlocks(t *testing.T) {
	c := fakeclock.New(t0)
	for range 3000 {
		_, stop := c.After(time.Second)
		stop()
	}
	if n := len(c.Started()); n != 1024 {
		t.Fatalf("Started holds %d values; want 1024", n)
	}
}

// TestConcurrent: readers and writers race (run under -race); every
// reading is one of the times written, and no Advance is lost.
func TestConcurrent(t *testing.T) {
	c := fakeclock.New(t0)
	const writers, steps = 4, 1000
	var wg sync.WaitGroup
	for range writers {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for range steps {
				c.Advance(time.Millisecond)
			}
		}()
		go func() {
			defer wg.Done()
			last := t0
			for range steps {
				now := c.Now()
				if now.Before(last) || now.Sub(t0)%time.Millisecond != 0 {
					t.Errorf("Now() = +%v after +%v; want a later whole millisecond", now.Sub(t0), last.Sub(t0))
					return
				}
				last = now
				ch, stop := c.After(time.Millisecond)
				stop()
				select {
				case <-ch:
				default:
				}
			}
		}()
	}
	wg.Wait()
	if got, want := c.Elapsed(), writers*steps*time.Millisecond; got != want {
		t.Fatalf("Elapsed() = %v after %d Advance(1ms); want %v", got, writers*steps, want)
	}
}

// TestNoAllocations: reading and moving the clock allocate nothing, so that
// a test counting the allocations of the code under test counts only those.
func TestNoAllocations(t *testing.T) {
	c := fakeclock.New(t0)
	if n := testing.AllocsPerRun(100, func() {
		c.Advance(time.Second)
		c.Set(c.Now().Add(time.Second))
		c.Step(time.Second)
		_ = c.Elapsed()
		_ = c.Now()
	}); n != 0 {
		t.Fatalf("Now, Advance, Set, Step and Elapsed allocated %v times a run; want 0", n)
	}
}

// TestConcurrentSetsReadWhole: readers racing Sets to times near and far
// (the far ones change how the clock stores the time) read only times that
// were set, never a mix of two.
func TestConcurrentSetsReadWhole(t *testing.T) {
	times := []time.Time{t0, t0.Add(time.Hour), {}, t0.Add(time.Minute), t0.Add(2 * time.Hour), t0.AddDate(500, 0, 0), t0.AddDate(500, 0, 1)}
	c := fakeclock.New(times[0])
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				now, ok := c.Now(), false
				for _, x := range times {
					ok = ok || now == x
				}
				if !ok {
					t.Errorf("Now() = %v; want one of the times set %v", now, times)
					return
				}
			}
		}()
	}
	for i := range 100000 {
		c.Set(times[i%len(times)])
	}
	close(done)
	wg.Wait()
}

// TestKeepsTheTimeGiven: Now returns the time given to New or Set as it
// was, monotonic reading and location included.
func TestKeepsTheTimeGiven(t *testing.T) {
	wall := time.Now()
	c := fakeclock.New(t0)
	c.Set(wall)
	if got := c.Now(); got != wall {
		t.Fatalf("after Set(time.Now()): Now() = %#v; want %#v", got, wall)
	}
	c.Advance(time.Second)
	if got := c.Now(); got != wall.Add(time.Second) {
		t.Fatalf("after Advance(1s): Now() = %#v; want %#v", got, wall.Add(time.Second))
	}
	local := t0.In(time.FixedZone("x", 3600))
	c.Set(local)
	if got := c.Now(); got != local {
		t.Fatalf("after Set in another location: Now() = %v; want %v", got, local)
	}
}

// TestAdvanceRacingAfterFires: an Advance racing an After fires the timer
// if the Advance makes it due, whichever reads the time first.
func TestAdvanceRacingAfterFires(t *testing.T) {
	for i := range 5000 {
		c := fakeclock.New(t0)
		var ch <-chan time.Time
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); ch, _ = c.After(time.Nanosecond) }()
		go func() { defer wg.Done(); c.Advance(time.Second) }()
		wg.Wait()
		select {
		case <-ch: // After came first
		default: // Advance came first: the timer is due a nanosecond later
			if at, ok := c.Next(); !ok || !at.After(c.Now()) {
				t.Fatalf("round %d: a timer at +%v (pending: %v) has not fired at +%v", i, at.Sub(t0), ok, c.Elapsed())
			}
		}
	}
}
