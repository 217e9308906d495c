package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/driver"
)

// config is a gateway's: the per-key limits, the upstream, and a hook
// that is told the outcome of every request.
type config struct {
	TPM, RPM         int    // tokens and requests per minute per API key
	DefaultMaxTokens int    // the estimate's max_tokens when a request names none (default 1024)
	MaxBody          int64  // the largest request body read, in bytes (default 1 MiB)
	Upstream         string // the upstream's base URL, without /v1/...
	Clock            func() time.Time
	Observe          func(outcome)
}

// outcome is what one request came to, as the gateway settled it.
type outcome struct {
	Key, Replica string
	Status       int
	Stream       bool
	Estimate     int           // tokens reserved
	Settled      int           // tokens kept: 0 when refused or when the upstream failed
	How          string        // "usage", "cut", "upstream error", "requests", "tokens", "too large", "bad request"
	RetryAfter   time.Duration // on a refusal
}

// gateway is one replica: an OpenAI-compatible /v1/chat/completions proxy
// whose limits live in a store that every replica shares. Each API key has
// two limits, each a pace.Shared of its own on the same store (keys
// "rpm:" and "tpm:" and a hash of the API key): requests per minute, one a
// call, and tokens per minute, the estimate reserved and settled at the
// upstream's usage. The two are taken one after the other, requests first;
// a refusal of tokens gives the request back at once. Two limits rather
// than one pace.Shared with WithQuota because the OpenAI headers report
// each limit's remaining and reset, and a SharedReservation reports only
// its tightest limit's.
type gateway struct {
	name             string
	cfg              config
	tokens, requests *pace.Shared
	client           *http.Client
}

func newGateway(name string, store driver.Taker, cfg config) (*gateway, error) {
	if cfg.TPM < 1 || cfg.RPM < 1 {
		return nil, fmt.Errorf("llmgateway: limits of %d tokens and %d requests a minute; want at least 1 each", cfg.TPM, cfg.RPM)
	}
	if cfg.DefaultMaxTokens < 1 {
		cfg.DefaultMaxTokens = defaultMaxTokens
	}
	if cfg.MaxBody < 1 {
		cfg.MaxBody = defaultMaxBody
	}
	opts := []pace.Option{pace.WithClock(cfg.Clock)}
	tokens, err := pace.NewShared(store, float64(cfg.TPM)/60, append(opts, pace.WithBurst(float64(cfg.TPM)))...)
	if err != nil {
		return nil, err
	}
	requests, err := pace.NewShared(store, float64(cfg.RPM)/60, append(opts, pace.WithBurst(float64(cfg.RPM)))...)
	if err != nil {
		return nil, err
	}
	return &gateway{name: name, cfg: cfg, tokens: tokens, requests: requests, client: &http.Client{}}, nil
}

// storeKey is the key of an API key in the store: a hash, so that the
// store never holds a secret, of bounded length.
func storeKey(apiKey string) string {
	h := sha256.Sum256([]byte(apiKey))
	return hex.EncodeToString(h[:12])
}

