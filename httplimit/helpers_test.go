package httplimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/ratepace/pace/driver"
	"github.com/ratepace/pace/httplimit"
	"github.com/ratepace/pace/internal/limittest"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// newClock, newPace and counter are limittest's, shared with grpclimit's
// tests.
var (
	newClock = limittest.NewClock
	newPace  = limittest.NewPace
)

type counter = limittest.Counter

// mustNew is httplimit.New, failing the test on an error.
func mustNew(t testing.TB, limits []httplimit.Limit, opts ...httplimit.Option) *httplimit.Middleware {
	t.Helper()
	m, err := httplimit.New(limits, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// serve runs r through h and returns the recorded response.
func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// from returns a GET request from the given address.
func from(addr string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = addr + ":1234"
	return r
}

// problemOf decodes an RFC 9457 problem details body, checking its media
// type.
func problemOf(t *testing.T, w *httptest.ResponseRecorder) map[string]any {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type = %q; want application/problem+json", ct)
	}
	var p map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatalf("body %q: %v", w.Body, err)
	}
	if int(p["status"].(float64)) != w.Code {
		t.Fatalf("problem status %v, response status %d", p["status"], w.Code)
	}
	return p
}

// ok is a handler that answers 200 "ok".
var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })

// tokenHandler is a token endpoint's handler: 401 unless the form's
// client_secret is "right", after check runs (a stand-in for a password
// hash). When verify is set it calls httplimit.Verified after a successful
// check.
func tokenHandler(check func(r *http.Request), verify bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			http.Error(w, "bad form", http.StatusBadRequest)
			return
		}
		if check != nil {
			check(r)
		}
		if r.PostForm.Get("client_secret") != "right" {
			http.Error(w, `{"error":"invalid_client"}`, http.StatusUnauthorized)
			return
		}
		if verify && !httplimit.Verified(w, r) {
			return
		}
		w.Write([]byte(`{"access_token":"t"}`))
	})
}

// tokenRequest is a client-credentials request for id with secret, from
// addr.
func tokenRequest(addr, id, secret string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/token", strings.NewReader("grant_type=client_credentials&client_id="+id+"&client_secret="+secret))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.RemoteAddr = addr + ":1234"
	return r
}

var errDown = errors.New("backend: connection refused")

// downStore is a pace.Store whose every call fails as a dead backend does.
type downStore struct{}

func (downStore) TokenBucket(context.Context, string, float64, float64, float64) (bool, time.Duration, error) {
	return false, 0, errDown
}
func (downStore) AcquireSlot(context.Context, string, int64, time.Duration) (bool, int64, error) {
	return false, 0, errDown
}
func (downStore) AcquireSlotBurst(context.Context, string, int64, int64, time.Duration, time.Duration) (bool, int64, error) {
	return false, 0, errDown
}
func (downStore) ReleaseSlot(context.Context, string) error                     { return errDown }
func (downStore) RefreshSlot(context.Context, string, time.Duration) error      { return errDown }
func (downStore) ReleaseSlotBurst(context.Context, string) error                { return errDown }
func (downStore) RefreshSlotBurst(context.Context, string, time.Duration) error { return errDown }
func (downStore) Get(context.Context, string) ([]byte, error)                   { return nil, errDown }
func (downStore) Set(context.Context, string, []byte, time.Duration) error      { return errDown }
func (downStore) Delete(context.Context, string) error                          { return errDown }
func (downStore) Close(context.Context) error                                   { return nil }
func (downStore) Take(context.Context, string, []driver.Shape) (driver.Grant, error) {
	return driver.Grant{}, errDown
}
func (downStore) TakeMany(context.Context, []string, []driver.Shape, []driver.Grant) error {
	return errDown
}
func (downStore) Refund(context.Context, string, []driver.Shape, driver.Receipt) error {
	return errDown
}
