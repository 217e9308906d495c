package pacersim

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"
)

// Fields says which rate-limit fields a server sends.
type Fields int

const (
	// Legacy is X-RateLimit-Limit and X-RateLimit-Remaining, with
	// X-RateLimit-Reset written in the format's ResetStyle.
	Legacy Fields = iota
	// IETF is RateLimit-Policy ("q", "w") and RateLimit ("r", "t").
	IETF
	// RetryOnly is no rate-limit field at all: a refusal's Retry-After is
	// all a client hears.
	RetryOnly
)

// ResetStyle is how X-RateLimit-Reset is written.
type ResetStyle int

const (
	NoReset          ResetStyle = iota // the field is absent
	ResetDelta                         // seconds from now, rounded up
	ResetEpoch                         // Unix seconds (truncated, as time.Unix gives them)
	ResetEpochMillis                   // Unix milliseconds
	ResetDateGMT                       // IMF-fixdate: Mon, 02 Jan 2006 15:04:05 GMT
	ResetDateUTC                       // the same with the zone written UTC (time.RFC1123 of a UTC time)
	ResetRFC850                        // Monday, 02-Jan-06 15:04:05 GMT
	ResetAsctime                       // Mon Jan  2 15:04:05 2006
)

// RetryStyle is how a refusal's Retry-After is written.
type RetryStyle int

const (
	RetrySeconds RetryStyle = iota // seconds from now, rounded up
	RetryDateGMT                   // an IMF-fixdate, truncated to the second
	RetryDateUTC                   // the same with the zone written UTC
	NoRetry                        // absent
)

// Format is how a server writes its decision into a response: every
// refusal is a 429, and the fields depend on the format.
type Format struct {
	Fields Fields
	Reset  ResetStyle // for Legacy
	Retry  RetryStyle
}

// String names the format in tables.
func (f Format) String() string {
	var s string
	switch f.Fields {
	case IETF:
		s = "ietf"
	case RetryOnly:
		s = "retry-after only"
	default:
		s = "x-" + [...]string{"no reset", "delta", "epoch s", "epoch ms", "date GMT", "date UTC", "RFC 850", "asctime"}[f.Reset]
	}
	if f.Fields != RetryOnly || f.Retry != RetrySeconds {
		s += ", RA " + [...]string{"s", "GMT", "UTC", "absent"}[f.Retry]
	}
	return s
}

// retryAt is when a Retry-After lets the client call again: delta after
// the client received it, or at a fixed time (a date, in run time).
type retryAt struct {
	delta time.Duration
	at    time.Duration
	date  bool
}

// from is the earliest send allowed to a client that received the
// response at received (run time).
func (r retryAt) from(received time.Duration) time.Duration {
	if r.date {
		return r.at
	}
	return received + r.delta
}

// Render writes d, decided under a window of window, as a response at now
// (the server's wall clock), and says when its Retry-After, if any, lets
// the client call again.
func (f Format) Render(d Decision, window time.Duration, now time.Time) (int, http.Header, retryAt) {
	h := http.Header{}
	switch f.Fields {
	case IETF:
		h.Set("RateLimit-Policy", fmt.Sprintf(`"default";q=%d;w=%d`, d.Limit, ceilSeconds(window)))
		h.Set("RateLimit", fmt.Sprintf(`"default";r=%d;t=%d`, d.Remaining, ceilSeconds(d.Reset)))
	case Legacy:
		h.Set("X-RateLimit-Limit", strconv.Itoa(d.Limit))
		h.Set("X-RateLimit-Remaining", strconv.Itoa(d.Remaining))
		reset := now.Add(d.Reset)
		switch f.Reset {
		case ResetDelta:
			h.Set("X-RateLimit-Reset", strconv.FormatInt(ceilSeconds(d.Reset), 10))
		case ResetEpoch:
			h.Set("X-RateLimit-Reset", strconv.FormatInt(reset.Unix(), 10))
		case ResetEpochMillis:
			h.Set("X-RateLimit-Reset", strconv.FormatInt(reset.UnixMilli(), 10))
		case ResetDateGMT:
			h.Set("X-RateLimit-Reset", reset.UTC().Format(http.TimeFormat))
		case ResetDateUTC:
			h.Set("X-RateLimit-Reset", reset.UTC().Format(time.RFC1123))
		case ResetRFC850:
			h.Set("X-RateLimit-Reset", reset.UTC().Format(rfc850))
		case ResetAsctime:
			h.Set("X-RateLimit-Reset", reset.UTC().Format(time.ANSIC))
		}
	}
	if d.Accepted {
		return http.StatusOK, h, retryAt{}
	}
	var ra retryAt
	switch f.Retry {
	case RetrySeconds:
		s := max(1, ceilSeconds(d.RetryAfter))
		h.Set("Retry-After", strconv.FormatInt(s, 10))
		ra.delta = time.Duration(s) * time.Second
	case RetryDateGMT, RetryDateUTC:
		at := now.Add(d.RetryAfter).UTC().Truncate(time.Second)
		layout := http.TimeFormat
		if f.Retry == RetryDateUTC {
			layout = time.RFC1123
		}
		h.Set("Retry-After", at.Format(layout))
		ra.at, ra.date = at.Sub(epoch), true
	}
	return http.StatusTooManyRequests, h, ra
}

// rfc850 is HTTP's obsolete RFC 850 date, whose zone is always GMT.
const rfc850 = "Monday, 02-Jan-06 15:04:05 GMT"

func ceilSeconds(d time.Duration) int64 {
	return int64(math.Ceil(d.Seconds()))
}
