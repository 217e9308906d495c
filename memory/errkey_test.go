package memory_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/memory"
)

// TestGetNotFoundErrorOmitsKey: the project's standard says error strings
// never contain a key or other client-supplied text (and pgstore's Get does
// not). memory's Get of an absent key quotes the key, which is often a
// client-chosen id, into an error that callers log or return.
func TestGetNotFoundErrorOmitsKey(t *testing.T) {
	s := memory.New()
	const key = "client-chosen <script>"
	_, err := s.Get(context.Background(), key)
	if !errors.Is(err, pace.ErrNotFound) {
		t.Fatalf("Get of an absent key: %v", err)
	}
	if strings.Contains(err.Error(), "client-chosen") {
		t.Fatalf("the error of Get echoes the key: %q", err)
	}
}
