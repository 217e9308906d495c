package pacer_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratepace/pace/internal/pacersim"
	"github.com/ratepace/pace/pacer"
)

// The LLM servers of TestLLMGoals: one key limited to llmRequests
// requests and llmTokens tokens per llmWindow, the two limits at once,
// each call costing what its X-Tokens header says. A minute's limits of
// 500 requests and 30,000 tokens are scaled to llmWindow, so that a run
// of a dozen windows takes seconds.
const (
	llmRequests = 500
	llmTokens   = 30_000
	llmWindow   = 2 * time.Second
	llmMinCost  = 200
	llmMaxCost  = 4_000
)

// llmServer is a server of two limits, a request one and a token one,
// behind real HTTP, on the real clock. decide says whether a call of cost
// tokens goes at now, and writes the headers; a refusal is a 429 and is
// counted by neither limit.
type llmServer struct {
	mu      sync.Mutex
	decide  func(now time.Time, tokens int, h http.Header) bool
	ok      map[string]int // tokens got, per client
	calls   map[string]int // requests got, per client
	refused int
}

func (s *llmServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tokens, err := strconv.Atoi(r.Header.Get("X-Tokens"))
	if err != nil || tokens < 0 {
		http.Error(w, "bad X-Tokens", http.StatusBadRequest)
		return
	}
	client := r.Header.Get("X-Client")
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.decide(time.Now(), tokens, w.Header()) {
		s.refused++
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	s.ok[client] += tokens
	s.calls[client]++
}

// slidingLog is a sliding window of the calls accepted in the last
// window, each with its weight.
type slidingLog struct {
	window time.Duration
	limit  int
	at     []time.Time
	w      []int
	sum    int
}

func (l *slidingLog) expire(now time.Time) {
	i := 0
	for i < len(l.at) && !l.at[i].After(now.Add(-l.window)) {
		l.sum -= l.w[i]
		i++
	}
	l.at, l.w = l.at[i:], l.w[i:]
}

// fits reports whether a call of weight w fits at now, and if not how
// long until it does.
func (l *slidingLog) fits(now time.Time, w int) (bool, time.Duration) {
	if l.sum+w <= l.limit {
		return true, 0
	}
	need := l.sum + w - l.limit
	for i := range l.at {
		need -= l.w[i]
		if need <= 0 {
			return false, l.at[i].Add(l.window).Sub(now)
		}
	}
	return false, l.window
}

func (l *slidingLog) add(now time.Time, w int) {
	l.at, l.w = append(l.at, now), append(l.w, w)
	l.sum += w
}

// reset is how long until the log is back to its initial state: its
// newest call leaves the window.
func (l *slidingLog) reset(now time.Time) time.Duration {
	if len(l.at) == 0 {
		return 0
	}
	return l.at[len(l.at)-1].Add(l.window).Sub(now)
}

// goDuration writes d as OpenAI does: a Go duration, to the millisecond.
func goDuration(d time.Duration) string {
	return max(d, 0).Round(time.Millisecond).String()
}

// newOpenAILike is a sliding log of requests and one of tokens, with
// OpenAI's headers: x-ratelimit-{limit,remaining,reset}-{requests,tokens},
// resets as Go durations, and on a refusal retry-after-ms and
// retry-after (whole seconds, rounded up) until the call would fit.
func newOpenAILike() *llmServer {
	req := &slidingLog{window: llmWindow, limit: llmRequests}
	tok := &slidingLog{window: llmWindow, limit: llmTokens}
	return &llmServer{ok: map[string]int{}, calls: map[string]int{}, decide: func(now time.Time, tokens int, h http.Header) bool {
		req.expire(now)
		tok.expire(now)
		okR, waitR := req.fits(now, 1)
		okT, waitT := tok.fits(now, tokens)
		accepted := okR && okT
		if accepted {
			req.add(now, 1)
			tok.add(now, tokens)
		}
		h.Set("X-Ratelimit-Limit-Requests", strconv.Itoa(llmRequests))
		h.Set("X-Ratelimit-Remaining-Requests", strconv.Itoa(llmRequests-req.sum))
		h.Set("X-Ratelimit-Reset-Requests", goDuration(req.reset(now)))
		h.Set("X-Ratelimit-Limit-Tokens", strconv.Itoa(llmTokens))
		h.Set("X-Ratelimit-Remaining-Tokens", strconv.Itoa(llmTokens-tok.sum))
		h.Set("X-Ratelimit-Reset-Tokens", goDuration(tok.reset(now)))
		if !accepted {
			wait := max(waitR, waitT)
			h.Set("Retry-After-Ms", strconv.FormatInt(wait.Milliseconds()+1, 10))
			h.Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
		}
		return accepted
	}}
}

// tokenBucket holds up to capacity, refilled at capacity per window.
type tokenBucket struct {
	window   time.Duration
	capacity float64
	level    float64
	at       time.Time
}

func (b *tokenBucket) refill(now time.Time) {
	if b.at.IsZero() {
		b.level, b.at = b.capacity, now
	}
	b.level = math.Min(b.capacity, b.level+b.capacity*now.Sub(b.at).Seconds()/b.window.Seconds())
	b.at = now
}

// full is when the bucket is fully replenished.
func (b *tokenBucket) full(now time.Time) time.Time {
	return now.Add(time.Duration((b.capacity - b.level) / b.capacity * float64(b.window)))
}

// until is how long until the bucket holds w.
func (b *tokenBucket) until(w float64) time.Duration {
	if b.level >= w {
		return 0
	}
	return time.Duration((w - b.level) / b.capacity * float64(b.window))
}

// rfc3339Up writes t as Anthropic does, RFC 3339 in whole seconds,
// rounded up (never before the instant it names).
func rfc3339Up(t time.Time) string {
	if r := t.Truncate(time.Second); r.Before(t) {
		t = r.Add(time.Second)
	}
	return t.UTC().Format(time.RFC3339)
}

// newAnthropicLike is a token bucket of requests and one of tokens, with
// Anthropic's headers: anthropic-ratelimit-{requests,tokens}-{limit,
// remaining,reset}, resets as the RFC 3339 instant the bucket is full
// again, and on a refusal retry-after in whole seconds, rounded up.
func newAnthropicLike() *llmServer {
	req := &tokenBucket{window: llmWindow, capacity: llmRequests}
	tok := &tokenBucket{window: llmWindow, capacity: llmTokens}
	return &llmServer{ok: map[string]int{}, calls: map[string]int{}, decide: func(now time.Time, tokens int, h http.Header) bool {
		req.refill(now)
		tok.refill(now)
		accepted := req.level >= 1 && tok.level >= float64(tokens)
		if accepted {
			req.level--
			tok.level -= float64(tokens)
		}
		h.Set("Anthropic-Ratelimit-Requests-Limit", strconv.Itoa(llmRequests))
		h.Set("Anthropic-Ratelimit-Requests-Remaining", strconv.Itoa(int(req.level)))
		h.Set("Anthropic-Ratelimit-Requests-Reset", rfc3339Up(req.full(now)))
		h.Set("Anthropic-Ratelimit-Tokens-Limit", strconv.Itoa(llmTokens))
		h.Set("Anthropic-Ratelimit-Tokens-Remaining", strconv.Itoa(int(tok.level)))
		h.Set("Anthropic-Ratelimit-Tokens-Reset", rfc3339Up(tok.full(now)))
		if !accepted {
			wait := max(req.until(1), tok.until(float64(tokens)))
			h.Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
		}
		return accepted
	}}
}

// llmResult is one run: the utilisation of the binding limit, the share
// of calls refused, and Jain's index over the tokens each client got.
type llmResult struct {
	util, refused, jain float64
	tokens, calls       int
}

// runLLM runs clients greedy workers, each with its own Pacer and
// Transport, against srv for d, each call costing a uniform draw from
// llmMinCost to llmMaxCost tokens, told to the pacer with WithCost.
func runLLM(t *testing.T, srv *llmServer, clients int, seed uint64, d time.Duration) llmResult {
	t.Helper()
	ts := httptest.NewServer(srv)
	defer ts.Close()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			p := pacer.MustNew(pacer.WithSeed(seed*100+uint64(i)), pacer.WithWindow(llmWindow))
			base := &http.Transport{}
			defer base.CloseIdleConnections()
			client := &http.Client{Transport: pacer.Transport(base, p)}
			for ctx.Err() == nil {
				tokens := llmMinCost + rng.IntN(llmMaxCost-llmMinCost+1)
				req, _ := http.NewRequestWithContext(pacer.WithCost(ctx, tokens), http.MethodPost, ts.URL, nil)
				req.Header.Set("X-Tokens", strconv.Itoa(tokens))
				req.Header.Set("X-Client", strconv.Itoa(i))
				resp, err := client.Do(req)
				if err != nil {
					continue // the context ended during the wait or the call
				}
				resp.Body.Close()
			}
		}(i)
	}
	wg.Wait()
	elapsed := time.Since(start)
	srv.mu.Lock()
	defer srv.mu.Unlock()
	var r llmResult
	var got []float64
	for i := 0; i < clients; i++ {
		k := strconv.Itoa(i)
		got = append(got, float64(srv.ok[k]))
		r.tokens += srv.ok[k]
		r.calls += srv.calls[k]
	}
	windows := elapsed.Seconds() / llmWindow.Seconds()
	r.util = math.Max(float64(r.tokens)/(llmTokens*windows), float64(r.calls)/(llmRequests*windows))
	r.refused = float64(srv.refused) / float64(r.calls+srv.refused)
	r.jain = pacersim.Jain(got)
	return r
}

