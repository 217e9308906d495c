package pacer

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ParseHeader builds a Signal from the rate-limit fields of a response
// header, read at now (used to turn epochs and HTTP dates into durations).
// It understands:
//
//   - the IETF RateLimit and RateLimit-Policy structured fields
//     (draft-ietf-httpapi-ratelimit-headers): "q" (quota) and "w" (window,
//     seconds) of the policy, "r" (remaining) and "t" (reset, seconds) of
//     the service limit. When several policies are listed, the service
//     limit with the least remaining quota wins, with the policy of the
//     same name; a malformed field is ignored whole, as the draft requires;
//   - X-RateLimit-Limit, -Remaining, -Used and -Reset in any letter case,
//     Reset being delta seconds or a Unix epoch (in seconds or
//     milliseconds), whichever the magnitude says;
//   - Retry-After, as delta seconds or an HTTP date.
//
// The IETF fields take precedence over the X-RateLimit ones. Values that
// are malformed, negative or absurdly large are ignored or clamped; an
// epoch or date in the past gives no reset. ParseHeader never panics.
// The result's Throttled is false: the status code is not in the header
// (see FromResponse).
func ParseHeader(h http.Header, now time.Time) Signal {
	var s Signal
	parseLegacy(h, now, &s)
	parseIETF(h, &s)
	if v, ok := headerValue(h, "Retry-After"); ok {
		s.RetryAfter = parseRetryAfter(v, now)
	}
	return s.clean()
}

// FromResponse is ParseHeader on resp.Header at now, with Throttled set
// for a 429 and for a 503 that carries Retry-After. A nil response gives
// the zero Signal.
func FromResponse(resp *http.Response, now time.Time) Signal {
	if resp == nil {
		return Signal{}
	}
	s := ParseHeader(resp.Header, now)
	switch resp.StatusCode {
	case http.StatusTooManyRequests:
		s.Throttled = true
	case http.StatusServiceUnavailable:
		s.Throttled = s.RetryAfter > 0
	}
	return s
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
		s.Reset = parseReset(v, now)
	}
}

// Epoch thresholds: a reset above ~11.5 days of delta is taken for an
// epoch in seconds (2001 onwards is above 1e9), and above 1e12 for one in
// milliseconds.
const (
	epochSeconds = 1_000_000_000
	epochMillis  = 1_000_000_000_000
)

func parseReset(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !finite(f) || f <= 0 {
		return 0
	}
	var d time.Duration
	switch {
	case f >= epochMillis:
		if f > 1e15 {
			return 0
		}
		d = time.UnixMilli(int64(f)).Sub(now)
	case f >= epochSeconds:
		d = time.Unix(int64(f), 0).Sub(now)
	default:
		d = time.Duration(f * float64(time.Second))
	}
	return clampDuration(d)
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
	t, err := http.ParseTime(v)
	if err != nil {
		return 0
	}
	return clampDuration(t.Sub(now))
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
				if q, ok := it.intParam("q"); ok && q >= 0 {
					p.q, p.hasQ = q, true
				}
				if w, ok := it.intParam("w"); ok && w > 0 {
					p.w = w
				}
				if !p.hasQ {
					continue
				}
				if _, dup := policies[it.name]; !dup {
					policies[it.name] = p
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
			for _, it := range items {
				ri, ok := it.intParam("r")
				if !ok || ri < 0 {
					continue
				}
				ti, _ := it.intParam("t")
				if !found || ri < r {
					r, t, name, found = ri, ti, it.name, true
				}
			}
			if found {
				s.Remaining, s.HasRemaining = min(r, maxCount), true
				s.Used, s.HasUsed = 0, false // the IETF fields take precedence
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
