package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratepace/pace/driver"
	"github.com/ratepace/pace/internal/fakeclock"
	"github.com/ratepace/pace/memory"
	"github.com/ratepace/pace/redisstore"
)

// rig is a fake upstream and n gateway replicas on one store, whose
// outcomes arrive on outcomes, one per request.
type rig struct {
	replicas []*httptest.Server
	outcomes chan outcome
}

func newRig(t *testing.T, store driver.Taker, clock func() time.Time, tpm, rpm, n int) *rig {
	t.Helper()
	up := httptest.NewServer(fakeUpstream())
	t.Cleanup(up.Close)
	r := &rig{outcomes: make(chan outcome, 1)}
	for i := range n {
		g, err := newGateway(fmt.Sprint(i), store, config{TPM: tpm, RPM: rpm, Upstream: up.URL, Clock: clock, MaxBody: 4096,
			Observe: func(o outcome) { r.outcomes <- o }})
		if err != nil {
			t.Fatal(err)
		}
		s := httptest.NewServer(g)
		t.Cleanup(s.Close)
		r.replicas = append(r.replicas, s)
	}
	return r
}

// frozen returns a memory store and a clock that stands still.
func frozen() (*memory.Store, func() time.Time) {
	clk := fakeclock.New(time.Unix(1_700_000_000, 0))
	return memory.New(memory.WithClock(clk.Now)), clk.Now
}

// call posts body as key to replica i and returns the response (body read
// whole, or only its first cutAfter events when cutAfter > 0) and the
// gateway's outcome.
func (r *rig) call(t *testing.T, i int, key, body string, cutAfter int) (*http.Response, string, outcome) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.replicas[i].URL+"/v1/chat/completions", strings.NewReader(body))
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	if cutAfter > 0 {
		sc, events := bufio.NewScanner(resp.Body), 0
		for events < cutAfter && sc.Scan() {
			if strings.HasPrefix(sc.Text(), "data:") {
				events++
			}
		}
		cancel()
	} else {
		io.Copy(&text, resp.Body)
	}
	resp.Body.Close()
	return resp, text.String(), <-r.outcomes
}