func (g *gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	out := outcome{Replica: g.name}
	defer func() {
		if g.cfg.Observe != nil {
			g.cfg.Observe(out)
		}
	}()
	if r.URL.Path != "/v1/chat/completions" || r.Method != http.MethodPost {
		out.Status, out.How = http.StatusNotFound, "bad request"
		writeError(w, out.Status, "invalid_request_error", "unknown_url", "only POST /v1/chat/completions is served")
		return
	}
	apiKey, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || apiKey == "" {
		out.Status, out.How = http.StatusUnauthorized, "bad request"
		writeError(w, out.Status, "invalid_request_error", "invalid_api_key", "missing API key: send Authorization: Bearer KEY")
		return
	}
	out.Key = apiKey
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, g.cfg.MaxBody))
	if err != nil {
		out.Status, out.How = http.StatusRequestEntityTooLarge, "bad request"
		var tooBig *http.MaxBytesError
		if !errors.As(err, &tooBig) {
			out.Status = http.StatusBadRequest
		}
		writeError(w, out.Status, "invalid_request_error", "", fmt.Sprintf("the request body could not be read whole (at most %d bytes)", g.cfg.MaxBody))
		return
	}
	est, err := parseEstimate(body, g.cfg.DefaultMaxTokens)
	if err != nil {
		out.Status, out.How = http.StatusBadRequest, "bad request"
		writeError(w, out.Status, "invalid_request_error", "", err.Error())
		return
	}
	out.Stream, out.Estimate = est.Stream, est.Total
	if est.Stream && !est.WantsUsage {
		if body, err = withUsageRequested(body); err != nil {
			out.Status, out.How = http.StatusBadRequest, "bad request"
			writeError(w, out.Status, "invalid_request_error", "", err.Error())
			return
		}
	}

	ctx, key := r.Context(), storeKey(apiKey)
	req, err := g.requests.Reserve(ctx, "rpm:"+key)
	if err != nil {
		out.Status, out.How = http.StatusServiceUnavailable, "store error"
		writeError(w, out.Status, "server_error", "", "the rate limiter is unavailable")
		return
	}
	h := w.Header()
	h.Set("x-ratelimit-limit-requests", strconv.Itoa(g.cfg.RPM))
	h.Set("x-ratelimit-limit-tokens", strconv.Itoa(g.cfg.TPM))
	if !req.OK() {
		out.Status, out.How, out.RetryAfter = http.StatusTooManyRequests, "requests", req.RetryAfter()
		setLimit(h, "requests", 0, req.RetryAfter())
		refuse(w, "requests", req.RetryAfter(), fmt.Sprintf("Rate limit reached on requests per min (RPM): Limit %d. Please try again in %s.", g.cfg.RPM, resetString(req.RetryAfter())))
		return
	}
	tok, err := g.tokens.ReserveN(ctx, "tpm:"+key, est.Total)
	if err != nil || !tok.OK() {
		// Given back at once, the request is exact: as if never taken.
		g.settle(&req, 0)
		setLimit(h, "requests", req.Remaining(), req.FullIn())
		switch {
		case err != nil:
			out.Status, out.How = http.StatusServiceUnavailable, "store error"
			writeError(w, out.Status, "server_error", "", "the rate limiter is unavailable")
		case tok.RetryAfter() == math.MaxInt64:
			// More than a minute's tokens can never fit: no Retry-After,
			// as OpenAI answers a request too large for the limit.
			out.Status, out.How = http.StatusTooManyRequests, "too large"
			writeError(w, out.Status, "tokens", "rate_limit_exceeded", fmt.Sprintf("Request too large on tokens per min (TPM): Limit %d, Requested %d. The input or max_tokens must be reduced.", g.cfg.TPM, est.Total))
		default:
			out.Status, out.How, out.RetryAfter = http.StatusTooManyRequests, "tokens", tok.RetryAfter()
			setLimit(h, "tokens", 0, tok.RetryAfter())
			refuse(w, "tokens", tok.RetryAfter(), fmt.Sprintf("Rate limit reached on tokens per min (TPM): Limit %d, Requested %d. Please try again in %s.", g.cfg.TPM, est.Total, resetString(tok.RetryAfter())))
		}
		return
	}
	setLimit(h, "requests", req.Remaining(), req.FullIn())

	up, err := http.NewRequestWithContext(ctx, http.MethodPost, g.cfg.Upstream+"/v1/chat/completions", bytes.NewReader(body))
	if err == nil {
		up.Header.Set("Content-Type", "application/json")
		var resp *http.Response
		if resp, err = g.client.Do(up); err == nil {
			defer resp.Body.Close()
			if resp.StatusCode == http.StatusOK && est.Stream {
				out.Status, out.Settled, out.How = g.relay(w, resp, &tok, est)
				return
			}
			out.Status, out.Settled, out.How = g.respond(w, resp, &tok, est)
			return
		}
	}
	// No response: the upstream did no work we could see, unless the
	// client went away while it worked, which costs the prompt.
	out.Status, out.How = http.StatusBadGateway, "upstream error"
	if ctx.Err() != nil {
		out.Status, out.Settled, out.How = 499, est.Prompt, "cut"
	}
	g.settle(&tok, out.Settled)
	setLimit(h, "tokens", tok.Remaining(), tok.FullIn())
	writeError(w, http.StatusBadGateway, "server_error", "", "the upstream did not answer")
}

