package pacer

import (
	"strconv"
	"time"
)

// Signal is what one response said about the remote limit. Every field is
// optional: the zero value says nothing, and a Pacer that observes it only
// learns that a call completed.
//
// Counts are in requests (quota units) per window, or in the Unit the
// Signal names. A Signal that contradicts itself is reconciled by
// Pacer.Observe: Used wins over Remaining, Remaining above Limit is clamped
// to Limit, and Used above Limit is believed (servers that shrink their
// limit report exactly that).
//
// A response that reports several limits at once (OpenAI's requests and
// tokens, Anthropic's requests, tokens, input and output tokens) gives one
// Signal per limit, each with its Name and Unit (see ParseLimits and
// Pacer.ObserveLimits); ParseHeader returns the first (requests, when the
// response has them).
type Signal struct {
	// Limit is the number of calls the window allows, shared by every
	// client of the key. Zero or negative means absent.
	Limit int64

	// Used is the number of calls counted in the current window, the
	// caller's and everybody else's. It is present only when HasUsed is set.
	Used    int64
	HasUsed bool

	// Remaining is the number of calls still allowed in the current window.
	// It is present only when HasRemaining is set.
	Remaining    int64
	HasRemaining bool

	// Window is the length of the window the limit applies to (the
	// RateLimit-Policy "w" parameter). Zero or negative means absent.
	Window time.Duration

	// Reset is how long until the quota resets (X-RateLimit-Reset, or the
	// RateLimit "t" parameter). Zero or negative means absent.
	Reset time.Duration
	// HasReset reports whether the response carried a reset field at all,
	// even one that had already passed (a date truncated to the second,
	// naming a token bucket's next token): a server that never does is
	// read as a sliding log (see docs/pacer.md). A positive Reset implies
	// it.
	HasReset bool

	// RetryAfter is how long the server asked the caller to wait
	// (Retry-After). Zero or negative means absent. A Pacer never lets a
	// call go before it has elapsed.
	RetryAfter time.Duration

	// Throttled reports whether the call was refused for rate (a 429, a
	// 503 with Retry-After, or a 403 with Retry-After or no quota left:
	// GitHub's secondary and primary limits).
	Throttled bool

	// Name is the name of the limit within the response's family of
	// limits: "requests", "tokens", "input-tokens" or "output-tokens"
	// (see ParseLimits). Empty when the response names none.
	Name string

	// Unit is what the counts of this limit count: Requests, the zero
	// value, or tokens.
	Unit Unit

	// Resource is the API's name for the pool of quota the counts are of
	// (GitHub's x-ratelimit-resource: "core", "search", "graphql"...).
	// Empty when the response names none. A Pacer learns the counts of
	// one resource, the first it sees: a response of another teaches it
	// nothing but its Retry-After (keep one Pacer per resource with
	// Group).
	Resource string

	// bucket reports that the limit is documented as a token bucket that
	// refills continuously (Anthropic's), set by the header parser.
	bucket bool
}

// Unit is what a limit counts.
type Unit uint8

const (
	// Requests counts calls: every call costs one.
	Requests Unit = iota
	// Tokens counts tokens, input and output together: a call costs
	// what WithCost says (zero without it).
	Tokens
	// InputTokens counts input (prompt) tokens only. WithCost's tokens
	// are not charged to it: the split of a call's tokens is unknown
	// before the response, so the limit is learned from the counts
	// alone and holds calls when the server reports it spent.
	InputTokens
	// OutputTokens counts output (completion) tokens only, as
	// InputTokens does.
	OutputTokens
)

// String returns the unit's name as the header families write it:
// "requests", "tokens", "input-tokens" or "output-tokens".
func (u Unit) String() string {
	switch u {
	case Requests:
		return "requests"
	case Tokens:
		return "tokens"
	case InputTokens:
		return "input-tokens"
	case OutputTokens:
		return "output-tokens"
	}
	return "unit(" + strconv.Itoa(int(u)) + ")"
}

// maxLimits is the most limits a Pacer paces: the families known report
// four at most, and each limit is a Pacer's worth of memory.
const maxLimits = 8

// maxCount clamps absurd counts: no real API advertises a billion calls
// per window, and keeping counts small keeps every float exact.
const maxCount = 1 << 30

// maxDuration clamps absurd durations (Window, Reset, RetryAfter) to a
// day: a server that asks for a week has a bug, and a client parked for a
// week is indistinguishable from a dead one.
const maxDuration = 24 * time.Hour

// clean returns s with absent, negative and absurd values removed or
// clamped, so that the rest of the package never checks them again.
func (s Signal) clean() Signal {
	if s.Limit <= 0 {
		s.Limit = 0
	} else if s.Limit > maxCount {
		s.Limit = maxCount
	}
	if s.HasUsed {
		if s.Used < 0 {
			s.Used, s.HasUsed = 0, false
		} else if s.Used > maxCount {
			s.Used = maxCount
		}
	}
	if s.HasRemaining {
		if s.Remaining < 0 {
			s.Remaining, s.HasRemaining = 0, false
		} else if s.Remaining > maxCount {
			s.Remaining = maxCount
		}
		if s.Limit > 0 && s.Remaining > s.Limit {
			s.Remaining = s.Limit
		}
	}
	s.Window = clampDuration(s.Window)
	s.Reset = clampDuration(s.Reset)
	s.RetryAfter = clampDuration(s.RetryAfter)
	return s
}

func clampDuration(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	if d > maxDuration {
		return maxDuration
	}
	return d
}
