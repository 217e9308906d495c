package pacersim

import (
	"net/http"
	"testing"
	"time"
)

type step struct {
	at       time.Duration
	accepted bool
	used     int
	reset    time.Duration
	retry    time.Duration // on refusals
}

func runSteps(t *testing.T, a Algorithm, limit int, steps []step) {
	t.Helper()
	for i, s := range steps {
		d := a.Decide(s.at, limit)
		if d.Accepted != s.accepted || d.Used != s.used || d.Reset != s.reset || (!d.Accepted && d.RetryAfter != s.retry) {
			t.Fatalf("step %d at %v: accepted %v used %d reset %v retry %v; want %v %d %v %v",
				i, s.at, d.Accepted, d.Used, d.Reset, d.RetryAfter, s.accepted, s.used, s.reset, s.retry)
		}
		if d.Remaining != max(0, limit-d.Used) {
			t.Fatalf("step %d: remaining %d with used %d of %d", i, d.Remaining, d.Used, limit)
		}
	}
}

const ms = time.Millisecond

func TestFixedWindowClock(t *testing.T) {
	runSteps(t, &FixedWindow{Window: time.Second}, 2, []step{
		{100 * ms, true, 1, 900 * ms, 0},
		{200 * ms, true, 2, 800 * ms, 0},
		{300 * ms, false, 2, 700 * ms, 700 * ms}, // refused: not counted
		{1000 * ms, true, 1, time.Second, 0},     // a new window at the boundary
	})
}

func TestFixedWindowFirstCallCountingRefused(t *testing.T) {
	runSteps(t, &FixedWindow{Window: time.Second, FirstCall: true, CountRefused: true}, 2, []step{
		{300 * ms, true, 1, time.Second, 0},
		{400 * ms, true, 2, 900 * ms, 0},
		{500 * ms, false, 3, 800 * ms, 800 * ms}, // counted: increment, then compare
		{1200 * ms, false, 4, 100 * ms, 100 * ms},
		{1300 * ms, true, 1, time.Second, 0}, // the window began with the first call
	})
}

func TestSlidingLogCountingRefused(t *testing.T) {
	runSteps(t, &Server{Window: time.Second, CountRefused: true}, 2, []step{
		{0, true, 1, time.Second, 0},
		{500 * ms, true, 2, 500 * ms, 0},
		{600 * ms, false, 3, 400 * ms, time.Second}, // whole seconds until the 2nd call leaves
		{1100 * ms, false, 3, 400 * ms, time.Second},
		{2200 * ms, true, 1, time.Second, 0},
	})
}

func TestSlidingCounter(t *testing.T) {
	s := &SlidingCounter{Window: time.Second}
	runSteps(t, s, 4, []step{
		{0, true, 1, time.Second, 0},
		{100 * ms, true, 2, 900 * ms, 0},
		{200 * ms, true, 3, 800 * ms, 0},
		{300 * ms, true, 4, 700 * ms, 0},
		// In the next window the previous 4 weigh 4·(1 − 0.5) = 2 at 1.5 s.
		{1500 * ms, true, 3, 500 * ms, 0},
		{1500 * ms, true, 4, 500 * ms, 0},
		// Full: 4·(1 − e) + 2 ≤ 3 needs e ≥ 0.75, i.e. at 1.75 s.
		{1500 * ms, false, 4, 500 * ms, 250 * ms},
		{1750 * ms, true, 4, 250 * ms, 0},
	})
}

func TestTokenBucket(t *testing.T) {
	b := &TokenBucket{Window: time.Second}
	// 4 tokens, one back every 250 ms; full at the start.
	runSteps(t, b, 4, []step{
		{0, true, 1, 250 * ms, 0},
		{0, true, 2, 500 * ms, 0},
		{0, true, 3, 750 * ms, 0},
		{0, true, 4, time.Second, 0},
		{100 * ms, false, 4, 900 * ms, 150 * ms},
		{250 * ms, true, 4, time.Second, 0},
	})
	n := &TokenBucket{Window: time.Second, ResetNext: true}
	runSteps(t, n, 4, []step{
		{0, true, 1, 250 * ms, 0},
		{100 * ms, true, 2, 150 * ms, 0}, // 2.4 tokens left, the next back in 150 ms
	})
}

func TestFormats(t *testing.T) {
	now := epoch.Add(90 * time.Minute)
	refused := Decision{Limit: 10, Used: 10, Remaining: 0, Reset: 1500 * ms, RetryAfter: 1200 * ms}
	for _, tt := range []struct {
		f      Format
		field  string
		want   string
		retry  string
		notBef time.Duration // for a response received at 90 min
	}{
		{Format{Reset: ResetDelta}, "X-RateLimit-Reset", "2", "2", 90*time.Minute + 2*time.Second},
		{Format{Reset: ResetEpoch}, "X-RateLimit-Reset", "1767231001", "2", 90*time.Minute + 2*time.Second},
		{Format{Reset: ResetEpochMillis}, "X-RateLimit-Reset", "1767231001500", "2", 90*time.Minute + 2*time.Second},
		{Format{Reset: ResetDateGMT, Retry: RetryDateGMT}, "X-RateLimit-Reset", "Thu, 01 Jan 2026 01:30:01 GMT", "Thu, 01 Jan 2026 01:30:01 GMT", 90*time.Minute + time.Second},
		{Format{Reset: ResetDateUTC, Retry: RetryDateUTC}, "X-RateLimit-Reset", "Thu, 01 Jan 2026 01:30:01 UTC", "Thu, 01 Jan 2026 01:30:01 UTC", 90*time.Minute + time.Second},
		{Format{Reset: ResetRFC850}, "X-RateLimit-Reset", "Thursday, 01-Jan-26 01:30:01 GMT", "2", 90*time.Minute + 2*time.Second},
		{Format{Reset: ResetAsctime, Retry: NoRetry}, "X-RateLimit-Reset", "Thu Jan  1 01:30:01 2026", "", 0},
		{Format{Fields: IETF}, "RateLimit", `"default";r=0;t=2`, "2", 90*time.Minute + 2*time.Second},
		{Format{Fields: IETF}, "RateLimit-Policy", `"default";q=10;w=3`, "2", 90*time.Minute + 2*time.Second},
		{Format{Fields: RetryOnly}, "X-RateLimit-Limit", "", "2", 90*time.Minute + 2*time.Second},
		{Format{Reset: NoReset}, "X-RateLimit-Reset", "", "2", 90*time.Minute + 2*time.Second},
	} {
		status, h, ra := tt.f.Render(refused, 3*time.Second, now)
		if status != http.StatusTooManyRequests || h.Get(tt.field) != tt.want || h.Get("Retry-After") != tt.retry {
			t.Errorf("%v: %d %s: %q, Retry-After %q; want 429, %q, %q", tt.f, status, tt.field, h.Get(tt.field), h.Get("Retry-After"), tt.want, tt.retry)
		}
		if got := ra.from(90 * time.Minute); tt.retry != "" && got != tt.notBef {
			t.Errorf("%v: Retry-After lets the client call at %v; want %v", tt.f, got, tt.notBef)
		}
	}
}