// respond relays a whole (not streamed) response, settled before it is
// written so that its headers show the settled state: at the usage's
// total_tokens on 200, at the estimate when a 200 carries no usage, at 0
// when the upstream failed (OpenAI does not bill a failed call; the
// request stays spent, so that failing calls still count against the
// requests limit).
func (g *gateway) respond(w http.ResponseWriter, resp *http.Response, tok *pace.SharedReservation, est estimate) (status, settled int, how string) {
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	var u struct {
		Usage *struct {
			TotalTokens int `json:"total_tokens"`
		} `json:"usage"`
	}
	switch {
	case resp.StatusCode != http.StatusOK:
		settled, how = 0, "upstream error"
	case err != nil:
		settled, how = est.Prompt, "cut"
	case json.Unmarshal(body, &u) == nil && u.Usage != nil:
		settled, how = u.Usage.TotalTokens, "usage"
	default:
		settled, how = est.Total, "no usage"
	}
	g.settle(tok, settled)
	setLimit(w.Header(), "tokens", tok.Remaining(), tok.FullIn())
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		w.Header().Set("Content-Type", ct)
	}
	w.WriteHeader(resp.StatusCode)
	w.Write(body)
	return resp.StatusCode, settled, how
}

// relay relays a streamed response event by event and settles when it
// ends: at the usage of the final chunk when one came (the gateway asks
// for it, see withUsageRequested); otherwise, stream cut by the client or
// by the upstream, or an upstream that sends no usage, at the prompt's
// estimate plus the content relayed so far at four bytes a token. That
// never settles a call the upstream worked on at 0, which would make
// cutting streams a way to call for free, and charges a cut stream for
// what its client received. The token headers, written before the
// stream, show the reservation of the estimate.
func (g *gateway) relay(w http.ResponseWriter, resp *http.Response, tok *pace.SharedReservation, est estimate) (status, settled int, how string) {
	setLimit(w.Header(), "tokens", tok.Remaining(), tok.FullIn())
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)

	usage, content := -1, 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	skip, wrote := false, false
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 {
			if !skip && wrote {
				if _, err := w.Write([]byte("\n")); err != nil {
					break
				}
				if rc.Flush() != nil {
					break
				}
			}
			skip, wrote = false, false
			continue
		}
		if data, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			data = bytes.TrimSpace(data)
			var chunk struct {
				Choices []struct {
					Delta struct {
						Content string `json:"content"`
					} `json:"delta"`
				} `json:"choices"`
				Usage *struct {
					TotalTokens int `json:"total_tokens"`
				} `json:"usage"`
			}
			if !bytes.Equal(data, []byte("[DONE]")) && json.Unmarshal(data, &chunk) == nil {
				for _, c := range chunk.Choices {
					content += len(c.Delta.Content)
				}
				if chunk.Usage != nil {
					usage = chunk.Usage.TotalTokens
					// The usage chunk the gateway asked for, kept from
					// a client that did not.
					skip = !est.WantsUsage && len(chunk.Choices) == 0
				}
			}
		}
		if skip {
			continue
		}
		if _, err := w.Write(append(line, '\n')); err != nil {
			break
		}
		wrote = true
	}
	if usage >= 0 {
		settled, how = usage, "usage"
	} else {
		settled, how = est.Prompt+(content+bytesPerToken-1)/bytesPerToken, "cut"
	}
	g.settle(tok, settled)
	return http.StatusOK, settled, how
}

// settle settles r at used with a context of its own: the request's may
// have ended with its client, and the settlement must still reach the
// store.
func (g *gateway) settle(r *pace.SharedReservation, used int) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	r.Settle(ctx, used) // a failure leaves the estimate reserved: stricter, never free
}

// setLimit writes the OpenAI headers of one limit ("requests" or
// "tokens"): what is left and the time until it is full again.
func setLimit(h http.Header, limit string, remaining int, reset time.Duration) {
	h.Set("x-ratelimit-remaining-"+limit, strconv.Itoa(max(remaining, 0)))
	h.Set("x-ratelimit-reset-"+limit, resetString(reset))
}

// resetString formats d as OpenAI's reset headers do, a Go duration
// ("6m0s", "1s", "12ms"), rounded up to the millisecond.
func resetString(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	return ((d + time.Millisecond - 1) / time.Millisecond * time.Millisecond).String()
}

// refuse answers 429 with Retry-After (whole seconds, rounded up) and
// retry-after-ms, which OpenAI's client libraries read first.
func refuse(w http.ResponseWriter, limit string, wait time.Duration, msg string) {
	w.Header().Set("Retry-After", strconv.FormatInt(int64((wait+time.Second-1)/time.Second), 10))
	w.Header().Set("retry-after-ms", strconv.FormatInt(int64((wait+time.Millisecond-1)/time.Millisecond), 10))
	writeError(w, http.StatusTooManyRequests, limit, "rate_limit_exceeded", msg)
}

// writeError writes an error in OpenAI's shape.
func writeError(w http.ResponseWriter, status int, typ, code, msg string) {
	var c any
	if code != "" {
		c = code
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": c}})
}
