package pacersim

import (
	"bytes"
	"strings"
	"testing"
)

func TestWriteTable(t *testing.T) {
	var b bytes.Buffer
	WriteTable(&b, table())
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if want := 2 + 5*len(Policies); len(lines) != want {
		t.Fatalf("table has %d lines; want %d (header, rule, one row per scenario and policy)", len(lines), want)
	}
	t.Log("\n" + b.String())
}
