package pacer_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/pacer"
)

// TestTransportWithoutPacer pins the rule of Transport and GroupTransport,
// which have no error result: without a Pacer (or a Group and its key
// function), every request fails, unsent, with an error wrapping
// pace.ErrInvalidArgument, and nothing panics.
func TestTransportWithoutPacer(t *testing.T) {
	var sent atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { sent.Add(1) }))
	t.Cleanup(srv.Close)
	key := func(*http.Request) string { return "k" }
	for name, rt := range map[string]http.RoundTripper{
		"Transport(nil)":             pacer.Transport(nil, nil),
		"GroupTransport(nil group)":  pacer.GroupTransport(nil, nil, key),
		"GroupTransport(nil key fn)": pacer.GroupTransport(nil, pacer.MustNewGroup(), nil),
	} {
		req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := rt.RoundTrip(req)
		if resp != nil || !errors.Is(err, pace.ErrInvalidArgument) {
			t.Errorf("%s: RoundTrip = %v, %v; want nil and an error wrapping ErrInvalidArgument", name, resp, err)
		}
	}
	if n := sent.Load(); n != 0 {
		t.Errorf("%d requests reached the server; want none", n)
	}
}
