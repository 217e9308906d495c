package pacer_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/ratepace/pace/pacer"
)

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h[kv[i]] = append(h[kv[i]], kv[i+1]) // as given: not canonicalised
	}
	return h
}

func TestParseHeader(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	tests := []struct {
		name string
		h    http.Header
		want pacer.Signal
	}{
		{"empty", hdr(), pacer.Signal{}},
		{"echonest lowercase ell", hdr("X-Ratelimit-Limit", "120", "X-Ratelimit-Used", "30", "X-Ratelimit-Remaining", "90"),
			pacer.Signal{Limit: 120, Used: 30, HasUsed: true, Remaining: 90, HasRemaining: true}},
		{"any case", hdr("x-ratelimit-limit", "60", "X-RATELIMIT-REMAINING", "7"),
			pacer.Signal{Limit: 60, Remaining: 7, HasRemaining: true}},
		{"reset delta seconds", hdr("X-RateLimit-Reset", "30"), pacer.Signal{HasReset: true, Reset: 30 * time.Second}},
		{"reset epoch seconds", hdr("X-RateLimit-Reset", strconv.FormatInt(now.Unix()+45, 10)), pacer.Signal{HasReset: true, Reset: 45 * time.Second}},
		{"reset epoch millis", hdr("X-RateLimit-Reset", strconv.FormatInt(now.UnixMilli()+1500, 10)), pacer.Signal{HasReset: true, Reset: 1500 * time.Millisecond}},
		{"reset epoch in the past", hdr("X-RateLimit-Reset", strconv.FormatInt(now.Unix()-45, 10)), pacer.Signal{HasReset: true}},
		{"retry-after seconds", hdr("Retry-After", "120"), pacer.Signal{RetryAfter: 2 * time.Minute}},
		{"retry-after date", hdr("Retry-After", now.Add(90*time.Second).UTC().Format(http.TimeFormat)), pacer.Signal{RetryAfter: 90 * time.Second}},
		{"retry-after date UTC", hdr("Retry-After", now.Add(90*time.Second).UTC().Format(time.RFC1123)), pacer.Signal{RetryAfter: 90 * time.Second}},
		{"retry-after date RFC 850", hdr("Retry-After", now.Add(90*time.Second).UTC().Format("Monday, 02-Jan-06 15:04:05 GMT")), pacer.Signal{RetryAfter: 90 * time.Second}},
		{"retry-after date asctime", hdr("Retry-After", now.Add(90*time.Second).UTC().Format(time.ANSIC)), pacer.Signal{RetryAfter: 90 * time.Second}},
		{"retry-after date numeric zone", hdr("Retry-After", now.Add(90*time.Second).In(time.FixedZone("", 2*3600)).Format(time.RFC1123Z)), pacer.Signal{RetryAfter: 90 * time.Second}},
		{"retry-after date other zone rejected", hdr("Retry-After", now.Add(90*time.Second).UTC().Format("Mon, 02 Jan 2006 15:04:05")+" PST"), pacer.Signal{}},
		{"reset date GMT", hdr("X-RateLimit-Reset", now.Add(3*time.Second).UTC().Format(http.TimeFormat)), pacer.Signal{HasReset: true, Reset: 3 * time.Second}},
		{"reset date UTC", hdr("X-RateLimit-Reset", "Tue, 14 Nov 2023 22:13:23 UTC"), pacer.Signal{HasReset: true, Reset: 3 * time.Second}},
		{"reset date RFC 850", hdr("X-RateLimit-Reset", "Tuesday, 14-Nov-23 22:13:23 GMT"), pacer.Signal{HasReset: true, Reset: 3 * time.Second}},
		{"reset date asctime", hdr("X-RateLimit-Reset", "Tue Nov 14 22:13:23 2023"), pacer.Signal{HasReset: true, Reset: 3 * time.Second}},
		{"reset date in the past", hdr("X-RateLimit-Reset", "Tue, 14 Nov 2023 22:13:10 GMT"), pacer.Signal{HasReset: true}},
		{"reset epoch micros", hdr("X-RateLimit-Reset", strconv.FormatInt(now.UnixMicro()+2_500_000, 10)), pacer.Signal{HasReset: true, Reset: 2500 * time.Millisecond}},
		{"reset epoch seconds with a fraction", hdr("X-RateLimit-Reset", "1700000002.25"), pacer.Signal{HasReset: true, Reset: 2250 * time.Millisecond}},
		{"reset delta with a fraction", hdr("X-RateLimit-Reset", "0.5"), pacer.Signal{HasReset: true, Reset: 500 * time.Millisecond}},
		{"reset epoch nanos rejected", hdr("X-RateLimit-Reset", strconv.FormatInt(now.UnixNano()+1e9, 10)), pacer.Signal{HasReset: true}},
		{"retry-after huge", hdr("Retry-After", "99999999999999999999"), pacer.Signal{RetryAfter: 24 * time.Hour}},
		{"retry-after garbage", hdr("Retry-After", "soon"), pacer.Signal{}},
		{"negative counts ignored", hdr("X-RateLimit-Limit", "-1", "X-RateLimit-Used", "-4", "X-RateLimit-Remaining", "-2"), pacer.Signal{}},
		{"huge limit clamped", hdr("X-RateLimit-Limit", "1e300"), pacer.Signal{Limit: 1 << 30}},
		{"remaining above limit clamped", hdr("X-RateLimit-Limit", "10", "X-RateLimit-Remaining", "50"),
			pacer.Signal{Limit: 10, Remaining: 10, HasRemaining: true}},
		{"used above limit believed", hdr("X-RateLimit-Limit", "40", "X-RateLimit-Used", "110"),
			pacer.Signal{Limit: 40, Used: 110, HasUsed: true}},
		{"ietf single policy", hdr("RateLimit-Policy", `"default";q=100;w=10`, "RateLimit", `"default";r=50;t=30`),
			pacer.Signal{Limit: 100, Window: 10 * time.Second, Remaining: 50, HasRemaining: true, Reset: 30 * time.Second, HasReset: true}},
		{"ietf least remaining wins", hdr("RateLimit-Policy", `"permin";q=50;w=60, "perhr";q=1000;w=3600`,
			"RateLimit", `"permin";r=40;t=20, "perhr";r=7;t=1800`),
			pacer.Signal{Limit: 1000, Window: time.Hour, Remaining: 7, HasRemaining: true, Reset: 30 * time.Minute, HasReset: true}},
		{"ietf split over two fields", hdr("RateLimit-Policy", `"a";q=10;w=1`, "RateLimit-Policy", `"b";q=100;w=60`, "RateLimit", `"b";r=3`),
			pacer.Signal{Limit: 100, Window: time.Minute, Remaining: 3, HasRemaining: true}},
		{"ietf policy only: slowest rate", hdr("RateLimit-Policy", `"burst";q=100;w=60,"daily";q=1000;w=86400`),
			pacer.Signal{Limit: 1000, Window: 24 * time.Hour}},
		{"ietf with partition key and unknown params", hdr("RateLimit-Policy", `"peruser";q=65535;qu="content-bytes";w=10;pk=:sdfjLJUOUH==:;acme-x=?1`),
			pacer.Signal{Limit: 65535, Window: 10 * time.Second}},
		{"ietf malformed is ignored whole", hdr("RateLimit", `"default";r=50;t=30,`, "X-RateLimit-Remaining", "5"),
			pacer.Signal{Remaining: 5, HasRemaining: true}},
		{"ietf negative remaining ignored", hdr("RateLimit", `"default";r=-1`), pacer.Signal{}},
		{"ietf decimal is not an integer", hdr("RateLimit-Policy", `"p";q=10.5;w=60`), pacer.Signal{}},
		{"ietf wins over legacy", hdr("RateLimit", `"d";r=4`, "X-RateLimit-Used", "9", "X-RateLimit-Limit", "10"),
			pacer.Signal{Limit: 10, Remaining: 4, HasRemaining: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := pacer.ParseHeader(tt.h, now); got != tt.want {
				t.Errorf("ParseHeader(%v) = %+v; want %+v", tt.h, got, tt.want)
			}
		})
	}
}

