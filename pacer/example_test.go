package pacer_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/ratepace/pace/pacer"
)

// A 429 with Retry-After holds every later call at least that long; the
// pacer adds a little jitter so that clients refused together do not
// return together.
func ExamplePacer_Observe() {
	clock := newFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	p, _ := pacer.New(pacer.WithClock(clock), pacer.WithSeed(7))

	h := http.Header{}
	h.Set("X-Ratelimit-Limit", "40")
	h.Set("X-Ratelimit-Used", "40")
	h.Set("Retry-After", "12")
	s := pacer.FromResponse(&http.Response{StatusCode: 429, Header: h}, clock.Now())
	fmt.Printf("limit %d, used %d, retry after %v, throttled %v\n", s.Limit, s.Used, s.RetryAfter, s.Throttled)

	p.Observe(s)
	d := p.Reserve()
	fmt.Println("waits at least Retry-After:", d >= 12*time.Second)
	// Output:
	// limit 40, used 40, retry after 12s, throttled true
	// waits at least Retry-After: true
}

func ExampleParseHeader() {
	h := http.Header{}
	h.Set("RateLimit-Policy", `"default";q=100;w=10`)
	h.Set("RateLimit", `"default";r=50;t=3`)
	s := pacer.ParseHeader(h, time.Now())
	fmt.Println(s.Limit, s.Remaining, s.Window, s.Reset)
	// Output: 100 50 10s 3s
}

func ExampleTransport() {
	p, err := pacer.New()
	if err != nil {
		panic(err) // only an invalid option fails
	}
	client := &http.Client{Transport: pacer.Transport(http.DefaultTransport, p)}
	_ = client // every client.Get now waits its turn and reads the rate-limit headers
}
