package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
)

// The estimate of a chat completion, reserved before the call and settled
// at the upstream's usage afterwards:
//
//	prompt   = Σ over messages (ceil(bytes of the message's text / 4) + 4)
//	estimate = prompt + n × max_tokens
//
// Four bytes a token is the rule of thumb of OpenAI's documentation for
// English text; the 4 per message stand for the role and the separators
// the model's chat format adds. Only text counts (a string content, or the
// "text" of each part of an array content); images and tool calls are not
// estimated. max_tokens (or max_completion_tokens, the newer name) is the
// most the upstream may generate per choice; when the request names
// neither, defaultMaxTokens stands for it. An upstream that generates more
// than the estimate is settled at its usage all the same: the key then owes
// the difference, and its next calls wait until it is repaid.
const (
	bytesPerToken     = 4
	tokensPerMessage  = 4
	defaultMaxTokens  = 1024
	defaultMaxBody    = 1 << 20 // bytes of a request body read at most
	maxEstimateTokens = math.MaxInt32
)

// errBadRequest is what every malformed request body wraps: the gateway
// answers it with 400 and the error's text.
var errBadRequest = errors.New("invalid request")

// chatRequest is what the gateway reads of a chat completion request; the
// body is forwarded as it came (but for stream_options, see
// withUsageRequested).
type chatRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	MaxTokens           *int64 `json:"max_tokens"`
	MaxCompletionTokens *int64 `json:"max_completion_tokens"`
	N                   *int64 `json:"n"`
	Stream              bool   `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// estimate is a request's reservation: its prompt part and the whole.
type estimate struct {
	Prompt int // the prompt's estimated tokens
	Total  int // Prompt + n × max_tokens, at most maxEstimateTokens
	Stream bool
	// WantsUsage reports whether the client asked for the usage chunk at
	// the end of a stream (stream_options.include_usage).
	WantsUsage bool
}

// parseEstimate reads a chat completion request body and estimates its
// tokens. A body that is not a JSON object of that shape, or whose numbers
// are out of range, is an error wrapping errBadRequest whose text names
// the field and the offset, never the client's text.
func parseEstimate(body []byte, defaultMax int) (estimate, error) {
	var req chatRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&req); err != nil {
		return estimate{}, jsonError(err)
	}
	if dec.More() {
		return estimate{}, fmt.Errorf("%w: the body holds more than one JSON value", errBadRequest)
	}
	if len(req.Messages) == 0 {
		return estimate{}, fmt.Errorf("%w: messages: want at least one message", errBadRequest)
	}
	var e estimate
	prompt := int64(0)
	for i, m := range req.Messages {
		n, err := textBytes(m.Content)
		if err != nil {
			return estimate{}, fmt.Errorf("%w: messages[%d].content: %v", errBadRequest, i, err)
		}
		prompt += (n+bytesPerToken-1)/bytesPerToken + tokensPerMessage
	}
	maxTokens := int64(defaultMax)
	for _, f := range []struct {
		name string
		v    *int64
	}{{"max_tokens", req.MaxTokens}, {"max_completion_tokens", req.MaxCompletionTokens}} {
		if f.v == nil {
			continue
		}
		if *f.v < 1 {
			return estimate{}, fmt.Errorf("%w: %s: want an integer of at least 1", errBadRequest, f.name)
		}
		maxTokens = *f.v
	}
	choices := int64(1)
	if req.N != nil {
		if *req.N < 1 || *req.N > 128 {
			return estimate{}, fmt.Errorf("%w: n: want an integer between 1 and 128", errBadRequest)
		}
		choices = *req.N
	}
	// Saturate rather than overflow: an estimate that large never fits a
	// bucket and is refused as too large.
	total := int64(maxEstimateTokens)
	if maxTokens <= (maxEstimateTokens-prompt)/choices {
		total = prompt + choices*maxTokens
	}
	e.Prompt = int(min(prompt, maxEstimateTokens))
	e.Total = int(total)
	e.Stream = req.Stream
	e.WantsUsage = req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	return e, nil
}

// textBytes returns the bytes of text in a message's content: a string, an
// array of parts whose "text" counts, or null.
func textBytes(raw json.RawMessage) (int64, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return 0, nil
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, errors.New("want a string or an array of parts")
		}
		return int64(len(s)), nil
	case '[':
		var parts []struct {
			Text string `json:"text"`
		}
		if err := json.Unmarshal(raw, &parts); err != nil {
			return 0, errors.New("want a string or an array of parts")
		}
		n := int64(0)
		for _, p := range parts {
			n += int64(len(p.Text))
		}
		return n, nil
	}
	return 0, errors.New("want a string or an array of parts")
}

// jsonError turns a decoding error into an errBadRequest that names where
// the body went wrong, without quoting it.
func jsonError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Errorf("%w: the body is not valid JSON (at byte %d)", errBadRequest, syn.Offset)
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			field = "the body"
		}
		return fmt.Errorf("%w: %s: want a %s (at byte %d)", errBadRequest, field, kindOf(typ.Type.Kind().String()), typ.Offset)
	case errors.Is(err, io.EOF):
		return fmt.Errorf("%w: the body is empty; want a JSON object", errBadRequest)
	}
	return fmt.Errorf("%w: the body is not valid JSON", errBadRequest)
}

// kindOf names a Go kind as JSON does.
func kindOf(k string) string {
	switch k {
	case "int", "int64", "float64":
		return "number"
	case "slice":
		return "array"
	case "struct", "map", "ptr":
		return "object"
	case "bool":
		return "boolean"
	}
	return k
}

// withUsageRequested returns body with stream_options.include_usage set to
// true, other fields kept: the gateway asks every streamed completion for
// its usage, so that it can settle at it, and keeps the usage chunk from a
// client that did not ask for it.
func withUsageRequested(body []byte) ([]byte, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return nil, jsonError(err)
	}
	opts := map[string]json.RawMessage{}
	if raw, ok := fields["stream_options"]; ok && string(bytes.TrimSpace(raw)) != "null" {
		if err := json.Unmarshal(raw, &opts); err != nil {
			return nil, fmt.Errorf("%w: stream_options: want an object", errBadRequest)
		}
	}
	opts["include_usage"] = json.RawMessage("true")
	var err error
	if fields["stream_options"], err = json.Marshal(opts); err != nil {
		return nil, err
	}
	return json.Marshal(fields)
}