// The goals of TestLLMGoals for N = 4 clients: at least llmMinUtil of the
// binding limit, at most llmMaxRefused of the calls refused, Jain's index
// over the tokens got at least llmMinJain. What the test asserts is below
// them where the pacer does not reach them in every batch of runs, about a
// fifth under the worst measured, so that it fails on a regression and not
// on the machine's noise. Measured, worst of 3 seeds, over 9 batches on a
// 2-core machine: the Anthropic-like server (token bucket) 0.97-1.01 of
// the limit, 429 0-0.6%, Jain 0.89-0.98; the OpenAI-like one (a sliding
// log, whose tokens come back in lumps a window after they went)
// 0.70-0.77, 429 2.4-3.7%, Jain 0.89-0.97.
const (
	llmMinUtil    = 0.85
	llmMaxRefused = 0.02
	llmMinJain    = 0.90

	// What the test asserts of the token bucket: the goals, but for
	// fairness.
	llmBucketMinJain = 0.75
	// What the test asserts of the sliding log.
	llmLogMinUtil    = 0.60
	llmLogMaxRefused = 0.06
	llmLogMinJain    = 0.75
)

// TestLLMGoals runs 4 clients, each with its own Pacer and Transport,
// against an OpenAI-like server (sliding windows, resets as Go durations,
// retry-after-ms) and an Anthropic-like one (token buckets, resets as RFC
// 3339 instants), each limiting one key to 500 requests and 30,000
// tokens per window at once (the minute scaled to llmWindow), calls
// costing 200 to 4,000 tokens: the token limit binds. Three seeds of each
// run at once, for 12 windows of 2 s (24 s); the worst of them is held to
// the goals, or below them where they are not reached (see llmMinUtil).
// Each client is told the window (WithWindow,
// the minute scaled), as the families write none.
// The table of docs/pacer.md is its output:
//
//	go test -run TestLLMGoals -v ./pacer/
func TestLLMGoals(t *testing.T) {
	const (
		clients = 4
		runs    = 3
		length  = 12 * llmWindow
	)
	servers := []struct {
		name                string
		make                func() *llmServer
		util, refused, jain float64
	}{
		{"OpenAI-like (sliding window)", newOpenAILike, llmLogMinUtil, llmLogMaxRefused, llmLogMinJain},
		{"Anthropic-like (token bucket)", newAnthropicLike, llmMinUtil, llmMaxRefused, llmBucketMinJain},
	}
	results := make([][]llmResult, len(servers))
	var wg sync.WaitGroup
	for si := range servers {
		results[si] = make([]llmResult, runs)
		for run := 0; run < runs; run++ {
			wg.Add(1)
			go func(si, run int) {
				defer wg.Done()
				results[si][run] = runLLM(t, servers[si].make(), clients, uint64(run+1), length)
			}(si, run)
		}
	}
	wg.Wait()
	var b strings.Builder
	fmt.Fprintf(&b, "| server | util (worst) | 429 share (worst) | Jain over tokens (worst) | goals met |\n|---|---|---|---|---|\n")
	for si, s := range servers {
		worst := llmResult{util: math.Inf(1), jain: math.Inf(1)}
		for run, r := range results[si] {
			t.Logf("%s, seed %d: util %.3f, 429 %.2f%%, Jain %.3f (%d tokens, %d calls)", s.name, run+1, r.util, 100*r.refused, r.jain, r.tokens, r.calls)
			worst.util = math.Min(worst.util, r.util)
			worst.refused = math.Max(worst.refused, r.refused)
			worst.jain = math.Min(worst.jain, r.jain)
		}
		met := worst.util >= llmMinUtil && worst.refused <= llmMaxRefused && worst.jain >= llmMinJain
		fmt.Fprintf(&b, "| %s | %.3f | %.2f%% | %.3f | %v |\n", s.name, worst.util, 100*worst.refused, worst.jain, met)
		if worst.util < s.util {
			t.Errorf("%s: utilisation %.3f; want >= %.2f", s.name, worst.util, s.util)
		}
		if worst.refused > s.refused {
			t.Errorf("%s: 429 share %.2f%%; want <= %.0f%%", s.name, 100*worst.refused, 100*s.refused)
		}
		if !(worst.jain >= s.jain) {
			t.Errorf("%s: Jain's index over tokens %.3f; want >= %.2f", s.name, worst.jain, s.jain)
		}
	}
	t.Logf("N = %d, %d runs of %v (%d windows of %v) each, worst of runs:\n%s", clients, runs, length, int(length/llmWindow), llmWindow, b.String())
}
