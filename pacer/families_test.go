package pacer_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/ratepace/pace/pacer"
)

var famNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func header(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// TestOpenAIHeaders reads OpenAI's headers as its documentation and
// responses write them: counts per limit, resets as Go durations.
func TestOpenAIHeaders(t *testing.T) {
	// A response of the chat completions API, as quoted in OpenAI's
	// community forum: 1 request and 24 tokens spent of a minute's limits.
	h := header(
		"x-ratelimit-limit-requests", "5000",
		"x-ratelimit-limit-tokens", "160000",
		"x-ratelimit-remaining-requests", "4999",
		"x-ratelimit-remaining-tokens", "159976",
		"x-ratelimit-reset-requests", "12ms",
		"x-ratelimit-reset-tokens", "9ms",
	)
	got := pacer.ParseLimits(h, famNow)
	want := []pacer.Signal{
		{Limit: 5000, Remaining: 4999, HasRemaining: true, Reset: 12 * time.Millisecond, HasReset: true, Name: "requests", Unit: pacer.Requests},
		{Limit: 160000, Remaining: 159976, HasRemaining: true, Reset: 9 * time.Millisecond, HasReset: true, Name: "tokens", Unit: pacer.Tokens},
	}
	if len(got) != len(want) {
		t.Fatalf("ParseLimits = %+v; want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("ParseLimits[%d] = %+v; want %+v", i, got[i], want[i])
		}
	}
	if s := pacer.ParseHeader(h, famNow); s != want[0] {
		t.Errorf("ParseHeader = %+v; want the first limit, %+v", s, want[0])
	}
	// The resets of the documentation's table, and other Go durations.
	for _, tt := range []struct {
		reset string
		want  time.Duration
	}{
		{"1s", time.Second},
		{"6m0s", 6 * time.Minute},
		{"12ms", 12 * time.Millisecond},
		{"1m30.5s", 90*time.Second + 500*time.Millisecond},
		{"0s", 0},
		{"-1s", 0},
		{"soon", 0},
		{"48h", 24 * time.Hour}, // clamped
	} {
		s := pacer.ParseHeader(header("x-ratelimit-limit-tokens", "10", "x-ratelimit-reset-tokens", tt.reset), famNow)
		if s.Reset != tt.want || !s.HasReset {
			t.Errorf("x-ratelimit-reset-tokens: %s gives Reset %v, HasReset %v; want %v, true", tt.reset, s.Reset, s.HasReset, tt.want)
		}
	}
}

// TestAnthropicHeaders reads Anthropic's headers as its documentation
// writes them: a limit, a remaining count and an RFC 3339 reset for
// requests, tokens, input tokens and output tokens.
func TestAnthropicHeaders(t *testing.T) {
	h := header(
		"anthropic-ratelimit-requests-limit", "50",
		"anthropic-ratelimit-requests-remaining", "49",
		"anthropic-ratelimit-requests-reset", "2026-03-01T12:00:01Z",
		"anthropic-ratelimit-tokens-limit", "48000",
		"anthropic-ratelimit-tokens-remaining", "46000",
		"anthropic-ratelimit-tokens-reset", "2026-03-01T12:00:03.5Z",
		"anthropic-ratelimit-input-tokens-limit", "40000",
		"anthropic-ratelimit-input-tokens-remaining", "39000",
		"anthropic-ratelimit-input-tokens-reset", "2026-03-01T13:00:02+01:00",
		"anthropic-ratelimit-output-tokens-limit", "8000",
		"anthropic-ratelimit-output-tokens-remaining", "7000",
		"anthropic-ratelimit-output-tokens-reset", "2026-03-01T11:59:59Z", // past: no reset
		"retry-after", "7",
	)
	got := pacer.ParseLimits(h, famNow)
	want := []pacer.Signal{
		{Limit: 50, Remaining: 49, HasRemaining: true, Reset: time.Second, HasReset: true, Name: "requests", Unit: pacer.Requests},
		{Limit: 48000, Remaining: 46000, HasRemaining: true, Reset: 3500 * time.Millisecond, HasReset: true, Name: "tokens", Unit: pacer.Tokens},
		{Limit: 40000, Remaining: 39000, HasRemaining: true, Reset: 2 * time.Second, HasReset: true, Name: "input-tokens", Unit: pacer.InputTokens},
		{Limit: 8000, Remaining: 7000, HasRemaining: true, HasReset: true, Name: "output-tokens", Unit: pacer.OutputTokens},
	}
	if len(got) != len(want) {
		t.Fatalf("ParseLimits = %+v; want %d limits", got, len(want))
	}
	for i := range want {
		want[i].RetryAfter = 7 * time.Second
		if got[i].Name != want[i].Name || got[i].Unit != want[i].Unit || got[i].Limit != want[i].Limit ||
			got[i].Remaining != want[i].Remaining || got[i].HasRemaining != want[i].HasRemaining ||
			got[i].Reset != want[i].Reset || got[i].HasReset != want[i].HasReset || got[i].RetryAfter != want[i].RetryAfter {
			t.Errorf("ParseLimits[%d] = %+v; want %+v", i, got[i], want[i])
		}
	}
	if u := pacer.OutputTokens.String(); u != "output-tokens" {
		t.Errorf("OutputTokens.String() = %q", u)
	}
}

// TestRetryAfterMs reads retry-after-ms, fractions allowed, in place of
// Retry-After; a malformed one leaves Retry-After's wait.
func TestRetryAfterMs(t *testing.T) {
	for _, tt := range []struct {
		ms, ra string
		want   time.Duration
	}{
		{"1500", "2", 1500 * time.Millisecond},
		{"20.5", "", 20500 * time.Microsecond},
		{"0", "1", 0},
		{"-5", "1", time.Second},
		{"NaN", "1", time.Second},
		{"soon", "", 0},
		{"1e12", "", 24 * time.Hour},
	} {
		h := header("retry-after-ms", tt.ms)
		if tt.ra != "" {
			h.Set("Retry-After", tt.ra)
		}
		if got := pacer.ParseHeader(h, famNow).RetryAfter; got != tt.want {
			t.Errorf("retry-after-ms %q, Retry-After %q: RetryAfter %v; want %v", tt.ms, tt.ra, got, tt.want)
		}
	}
}

// TestGitHubHeaders reads GitHub's primary limit headers (a Unix epoch
// reset and the resource) and its refusals: a 403 or 429 with
// Retry-After for a secondary limit, a 403 with no quota left until the
// reset.
func TestGitHubHeaders(t *testing.T) {
	reset := famNow.Add(30 * time.Minute).Unix()
	h := header(
		"x-ratelimit-limit", "5000",
		"x-ratelimit-remaining", "4999",
		"x-ratelimit-used", "1",
		"x-ratelimit-reset", itoa(reset),
		"x-ratelimit-resource", "core",
	)
	s := pacer.ParseHeader(h, famNow)
	if s.Limit != 5000 || s.Remaining != 4999 || s.Used != 1 || s.Reset != 30*time.Minute || s.Resource != "core" {
		t.Errorf("ParseHeader = %+v; want 5000 / 4999 / 1 used, reset in 30m, resource core", s)
	}
	for _, tt := range []struct {
		name      string
		status    int
		header    http.Header
		throttled bool
		wait      time.Duration
	}{
		{"secondary 403 with Retry-After", 403, header("retry-after", "60", "x-ratelimit-remaining", "4000"), true, time.Minute},
		{"secondary 429 with Retry-After", 429, header("retry-after", "60"), true, time.Minute},
		{"primary 403, nothing left", 403, header("x-ratelimit-remaining", "0", "x-ratelimit-reset", itoa(reset)), true, 30 * time.Minute},
		{"403 for another reason", 403, header("x-ratelimit-remaining", "10"), false, 0},
	} {
		s := pacer.FromResponse(&http.Response{StatusCode: tt.status, Header: tt.header}, famNow)
		if s.Throttled != tt.throttled || s.RetryAfter != tt.wait {
			t.Errorf("%s: Throttled %v, RetryAfter %v; want %v, %v", tt.name, s.Throttled, s.RetryAfter, tt.throttled, tt.wait)
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestSecondaryLimitHonoured pins that a secondary limit's refusal holds
// every call until its Retry-After.
func TestSecondaryLimitHonoured(t *testing.T) {
	c := newFakeClock(famNow)
	p := pacer.MustNew(pacer.WithClock(c), pacer.WithSeed(1))
	p.Observe(pacer.ParseHeader(header("x-ratelimit-limit", "5000", "x-ratelimit-remaining", "4000", "x-ratelimit-resource", "core"), c.Now()))
	p.Reserve()
	p.Observe(pacer.FromResponse(&http.Response{StatusCode: 403, Header: header("retry-after", "60", "x-ratelimit-resource", "core")}, c.Now()))
	for i := 0; i < 5; i++ {
		if d := p.Reserve(); d < time.Minute {
			t.Fatalf("call %d after a 403 with Retry-After: 60 goes in %v; want a minute at least", i, d)
		}
	}
}

// TestResourceKept pins that a Pacer learns the counts of one resource: a
// response of another (GitHub's search, beside core) does not move its
// plan, but its Retry-After still holds.
func TestResourceKept(t *testing.T) {
	c := newFakeClock(famNow)
	p := pacer.MustNew(pacer.WithClock(c), pacer.WithSeed(1), pacer.WithWindow(time.Hour))
	core := header("x-ratelimit-limit", "5000", "x-ratelimit-remaining", "4990", "x-ratelimit-resource", "core")
	p.Observe(pacer.ParseHeader(core, c.Now()))
	search := header("x-ratelimit-limit", "30", "x-ratelimit-remaining", "0", "x-ratelimit-used", "30",
		"x-ratelimit-reset", itoa(famNow.Add(time.Minute).Unix()), "x-ratelimit-resource", "search")
	for i := 0; i < 3; i++ {
		c.Advance(time.Second)
		p.Reserve()
		p.Observe(pacer.ParseHeader(search, c.Now()))
	}
	if d := p.Reserve(); d > 10*time.Second {
		t.Fatalf("after search's spent counts, the core Pacer waits %v; want its own pace (seconds at most)", d)
	}
	p.Observe(pacer.FromResponse(&http.Response{StatusCode: 429, Header: header("retry-after", "120", "x-ratelimit-resource", "search")}, c.Now()))
	if d := p.Reserve(); d < 2*time.Minute {
		t.Fatalf("after another resource's Retry-After: 120, the next call goes in %v; want 2m at least", d)
	}
}

// TestSeveralLimitsBind pins that a Pacer of two limits paces on the one
// that binds: a call of many tokens waits for the token limit, while the
// request limit has room, and one of no tokens does not.
func TestSeveralLimitsBind(t *testing.T) {
	c := newFakeClock(famNow)
	p := pacer.MustNew(pacer.WithClock(c), pacer.WithSeed(1))
	report := func(tokensLeft int64) []pacer.Signal {
		return []pacer.Signal{
			{Name: "requests", Unit: pacer.Requests, Limit: 500, Remaining: 480, HasRemaining: true},
			{Name: "tokens", Unit: pacer.Tokens, Limit: 30000, Remaining: tokensLeft, HasRemaining: true},
		}
	}
	r := p.ReserveN(c.Now(), 100)
	r.Settle(c.Now(), report(500), -1)
	if d := p.ReserveN(c.Now(), 4000).Delay(); d <= 0 {
		t.Errorf("a call of 4000 tokens with 500 left goes in %v; want a wait", d)
	}
	q := pacer.MustNew(pacer.WithClock(c), pacer.WithSeed(1))
	q.ReserveN(c.Now(), 100).Settle(c.Now(), report(500), 100)
	if d := q.ReserveN(c.Now(), 0).Delay(); d > time.Second {
		t.Errorf("a call of no tokens with the request limit far from spent waits %v; want about none", d)
	}
	var zero pacer.Reservation
	zero.Settle(c.Now(), report(0), 5) // harmless
	if zero.Delay() != 0 {
		t.Errorf("the zero Reservation's Delay = %v; want 0", zero.Delay())
	}
}

// checkLimits asserts what every parsed limit must satisfy.
func checkLimits(t *testing.T, ls []pacer.Signal) {
	t.Helper()
	if len(ls) == 0 {
		t.Fatal("ParseLimits returned no Signal")
	}
	names := map[string]bool{}
	for i, s := range ls {
		if s.Reset < 0 || s.Reset > 24*time.Hour || s.RetryAfter < 0 || s.RetryAfter > 24*time.Hour || s.Window < 0 {
			t.Fatalf("limit %d: a duration out of [0, 24h]: %+v", i, s)
		}
		if s.Limit < 0 || s.Remaining < 0 || s.Used < 0 {
			t.Fatalf("limit %d: a negative count: %+v", i, s)
		}
		if s.HasRemaining && s.Limit > 0 && s.Remaining > s.Limit {
			t.Fatalf("limit %d: remaining above the limit: %+v", i, s)
		}
		if s.Name != "" && (names[s.Name] || s.Unit.String() != s.Name) {
			t.Fatalf("limit %d: name %q repeated, or not its unit's (%v)", i, s.Name, s.Unit)
		}
		names[s.Name] = true
	}
}

// observeAll feeds ls to a fresh Pacer and books calls: nothing may
// panic, and no delay is negative.
func observeAll(t *testing.T, ls []pacer.Signal, tokens int) {
	t.Helper()
	c := newFakeClock(famNow)
	p := pacer.MustNew(pacer.WithClock(c), pacer.WithSeed(1))
	for i := 0; i < 3; i++ {
		r := p.ReserveN(c.Now(), tokens)
		if r.Delay() < 0 {
			t.Fatalf("ReserveN delay %v < 0", r.Delay())
		}
		c.Advance(r.Delay() + time.Millisecond)
		r.Settle(c.Now(), ls, tokens/2)
	}
}

// FuzzOpenAIHeaders feeds OpenAI's headers any values: ParseLimits never
// panics, no duration is negative or absurd, remaining never exceeds a
// known limit, and a Pacer takes the result in without trouble.
func FuzzOpenAIHeaders(f *testing.F) {
	f.Add("5000", "4999", "12ms", "160000", "159976", "9ms", "", 2000)         // the documented example
	f.Add("500", "0", "6m0s", "30000", "40000", "1s", "1500.5", 4000)          // remaining above the limit, a fractional retry-after-ms
	f.Add("-1", "x", "-3s", "1e300", "NaN", "9223372036854775807ns", "-1", -5) // nonsense everywhere
	f.Add("", "", "", "30000", "0", "0s", "1e20", 1<<40)                       // tokens alone, nothing left
	f.Fuzz(func(t *testing.T, lr, rr, tr, lt, rt, tt, ms string, tokens int) {
		h := header(
			"x-ratelimit-limit-requests", lr, "x-ratelimit-remaining-requests", rr, "x-ratelimit-reset-requests", tr,
			"x-ratelimit-limit-tokens", lt, "x-ratelimit-remaining-tokens", rt, "x-ratelimit-reset-tokens", tt,
			"retry-after-ms", ms,
		)
		ls := pacer.ParseLimits(h, famNow)
		checkLimits(t, ls)
		if ls[0] != pacer.ParseHeader(h, famNow) {
			t.Fatalf("ParseLimits[0] = %+v; ParseHeader = %+v", ls[0], pacer.ParseHeader(h, famNow))
		}
		observeAll(t, ls, tokens)
	})
}

// FuzzAnthropicHeaders does the same with Anthropic's headers, whose
// resets are instants: none reads as in the past (negative).
func FuzzAnthropicHeaders(f *testing.F) {
	f.Add("50", "49", "2026-03-01T12:00:01Z", "48000", "46000", "2026-03-01T12:00:03.5Z", "8000", "2026-03-01T11:00:00Z", 3000) // documented form, one reset past
	f.Add("50", "60", "2026-03-01T13:00:01+01:00", "1", "0", "9999-12-31T23:59:59Z", "x", "2026-02-30T00:00:00Z", 0)            // offsets, far future, invalid date
	f.Add("", "", "", "", "", "", "", "", -1)
	f.Fuzz(func(t *testing.T, lr, rr, tr, lt, rt, tt, lo, to string, tokens int) {
		h := header(
			"anthropic-ratelimit-requests-limit", lr, "anthropic-ratelimit-requests-remaining", rr, "anthropic-ratelimit-requests-reset", tr,
			"anthropic-ratelimit-tokens-limit", lt, "anthropic-ratelimit-tokens-remaining", rt, "anthropic-ratelimit-tokens-reset", tt,
			"anthropic-ratelimit-output-tokens-limit", lo, "anthropic-ratelimit-output-tokens-reset", to,
		)
		ls := pacer.ParseLimits(h, famNow)
		checkLimits(t, ls)
		observeAll(t, ls, tokens)
	})
}
