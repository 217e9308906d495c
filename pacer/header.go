package pacer

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ParseHeader builds a Signal from the rate-limit fields of a response
// header, read at now (to turn epochs and HTTP dates into durations): the
// IETF RateLimit and RateLimit-Policy structured fields (q, w, r, t; with
// several policies, the one with the least remaining quota wins), which take
// precedence over X-RateLimit-Limit, -Remaining, -Used and -Reset in any
// letter case (Reset as delta seconds, a Unix epoch in s, ms or µs, or an
// HTTP date), and Retry-After. A malformed IETF field is ignored whole;
// other values that are malformed, negative or absurdly large are ignored
// or clamped, and a past epoch or date gives no reset. ParseHeader never
// panics. The result's Throttled is false: the status code is not in the
// header (see FromResponse). docs/pacer.md lists the formats read.
//
// It also reads the families of named limits: OpenAI's
// x-ratelimit-{limit,remaining,reset}-{requests,tokens} (resets as Go
// durations such as 6m0s) and Anthropic's
// anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}
// (resets as RFC 3339 instants). Where one is present, its first limit
// (requests, when present) is the result, in place of the fields above;
// ParseLimits returns them all. retry-after-ms (milliseconds, fractions
// allowed), when valid, is read instead of Retry-After: it is the same
// wait, to the millisecond. GitHub's x-ratelimit-resource goes to
// Resource.
func ParseHeader(h http.Header, now time.Time) Signal {
	return parseAll(h, now)[0]
}

// ParseLimits is ParseHeader for a response that reports several limits
// at once: one Signal per limit, each with its Name and Unit, the first
// being ParseHeader's, every one with the response's Retry-After. A header
// with no family of named limits gives the one Signal ParseHeader returns.
// The result is never empty.
func ParseLimits(h http.Header, now time.Time) []Signal {
	return parseAll(h, now)
}

// parseAll reads every limit of h, the first being ParseHeader's.
func parseAll(h http.Header, now time.Time) []Signal {
	var s Signal
	parseLegacy(h, now, &s)
	parseIETF(h, &s)
	ls := parseFamilies(h, now)
	if len(ls) > 0 {
		s = ls[0]
	} else {
		ls = []Signal{s}
	}
	if v, ok := headerValue(h, "Retry-After"); ok {
		s.RetryAfter = parseRetryAfter(v, now)
	}
	if v, ok := firstValue(h, "Retry-After-Ms"); ok {
		if d, ok := parseRetryAfterMs(v); ok {
			s.RetryAfter = d
		}
	}
	if v, ok := firstValue(h, "X-Ratelimit-Resource"); ok {
		s.Resource = resourceName(v)
	}
	for i := range ls {
		if i == 0 {
			ls[0] = s.clean()
			continue
		}
		ls[i].RetryAfter, ls[i].Resource = s.RetryAfter, s.Resource
		ls[i] = ls[i].clean()
	}
	return ls
}

// resourceName keeps a resource name short and printable: it names a
// Pacer's pool of quota, and came from a server.
func resourceName(v string) string {
	v = strings.TrimSpace(v)
	if len(v) > 64 {
		v = v[:64]
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x21 || v[i] > 0x7e {
			return ""
		}
	}
	return v
}

// FromResponse is ParseHeader on resp.Header at now, with Throttled set
// for a 429, for a 503 that carries Retry-After, and for a 403 that
// carries Retry-After or says no quota is left (x-ratelimit-remaining: 0):
// GitHub refuses for its secondary limits with either, and for its
// primary limit with the second, whose wait is then until the reset
// (RetryAfter is set to Reset, so that no call goes before it). A nil
// response gives the zero Signal.
func FromResponse(resp *http.Response, now time.Time) Signal {
	return LimitsFromResponse(resp, now)[0]
}