func TestFromResponseThrottled(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	tests := []struct {
		status int
		ra     string
		want   bool
	}{
		{200, "", false},
		{429, "", true},
		{503, "", false},
		{503, "5", true},
	}
	for _, tt := range tests {
		resp := &http.Response{StatusCode: tt.status, Header: http.Header{}}
		if tt.ra != "" {
			resp.Header.Set("Retry-After", tt.ra)
		}
		if got := pacer.FromResponse(resp, now).Throttled; got != tt.want {
			t.Errorf("FromResponse(%d, Retry-After %q).Throttled = %v; want %v", tt.status, tt.ra, got, tt.want)
		}
	}
	if s := pacer.FromResponse(nil, now); s != (pacer.Signal{}) {
		t.Errorf("FromResponse(nil) = %+v; want the zero Signal", s)
	}
}

// FuzzHTTPDate checks that every HTTP date form a server writes parses
// back to the instant it names (whole seconds), as X-RateLimit-Reset and
// as Retry-After, whatever the instant and the form.
func FuzzHTTPDate(f *testing.F) {
	f.Add(int64(3), uint8(0))                               // IMF-fixdate, GMT
	f.Add(int64(86399), uint8(1))                           // time.RFC1123 of a UTC time: the zone written UTC
	f.Add(int64(1), uint8(2))                               // RFC 850, two-digit year
	f.Add(int64(40000), uint8(3))                           // asctime, a day padded with a space
	f.Add(int64(12*3600+7), uint8(4))                       // a numeric offset
	f.Add(int64(-1), uint8(0))                              // in the past: no duration
	f.Add(int64(48*3600), uint8(1))                         // beyond a day: clamped
	now := time.Date(2023, 11, 14, 22, 13, 20, 0, time.UTC) // 1_700_000_000
	layouts := []string{http.TimeFormat, time.RFC1123, "Monday, 02-Jan-06 15:04:05 GMT", time.ANSIC, time.RFC1123Z}
	f.Fuzz(func(t *testing.T, ahead int64, form uint8) {
		if ahead < -1e9 || ahead > 1e9 {
			return
		}
		at := now.Add(time.Duration(ahead) * time.Second)
		if at.Year() < 1970 || at.Year() > 2069 { // RFC 850's two-digit years
			return
		}
		layout := layouts[int(form)%len(layouts)]
		zone := time.UTC
		if layout == time.RFC1123Z {
			zone = time.FixedZone("", int(ahead%(14*60))*60) // whole minutes, as the form writes them
		}
		v := at.In(zone).Format(layout)
		want := min(max(time.Duration(ahead)*time.Second, 0), 24*time.Hour)
		for _, name := range []string{"Retry-After", "X-RateLimit-Reset"} {
			s := pacer.ParseHeader(http.Header{name: {v}}, now)
			got := s.RetryAfter
			if name != "Retry-After" {
				got = s.Reset
			}
			if got != want {
				t.Fatalf("%s: %q read at %v gives %v; want %v", name, v, now, got, want)
			}
		}
	})
}

