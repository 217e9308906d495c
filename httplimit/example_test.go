package httplimit_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/httplimit"
)

// A token endpoint limited per source address and per client id, where
// only accepted presentations spend the client's pace.
func ExampleNew() {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := pace.WithClock(func() time.Time { return now }) // time stands still
	perIP, _ := pace.New(50, clock)
	perClient, _ := pace.New(2, clock)
	m, err := httplimit.New([]httplimit.Limit{
		httplimit.Pace(perIP, httplimit.ClientIP(), httplimit.Name("per-ip")),
		httplimit.Pace(perClient, httplimit.ClientID(), httplimit.Name("per-client"),
			httplimit.ReturnOn(http.StatusUnauthorized)),
	})
	if err != nil {
		panic(err)
	}
	token := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.PostFormValue("client_secret") != "s3cr3t" {
			http.Error(w, "invalid_client", http.StatusUnauthorized)
			return
		}
		fmt.Fprint(w, "a token")
	}))
	try := func(secret string) {
		body := "grant_type=client_credentials&client_id=app-1&client_secret=" + secret
		r := httptest.NewRequest(http.MethodPost, "/token", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		w := httptest.NewRecorder()
		token.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Values("RateLimit"), w.Header().Values("Retry-After"))
		if secret == "guess-1" {
			fmt.Println("RateLimit-Policy:", w.Header().Get("RateLimit-Policy"))
		}
	}
	try("guess-1") // a forger: given back
	try("guess-2")
	try("s3cr3t")
	try("s3cr3t")
	try("s3cr3t") // over the client's pace of 2/s
	// Output:
	// 401 ["per-ip";r=49;t=1 "per-client";r=2;t=0] []
	// RateLimit-Policy: "per-ip";q=50;w=1, "per-client";q=2;w=1
	// 401 ["per-ip";r=48;t=1 "per-client";r=2;t=0] []
	// 200 ["per-ip";r=47;t=1 "per-client";r=1;t=1] []
	// 200 ["per-ip";r=46;t=1 "per-client";r=0;t=1] []
	// 429 ["per-client";r=0;t=1] [1]
}

// An LLM endpoint limited in tokens per API key: each request reserves its
// max_tokens, read from the body, and the handler settles at the tokens
// the call actually used, so the response's RateLimit field and the next
// request see what is really left.
func ExampleCost() {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tokens, _ := pace.New(1000.0/60, pace.WithBurst(1000), pace.WithClock(func() time.Time { return now }))
	m, err := httplimit.New([]httplimit.Limit{
		httplimit.Pace(tokens, httplimit.Header("X-Api-Key"), httplimit.Name("tokens"),
			httplimit.Cost(func(r *http.Request) (int, error) {
				var req struct {
					MaxTokens int `json:"max_tokens"`
				}
				err := json.NewDecoder(r.Body).Decode(&req)
				return req.MaxTokens, err
			})),
	})
	if err != nil {
		panic(err)
	}
	complete := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body) // the whole body, as the client sent it
		used := len(body)             // a stand-in for the tokens the model used
		if err := httplimit.Settle(r, used); err != nil {
			fmt.Println("settle:", err)
		}
		fmt.Fprint(w, "an answer")
	}))
	try := func(maxTokens int, prompt string) {
		body := fmt.Sprintf(`{"max_tokens": %d, "prompt": %q}`, maxTokens, prompt)
		r := httptest.NewRequest(http.MethodPost, "/v1/complete", strings.NewReader(body))
		r.Header.Set("X-Api-Key", "key-1")
		w := httptest.NewRecorder()
		complete.ServeHTTP(w, r)
		fmt.Println(w.Code, len(body), w.Header().Values("RateLimit"), w.Header().Values("Retry-After"))
	}
	try(600, "hello") // reserves 600, settles at the 38 used
	try(900, "hello") // fits only because 562 came back
	try(950, "hello") // 924 left: refused until 950 fit, in 1.56 s
	try(0, "hello")   // an estimate below 1: 400
	// Output:
	// 200 38 ["tokens";r=962;t=3] []
	// 200 38 ["tokens";r=924;t=5] []
	// 429 38 ["tokens";r=0;t=2] [2]
	// 400 36 [] []
}
