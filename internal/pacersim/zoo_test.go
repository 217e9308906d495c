package pacersim

import (
	"bytes"
	"os"
	"testing"
)

// TestZooTable prints the zoo table of the pacer, worst over seeds 1–6,
// when PACERSIM_ZOO_TABLE names a file to write it to:
//
//	PACERSIM_ZOO_TABLE=/tmp/zoo.md go test ./internal/pacersim -run TestZooTable -timeout 1h
func TestZooTable(t *testing.T) {
	out := os.Getenv("PACERSIM_ZOO_TABLE")
	if out == "" {
		t.Skip("PACERSIM_ZOO_TABLE is not set")
	}
	var b bytes.Buffer
	WriteZooTable(&b, ZooWorst(NewPacer, seeds))
	if err := os.WriteFile(out, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + b.String())
}
