package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// The fake upstream answers chat completions deterministically:
//
//	prompt_tokens     = Σ over messages (words of the content + 3) + 3
//	completion_tokens = min(max_tokens, 20 + 25 × words of the last message), per choice
//
// streamed five tokens ("tok " each) a chunk, with the usage chunk at the
// end when stream_options.include_usage asks for it. Three models
// misbehave on purpose: "fake-error" answers 500, "fake-cut" breaks the
// connection after three chunks, and "fake-hang" sends three chunks and
// then waits for its client to go away (at most ten seconds).
func fakeUpstream() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model    string `json:"model"`
			Messages []struct {
				Content string `json:"content"`
			} `json:"messages"`
			MaxTokens     *int `json:"max_tokens"`
			N             *int `json:"n"`
			Stream        bool `json:"stream"`
			StreamOptions *struct {
				IncludeUsage bool `json:"include_usage"`
			} `json:"stream_options"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
			writeError(w, http.StatusBadRequest, "invalid_request_error", "", "fake upstream: unreadable request")
			return
		}
		if req.Model == "fake-error" {
			writeError(w, http.StatusInternalServerError, "server_error", "", "fake upstream: failed on purpose")
			return
		}
		prompt := 3
		for _, m := range req.Messages {
			prompt += len(strings.Fields(m.Content)) + 3
		}
		perChoice := 20 + 25*len(strings.Fields(req.Messages[len(req.Messages)-1].Content))
		if req.MaxTokens != nil {
			perChoice = min(perChoice, max(*req.MaxTokens, 0))
		}
		choices := 1
		if req.N != nil && *req.N > 1 {
			choices = *req.N
		}
		usage := map[string]int{"prompt_tokens": prompt, "completion_tokens": perChoice * choices, "total_tokens": prompt + perChoice*choices}
		if !req.Stream {
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(map[string]any{
				"id": "chatcmpl-fake", "object": "chat.completion", "model": req.Model,
				"choices": []any{map[string]any{"index": 0, "finish_reason": "stop",
					"message": map[string]any{"role": "assistant", "content": strings.Repeat("tok ", perChoice)}}},
				"usage": usage,
			})
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		send := func(v any) {
			b, _ := json.Marshal(v)
			fmt.Fprintf(w, "data: %s\n\n", b)
			rc.Flush()
		}
		chunk := func(content string, finish any) map[string]any {
			return map[string]any{"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": req.Model,
				"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": content}, "finish_reason": finish}}}
		}
		for i := 0; i < perChoice*choices; i += 5 {
			if i == 15 {
				switch req.Model {
				case "fake-cut":
					panic(http.ErrAbortHandler) // the connection breaks mid-stream
				case "fake-hang":
					select {
					case <-r.Context().Done():
					case <-time.After(10 * time.Second):
					}
					return
				}
			}
			send(chunk(strings.Repeat("tok ", min(5, perChoice*choices-i)), nil))
		}
		send(chunk("", "stop"))
		if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
			send(map[string]any{"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": req.Model, "choices": []any{}, "usage": usage})
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	})
}