// FuzzParseHeader checks that no header value makes the parser panic or
// return a value outside the documented bounds.
func FuzzParseHeader(f *testing.F) {
	seeds := []struct{ name, value string }{
		{"RateLimit", `"default";r=50;t=30`},                                          // the draft's example
		{"RateLimit-Policy", `"permin";q=50;w=60,"perhr";q=1000;w=3600`},              // several policies
		{"RateLimit-Policy", `"p";q=65535;qu="content-bytes";w=10;pk=:cHsdsRa894==:`}, // byte sequence
		{"RateLimit", `"d";r=999999999999999;t=999999999999999`},                      // the largest sf integers
		{"RateLimit", `"d";r=1;t=1,`},                                                 // trailing comma
		{"RateLimit", `"unterminated;r=1`},                                            // broken string
		{"RateLimit", `d;r=-0;t=-5`},                                                  // negatives and a token name
		{"RateLimit", `("inner" "list");r=1`},                                         // inner lists are rejected
		{"X-RateLimit-Reset", "1700000045"},                                           // epoch seconds
		{"X-RateLimit-Reset", "1700000045000"},                                        // epoch millis
		{"X-RateLimit-Reset", "1e400"},                                                // overflows float64
		{"X-RateLimit-Limit", "NaN"},                                                  // parses as a float
		{"X-RateLimit-Used", "-Inf"},                                                  // parses as a float
		{"Retry-After", "Wed, 21 Oct 2015 07:28:00 GMT"},                              // HTTP date in the past
		{"Retry-After", "Tue, 14 Nov 2023 22:13:50 UTC"},                              // the zone written UTC
		{"X-RateLimit-Reset", "Tue Nov 14 22:13:50 2023"},                             // asctime
		{"X-RateLimit-Reset", "1700000045000000"},                                     // epoch micros
		{"Retry-After", "9223372036854775808"},                                        // beyond int64
		{"Retry-After", "\x00\xff"},                                                   // bytes that are not text
	}
	for _, s := range seeds {
		f.Add(s.name, s.value)
	}
	now := time.Unix(1_700_000_000, 0)
	f.Fuzz(func(t *testing.T, name, value string) {
		h := http.Header{}
		h[name] = []string{value}
		s := pacer.ParseHeader(h, now)
		if s.Limit < 0 || s.Limit > 1<<30 || s.Used < 0 || s.Used > 1<<30 || s.Remaining < 0 || s.Remaining > 1<<30 {
			t.Fatalf("ParseHeader(%q: %q) = %+v; counts out of [0, 2^30]", name, value, s)
		}
		for _, d := range []time.Duration{s.Window, s.Reset, s.RetryAfter} {
			if d < 0 || d > 24*time.Hour {
				t.Fatalf("ParseHeader(%q: %q) = %+v; durations out of [0, 24h]", name, value, s)
			}
		}
		if s.HasRemaining && s.Limit > 0 && s.Remaining > s.Limit {
			t.Fatalf("ParseHeader(%q: %q) = %+v; Remaining above Limit", name, value, s)
		}
		// The pacer takes whatever the parser gives without panicking.
		p := pacer.MustNew(pacer.WithClock(newFakeClock(now)), pacer.WithSeed(1))
		p.Observe(s)
		if d := p.Reserve(); d < 0 {
			t.Fatalf("Reserve() after %+v = %v; want >= 0", s, d)
		}
	})
}