func chatBody(model, prompt string, maxTokens int, stream bool) string {
	s := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}],"max_tokens":%d`, model, prompt, maxTokens)
	if stream {
		s += `,"stream":true`
	}
	return s + "}"
}

func header(t *testing.T, resp *http.Response, name string) int {
	t.Helper()
	n, err := strconv.Atoi(resp.Header.Get(name))
	if err != nil {
		t.Fatalf("%s = %q; want an integer", name, resp.Header.Get(name))
	}
	return n
}

// TestBadRequests: a body that is not a chat completion is a 400 (413 when
// too large, 401 without a key) with a message that says what is wrong,
// and reserves nothing.
func TestBadRequests(t *testing.T) {
	store, now := frozen()
	r := newRig(t, store, now, 1000, 10, 1)
	for _, c := range []struct {
		name, key, body string
		status          int
		want            string
	}{
		{"no key", "", chatBody("fake", "hi", 10, false), 401, "missing API key"},
		{"empty", "k", "", 400, "the body is empty"},
		{"truncated", "k", `{"model":"fake","messages":[{"content":`, 400, "not valid JSON"},
		{"not JSON", "k", `hello`, 400, "not valid JSON (at byte 1)"},
		{"two values", "k", `{"messages":[{"content":"a"}]} {}`, 400, "more than one JSON value"},
		{"no messages", "k", `{"model":"fake"}`, 400, "messages: want at least one"},
		{"content a number", "k", `{"messages":[{"content":3}]}`, 400, "messages[0].content: want a string"},
		{"max_tokens a string", "k", `{"messages":[{"content":"a"}],"max_tokens":"x"}`, 400, "max_tokens: want a number"},
		{"max_tokens zero", "k", `{"messages":[{"content":"a"}],"max_tokens":0}`, 400, "max_tokens: want an integer of at least 1"},
		{"max_tokens overflows", "k", `{"messages":[{"content":"a"}],"max_tokens":1e40}`, 400, "max_tokens: want a number"},
		{"n zero", "k", `{"messages":[{"content":"a"}],"n":0}`, 400, "n: want an integer"},
		{"huge body", "k", `{"messages":[{"content":"` + strings.Repeat("a", 5000) + `"}]}`, 413, "at most 4096 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, text, o := r.call(t, 0, c.key, c.body, 0)
			if resp.StatusCode != c.status || !strings.Contains(text, c.want) {
				t.Errorf("status %d, body %s; want %d containing %q", resp.StatusCode, text, c.status, c.want)
			}
			if o.Settled != 0 || o.Estimate != 0 {
				t.Errorf("outcome %+v; want nothing reserved", o)
			}
		})
	}
	// Nothing was spent: a call of the whole minute's tokens still fits.
	resp, _, _ := r.call(t, 0, "k", chatBody("fake", "a", 1000-8, false), 0)
	if resp.StatusCode != 200 {
		t.Errorf("a call of the whole limit after the bad requests: %d; want 200", resp.StatusCode)
	}
}

// TestSettleFromUsage: after a call, the key's tokens left are the limit
// less the upstream's usage, not less the estimate.
func TestSettleFromUsage(t *testing.T) {
	store, now := frozen()
	r := newRig(t, store, now, 1000, 10, 1)
	resp, _, o := r.call(t, 0, "k", chatBody("fake", "Say hello", 500, false), 0)
	if o.Estimate != 507 || o.Settled != 78 || o.How != "usage" {
		t.Fatalf("outcome %+v; want estimate 507 (ceil(9/4) + 4 + 500) settled at the usage, 78", o)
	}
	if got := header(t, resp, "x-ratelimit-remaining-tokens"); got != 1000-78 {
		t.Errorf("remaining tokens %d; want %d (limit - usage)", got, 1000-78)
	}
	if got := header(t, resp, "x-ratelimit-remaining-requests"); got != 9 {
		t.Errorf("remaining requests %d; want 9", got)
	}
	// The next call sees the same: exactly 922 tokens fit, 923 do not.
	_, _, o = r.call(t, 0, "k", chatBody("fake", "a", 922-5, false), 0)
	if o.Status != 200 {
		t.Fatalf("a call of the 922 tokens left: %+v; want admitted", o)
	}
}

// TestStreamSettle: a stream is settled at the usage of its final chunk
// when it ends; cut by the upstream or by the client before its usage, at
// the prompt's estimate plus the content relayed at four bytes a token.
func TestStreamSettle(t *testing.T) {
	store, now := frozen()
	r := newRig(t, store, now, 1000, 10, 1)
	_, text, o := r.call(t, 0, "end", chatBody("fake", "Count to twenty", 200, true), 0)
	if o.Settled != 104 || o.How != "usage" {
		t.Errorf("ended stream: %+v; want settled at its usage, 104", o)
	}
	if strings.Contains(text, "usage") || !strings.HasSuffix(text, "data: [DONE]\n\n") {
		t.Errorf("the client did not ask for usage and got %q; want the stream without the usage chunk, to [DONE]", text)
	}
	_, _, o = r.call(t, 0, "upcut", chatBody("fake-cut", "Count to twenty", 200, true), 0)
	if want := 8 + 15; o.Settled != want || o.How != "cut" {
		t.Errorf("stream the upstream cut: %+v; want %d (prompt 8 + 3 chunks of 20 bytes)", o, want)
	}
	_, _, o = r.call(t, 0, "clientcut", chatBody("fake-hang", "Count to twenty", 200, true), 2)
	if o.Settled < 8 || o.Settled > 8+15 || o.How != "cut" {
		t.Errorf("stream the client cut: %+v; want between the prompt (8) and what was relayed (23)", o)
	}
	// What the settlements left: 1000 less each, seen by the next call of
	// each key, after its own settlement at its usage of 8 tokens.
	for key, spent := range map[string]int{"end": 104, "upcut": 23, "clientcut": o.Settled} {
		resp, _, _ := r.call(t, 0, key, chatBody("fake", "a", 1, false), 0)
		if got, want := header(t, resp, "x-ratelimit-remaining-tokens"), 1000-spent-8; got != want {
			t.Errorf("%s: remaining %d; want %d", key, got, want)
		}
	}
}

// TestGreedyRefused: a key that spends its tokens is refused with
// Retry-After and the OpenAI headers while another key is served; a key
// that makes too many calls is refused by the requests limit.
func TestGreedyRefused(t *testing.T) {
	store, now := frozen()
	r := newRig(t, store, now, 1000, 3, 1)
	big := chatBody("fake", "Write a long essay about rate limiting in distributed systems", 600, false)
	r.call(t, 0, "greedy", big, 0) // 620 reserved, 286 kept
	_, _, o := r.call(t, 0, "greedy", big, 0)
	if o.Status != 200 {
		t.Fatalf("second call (714 left): %+v", o)
	}
	resp, text, o := r.call(t, 0, "greedy", big, 0) // 428 left, 620 wanted
	if resp.StatusCode != 429 || o.How != "tokens" || !strings.Contains(text, `"code":"rate_limit_exceeded"`) {
		t.Fatalf("third call: %d %s %+v; want 429 by tokens", resp.StatusCode, text, o)
	}
	// 192 tokens more at 1000/60 a second: 11.52 s.
	if got := resp.Header.Get("Retry-After"); got != "12" {
		t.Errorf("Retry-After %q; want 12", got)
	}
	if got := resp.Header.Get("x-ratelimit-reset-tokens"); got != "11.52s" {
		t.Errorf("x-ratelimit-reset-tokens %q; want 11.52s", got)
	}
	if got := header(t, resp, "x-ratelimit-remaining-requests"); got != 1 {
		t.Errorf("remaining requests %d after a refusal by tokens; want 1 (the refused call gave its request back)", got)
	}
	if _, _, o := r.call(t, 0, "other", big, 0); o.Status != 200 {
		t.Errorf("another key: %+v; want served", o)
	}
	r.call(t, 0, "greedy", chatBody("fake", "a", 1, false), 0) // the third request
	resp, _, o = r.call(t, 0, "greedy", chatBody("fake", "a", 1, false), 0)
	if o.How != "requests" || resp.Header.Get("Retry-After") != "20" || resp.Header.Get("x-ratelimit-limit-requests") != "3" {
		t.Errorf("fourth request: %+v, headers %v; want refused by requests, Retry-After 20", o, resp.Header)
	}
	// An estimate above the minute's tokens can never fit: no Retry-After.
	resp, _, o = r.call(t, 0, "other", chatBody("fake", "a", 5000, false), 0)
	if o.How != "too large" || resp.Header.Get("Retry-After") != "" {
		t.Errorf("a call of 5005 tokens: %+v; want refused as too large, without Retry-After", o)
	}
}

// TestUpstreamError: a call the upstream fails is settled at 0 tokens;
// its request stays spent.
func TestUpstreamError(t *testing.T) {
	store, now := frozen()
	r := newRig(t, store, now, 1000, 10, 1)
	resp, _, o := r.call(t, 0, "k", chatBody("fake-error", "a", 500, false), 0)
	if resp.StatusCode != 500 || o.Settled != 0 || header(t, resp, "x-ratelimit-remaining-tokens") != 1000 || header(t, resp, "x-ratelimit-remaining-requests") != 9 {
		t.Errorf("%d %+v %v; want 500, all tokens back, the request spent", resp.StatusCode, o, resp.Header)
	}
}

// sharedReplicas: what one replica spends, the other sees.
func sharedReplicas(t *testing.T, store driver.Taker, now func() time.Time, exact bool) {
	r := newRig(t, store, now, 1000, 10, 2)
	big := chatBody("fake", "Write a long essay about rate limiting in distributed systems", 600, false)
	r.call(t, 0, "k", big, 0)
	r.call(t, 1, "k", big, 0) // 286 + 286 kept
	_, _, o := r.call(t, 0, "k", big, 0)
	if o.How != "tokens" {
		t.Fatalf("third call on replica 0: %+v; want refused by tokens (428 left of 1000)", o)
	}
	resp, _, _ := r.call(t, 1, "k", chatBody("fake", "a", 1, false), 0)
	got := header(t, resp, "x-ratelimit-remaining-tokens")
	if want := 1000 - 286*2 - 8; exact && got != want || !exact && (got < want || got > want+50) {
		t.Errorf("replica 1 sees %d tokens left; want %d", got, want)
	}
	if got := header(t, resp, "x-ratelimit-remaining-requests"); got != 7 {
		t.Errorf("replica 1 sees %d requests left; want 7", got)
	}
}

func TestReplicasShare(t *testing.T) {
	store, now := frozen()
	sharedReplicas(t, store, now, true)
}

// TestRedis runs the replicas on Redis at PACE_REDIS_ADDR; without a
// server it skips, or fails under CI. Redis's clock runs, so the tokens
// left are checked within what a few seconds refill.
func TestRedis(t *testing.T) {
	addr := os.Getenv("PACE_REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		if os.Getenv("CI") != "" || os.Getenv("PACE_REDIS_ADDR") != "" {
			t.Fatalf("no Redis at %s: %v", addr, err)
		}
		t.Skipf("no Redis at %s (set PACE_REDIS_ADDR): %v", addr, err)
	}
	s, err := redisstore.New(rdb, redisstore.WithPrefix(fmt.Sprintf("llmgw-test-%d-%d:", os.Getpid(), time.Now().UnixNano())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	sharedReplicas(t, s, nil, false)
}