// LimitsFromResponse is ParseLimits on resp.Header at now, with Throttled
// set on every limit as FromResponse sets it. A nil response gives one
// zero Signal. The result is never empty.
func LimitsFromResponse(resp *http.Response, now time.Time) []Signal {
	if resp == nil {
		return []Signal{{}}
	}
	ls := ParseLimits(resp.Header, now)
	s := ls[0]
	switch resp.StatusCode {
	case http.StatusTooManyRequests:
		s.Throttled = true
	case http.StatusServiceUnavailable:
		s.Throttled = s.RetryAfter > 0
	case http.StatusForbidden:
		spent := s.HasRemaining && s.Remaining == 0
		s.Throttled = s.RetryAfter > 0 || spent
		if s.RetryAfter <= 0 && spent {
			s.RetryAfter = s.Reset
		}
	}
	for i := range ls {
		ls[i].Throttled, ls[i].RetryAfter = s.Throttled, s.RetryAfter
	}
	return ls
}

// headerValue returns the first value of the field named name, matched in
// any letter case (maps built by hand need not be canonical), with all
// values of that name joined by commas as HTTP allows for lists.
func headerValue(h http.Header, name string) (string, bool) {
	if vs, ok := h[http.CanonicalHeaderKey(name)]; ok && len(vs) > 0 {
		return strings.Join(vs, ","), true
	}
	for k, vs := range h {
		if strings.EqualFold(k, name) && len(vs) > 0 {
			return strings.Join(vs, ","), true
		}
	}
	return "", false
}

// firstValue is headerValue for single-valued fields: the first value only.
func firstValue(h http.Header, name string) (string, bool) {
	if vs, ok := h[http.CanonicalHeaderKey(name)]; ok && len(vs) > 0 {
		return vs[0], true
	}
	for k, vs := range h {
		if strings.EqualFold(k, name) && len(vs) > 0 {
			return vs[0], true
		}
	}
	return "", false
}

// parseCount parses a non-negative count; decimals are truncated, and
// anything else is rejected.
func parseCount(v string) (int64, bool) {
	v = strings.TrimSpace(v)
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0, false
		}
		return min(n, maxCount), true
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !finite(f) || f < 0 {
		return 0, false
	}
	return int64(math.Min(f, maxCount)), true
}

func parseLegacy(h http.Header, now time.Time, s *Signal) {
	if v, ok := firstValue(h, "X-RateLimit-Limit"); ok {
		if n, ok := parseCount(v); ok {
			s.Limit = n
		}
	}
	if v, ok := firstValue(h, "X-RateLimit-Used"); ok {
		if n, ok := parseCount(v); ok {
			s.Used, s.HasUsed = n, true
		}
	}
	if v, ok := firstValue(h, "X-RateLimit-Remaining"); ok {
		if n, ok := parseCount(v); ok {
			s.Remaining, s.HasRemaining = n, true
		}
	}
	if v, ok := firstValue(h, "X-RateLimit-Reset"); ok {
		s.Reset, s.HasReset = parseReset(v, now), true
	}
}

// Epoch thresholds: a reset of 10^9 or more cannot be a delta (that
// would be 31 years), so it is a Unix epoch, in seconds below 10^12 (the
// year 33658), in milliseconds below 10^15, in microseconds below 10^18.
// Each reads the same instant for any date from 2001 to 2286.
const (
	epochSeconds = 1e9
	epochMillis  = 1e12
	epochMicros  = 1e15
	epochNanos   = 1e18
)

// parseReset reads X-RateLimit-Reset: delta seconds, a Unix epoch in
// seconds, milliseconds or microseconds (whichever the magnitude says;
// fractions allowed), or an HTTP date. An instant in the past gives no
// reset.
func parseReset(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		if t, ok := parseHTTPDate(v); ok {
			return clampDuration(t.Sub(now))
		}
		return 0
	}
	if !finite(f) || f <= 0 {
		return 0
	}
	var per float64 // units of an epoch per second
	switch {
	case f >= epochNanos:
		return 0
	case f >= epochMicros:
		per = 1e6
	case f >= epochMillis:
		per = 1e3
	case f >= epochSeconds:
		per = 1
	default:
		return clampDuration(time.Duration(f * float64(time.Second)))
	}
	// Subtract in seconds, where the float is exact enough (an epoch in
	// microseconds is below 2^63 ns, but not exact as a float of ns).
	d := f/per - float64(now.UnixNano())/1e9
	if d <= 0 {
		return 0
	}
	if d > maxDuration.Seconds() {
		return maxDuration
	}
	return time.Duration(d * float64(time.Second))
}

