// Command llmgateway shows pace.Shared's ReserveN and Settle in an
// OpenAI-compatible gateway: per API key, a limit of tokens per minute and
// one of requests per minute, shared by every replica through one store.
//
// Each call reserves an estimate read from its body (the prompt at four
// bytes a token, plus max_tokens; see estimate.go) before it is forwarded,
// and is settled afterwards at the upstream's usage.total_tokens, or, for a
// stream, at the usage of its final chunk; a stream cut before its usage is
// settled at the prompt's estimate plus what was relayed (see relay). A
// refusal is a 429 with Retry-After and OpenAI's x-ratelimit-* headers.
//
// It starts a fake upstream (upstream.go), two gateway replicas on one
// store (the memory store, or Redis with -redis ADDR), plays a few API
// keys against them (one greedy, one chatty, streams that end, that the
// client cuts and that the upstream cuts) and prints what each replica
// admitted, settled and refused, then exits. From the repository root:
//
//	go run ./examples/llmgateway
//	go run ./examples/llmgateway -redis 127.0.0.1:6379
//
// The example is its own module (so that the Redis client never enters the
// root module's dependencies), tied to the others by the repository's
// go.work.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratepace/pace/driver"
	"github.com/ratepace/pace/memory"
	"github.com/ratepace/pace/redisstore"
)

func main() {
	log.SetFlags(0)
	addr := flag.String("redis", "", "keep the limits in the Redis server at this address instead of in memory")
	flag.Parse()

	var store driver.Taker = memory.New()
	where := "the memory store"
	if *addr != "" {
		rdb := redis.NewClient(&redis.Options{Addr: *addr, ContextTimeoutEnabled: true})
		defer rdb.Close()
		if err := rdb.Ping(context.Background()).Err(); err != nil {
			log.Fatalf("llmgateway: no Redis at %s: %v", *addr, err)
		}
		// A fresh prefix per run, so that two runs do not share their limits.
		rs, err := redisstore.New(rdb, redisstore.WithPrefix("llmgw-example-"+strconv.FormatInt(time.Now().UnixNano(), 36)+":"))
		if err != nil {
			log.Fatal(err)
		}
		defer rs.Close(context.Background())
		store, where = rs, "Redis at "+*addr
	}

	upstream := httptest.NewServer(fakeUpstream())
	defer upstream.Close()
	outcomes := make(chan outcome, 1)
	cfg := config{TPM: 2000, RPM: 8, Upstream: upstream.URL, Observe: func(o outcome) { outcomes <- o }}
	var replicas [2]*httptest.Server
	for i, name := range []string{"a", "b"} {
		g, err := newGateway(name, store, cfg)
		if err != nil {
			log.Fatal(err)
		}
		replicas[i] = httptest.NewServer(g)
		defer replicas[i].Close()
	}
	fmt.Printf("two replicas on %s; per key %d tokens and %d requests a minute\n\n", where, cfg.TPM, cfg.RPM)

	type total struct{ admitted, refused, settled int }
	totals := map[string]*total{}
	var order []string
	n := 0
	// call sends one request to the next replica, reads its answer (or
	// only its first events, for cut), and prints the gateway's outcome.
	call := func(key, body string, cut bool) {
		base := replicas[n%2].URL
		n++
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		events := 0
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "data:") {
				events++
			}
			if cut && events == 2 {
				cancel() // the client goes away mid-stream
				break
			}
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		o := <-outcomes
		if totals[key] == nil {
			totals[key] = &total{}
			order = append(order, key)
		}
		t := totals[key]
		line := fmt.Sprintf("replica %s  %-6s %d  estimate %4d  ", o.Replica, key, o.Status, o.Estimate)
		switch o.Status {
		case http.StatusTooManyRequests:
			t.refused++
			line += "refused: " + o.How
			if o.RetryAfter > 0 {
				line += fmt.Sprintf(", Retry-After %s (remaining tokens %s, requests %s)",
					resp.Header.Get("Retry-After"), orDash(resp.Header.Get("x-ratelimit-remaining-tokens")), orDash(resp.Header.Get("x-ratelimit-remaining-requests")))
			}
		case http.StatusBadRequest:
			line += "bad request, nothing reserved"
		default:
			t.admitted++
			t.settled += o.Settled
			line += fmt.Sprintf("settled %4d (%s)", o.Settled, o.How)
			if o.Stream {
				line += fmt.Sprintf(", streamed %d events", events)
			}
			if !o.Stream {
				line += fmt.Sprintf(", remaining tokens %s, requests %s", resp.Header.Get("x-ratelimit-remaining-tokens"), resp.Header.Get("x-ratelimit-remaining-requests"))
			}
		}
		fmt.Println(line)
	}
	chat := func(model, prompt string, maxTokens int, stream bool) string {
		s := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}]`, model, prompt)
		if maxTokens > 0 {
			s += fmt.Sprintf(`,"max_tokens":%d`, maxTokens)
		}
		if stream {
			s += `,"stream":true`
		}
		return s + "}"
	}

	call("alice", chat("fake", "Say hello", 100, false), false)
	for range 6 {
		call("bob", chat("fake", "Write a long essay about rate limiting in distributed systems", 600, false), false)
	}
	call("alice", chat("fake", "Say hello again please", 100, false), false)
	call("carol", chat("fake", "Count to twenty", 200, true), false)
	call("carol", chat("fake-hang", "Count to twenty", 200, true), true)
	call("dave", chat("fake-cut", "Count to twenty", 200, true), false)
	call("dave", chat("fake-error", "Count to twenty", 200, false), false)
	call("dave", `{"model":"fake","messages":[{"content":`, false)
	for range 10 {
		call("erin", chat("fake", "Hi", 10, false), false)
	}

	fmt.Printf("\n%-6s %8s %8s %15s\n", "key", "admitted", "refused", "settled tokens")
	for _, k := range order {
		t := totals[k]
		fmt.Printf("%-6s %8d %8d %15d\n", k, t.admitted, t.refused, t.settled)
	}
	os.Stdout.Sync()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
