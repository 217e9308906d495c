package pacer

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The header families of APIs that report several limits at once, each
// limit under its own name. OpenAI writes
//
//	x-ratelimit-limit-requests: 500
//	x-ratelimit-remaining-requests: 499
//	x-ratelimit-reset-requests: 120ms
//	x-ratelimit-limit-tokens: 30000
//	x-ratelimit-remaining-tokens: 29000
//	x-ratelimit-reset-tokens: 2s
//
// its resets the time until the limit is back to its initial state, as Go
// durations ("1s", "6m0s", "12ms"); Anthropic writes
//
//	anthropic-ratelimit-requests-limit: 50
//	anthropic-ratelimit-requests-remaining: 49
//	anthropic-ratelimit-requests-reset: 2026-03-01T12:00:01Z
//
// and the same for tokens, input-tokens and output-tokens, its resets the
// RFC 3339 instant at which the limit is fully replenished (a token
// bucket).
var familyNames = [...]struct {
	name string
	unit Unit
}{
	{"requests", Requests},
	{"tokens", Tokens},
	{"input-tokens", InputTokens},
	{"output-tokens", OutputTokens},
}

// parseFamilies reads OpenAI's and Anthropic's named limits, requests
// first, each into a Signal with its Name and Unit; none when the header
// has neither family. Where both are present, OpenAI's wins.
func parseFamilies(h http.Header, now time.Time) []Signal {
	var found []Signal
	for _, f := range familyNames {
		if l, ok := parseOpenAI(h, f.name); ok {
			l.Name, l.Unit = f.name, f.unit
			found = append(found, l)
		}
	}
	if len(found) > 0 {
		return found
	}
	for _, f := range familyNames {
		if l, ok := parseAnthropic(h, f.name, now); ok {
			l.Name, l.Unit, l.bucket = f.name, f.unit, true
			found = append(found, l)
		}
	}
	return found
}

// parseOpenAI reads x-ratelimit-{limit,remaining,reset}-name.
func parseOpenAI(h http.Header, name string) (Signal, bool) {
	return parseNamed(h, "X-Ratelimit-Limit-"+name, "X-Ratelimit-Remaining-"+name, "X-Ratelimit-Reset-"+name, parseGoDuration)
}

// parseAnthropic reads anthropic-ratelimit-name-{limit,remaining,reset}.
func parseAnthropic(h http.Header, name string, now time.Time) (Signal, bool) {
	p := "Anthropic-Ratelimit-" + name
	return parseNamed(h, p+"-Limit", p+"-Remaining", p+"-Reset", func(v string) time.Duration { return parseInstant(v, now) })
}

// parseNamed reads one named limit from its three fields, the reset by
// reset; it reports whether any of them is present.
func parseNamed(h http.Header, limit, remaining, resetName string, reset func(string) time.Duration) (Signal, bool) {
	var l Signal
	seen := false
	if v, ok := firstValue(h, limit); ok {
		seen = true
		if n, ok := parseCount(v); ok {
			l.Limit = n
		}
	}
	if v, ok := firstValue(h, remaining); ok {
		seen = true
		if n, ok := parseCount(v); ok {
			l.Remaining, l.HasRemaining = n, true
		}
	}
	if v, ok := firstValue(h, resetName); ok {
		seen = true
		l.Reset, l.HasReset = reset(v), true
	}
	return l, seen
}

// parseGoDuration reads a duration as Go writes it ("1s", "6m0s",
// "12ms", "1h2m3.5s"); a bare number is seconds. Anything negative,
// malformed or absurd gives zero, or the clamp.
func parseGoDuration(v string) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" || len(v) > 64 {
		return 0
	}
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		if !finite(f) || f <= 0 {
			return 0
		}
		if f > maxDuration.Seconds() {
			return maxDuration
		}
		return time.Duration(f * float64(time.Second))
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0
	}
	return clampDuration(d)
}

// parseInstant reads an RFC 3339 instant (with or without fractions of a
// second) as the time from now until it; one in the past gives zero.
func parseInstant(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if len(v) < len("2006-01-02T15:04:05Z") || len(v) > 64 {
		return 0
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return 0
	}
	return clampDuration(t.Sub(now))
}

// parseRetryAfterMs reads retry-after-ms: milliseconds, fractions
// allowed. It reports false when the value is not a non-negative number.
func parseRetryAfterMs(v string) (time.Duration, bool) {
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || !finite(f) || f < 0 {
		return 0, false
	}
	if f > float64(maxDuration/time.Millisecond) {
		return maxDuration, true
	}
	return time.Duration(f * float64(time.Millisecond)), true
}