func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if v[0] >= '0' && v[0] <= '9' {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !finite(f) || f < 0 {
			return 0
		}
		if f > maxDuration.Seconds() {
			return maxDuration
		}
		return time.Duration(f * float64(time.Second))
	}
	t, ok := parseHTTPDate(v)
	if !ok {
		return 0
	}
	return clampDuration(t.Sub(now))
}

// dateLayouts are the HTTP date forms (RFC 9110, section 5.6.7) with the
// zone as servers write it: GMT as the RFC says, UTC (time.RFC1123 of a
// UTC time, which one popular limiter sends, and the same slip in the RFC
// 850 form) or a numeric offset. A named zone other than GMT or UTC is
// rejected: Go would read it as an offset of zero, silently.
var dateLayouts = []string{
	"Mon, 02 Jan 2006 15:04:05 GMT",
	"Mon, 02 Jan 2006 15:04:05 UTC",
	"Mon, 2 Jan 2006 15:04:05 GMT",
	"Mon, 2 Jan 2006 15:04:05 UTC",
	time.RFC1123Z,
	"Monday, 02-Jan-06 15:04:05 GMT",
	"Monday, 02-Jan-06 15:04:05 UTC",
	time.ANSIC, // asctime: no zone, GMT by definition
}

// parseHTTPDate parses an HTTP date in any of dateLayouts.
func parseHTTPDate(v string) (time.Time, bool) {
	v = strings.TrimSpace(v)
	if len(v) < len("Mon Jan 2 15:04:05 2006") || len(v) > 64 {
		return time.Time{}, false
	}
	for _, layout := range dateLayouts {
		if t, err := time.Parse(layout, v); err == nil {
			return t.UTC(), true
		}
	}
	return time.Time{}, false
}

// parseIETF reads RateLimit-Policy and RateLimit into s.
func parseIETF(h http.Header, s *Signal) {
	type policy struct {
		q, w int64
		hasQ bool
	}
	policies := map[string]policy{}
	var best policy
	haveBest := false
	if v, ok := headerValue(h, "RateLimit-Policy"); ok {
		items, ok := parseSFList(v)
		if ok {
			for _, it := range items {
				var p policy
				if q, ok := it.IntParam("q"); ok && q >= 0 {
					p.q, p.hasQ = q, true
				}
				if w, ok := it.IntParam("w"); ok && w > 0 {
					p.w = w
				}
				if !p.hasQ {
					continue
				}
				if _, dup := policies[it.Text]; !dup {
					policies[it.Text] = p
				}
				// Without a service limit, the slowest policy binds.
				if !haveBest || rateOf(p.q, p.w) < rateOf(best.q, best.w) {
					best, haveBest = p, true
				}
			}
		}
	}
	if v, ok := headerValue(h, "RateLimit"); ok {
		if items, ok := parseSFList(v); ok {
			found := false
			var r, t int64
			var name string
			var hasT bool
			for _, it := range items {
				ri, ok := it.IntParam("r")
				if !ok || ri < 0 {
					continue
				}
				ti, tok := it.IntParam("t")
				if !found || ri < r {
					r, t, name, found = ri, ti, it.Text, true
					hasT = tok
				}
			}
			if found {
				s.Remaining, s.HasRemaining = min(r, maxCount), true
				s.Used, s.HasUsed = 0, false // the IETF fields take precedence
				s.HasReset = s.HasReset || hasT
				if t > 0 {
					s.Reset = clampDuration(time.Duration(min(t, int64(maxDuration/time.Second))) * time.Second)
				}
				if p, ok := policies[name]; ok {
					best, haveBest = p, true
				} else {
					haveBest = false
				}
			}
		}
	}
	if haveBest {
		if best.q > 0 {
			s.Limit = min(best.q, maxCount)
			if s.HasRemaining && s.HasUsed {
				s.HasUsed = false
			}
		}
		if best.w > 0 {
			s.Window = time.Duration(min(best.w, int64(maxDuration/time.Second))) * time.Second
		}
	}
}

func rateOf(q, w int64) float64 {
	if w <= 0 {
		w = 1
	}
	return float64(q) / float64(w)
}
