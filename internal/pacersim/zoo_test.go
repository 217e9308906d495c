package pacersim

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestZooTable prints the zoo table of the pacer, worst over seeds 1–6,
// when PACERSIM_ZOO_TABLE names a file to write it to:
//
//	PACERSIM_ZOO_TABLE=/tmp/zoo.md go test ./internal/pacersim -run TestZooTable -timeout 1h
//
// PACERSIM_ZOO_SEEDS=1,2 runs other seeds; PACERSIM_ZOO_MAXLIMIT=1000
// leaves out the kinds with a higher limit (the slowest to simulate);
// PACERSIM_ZOO_KINDS='20/2s|no reset' keeps only the kinds whose name, as
// the table writes it, holds one of the |-separated parts.
func TestZooTable(t *testing.T) {
	out := os.Getenv("PACERSIM_ZOO_TABLE")
	if out == "" {
		t.Skip("PACERSIM_ZOO_TABLE is not set")
	}
	ss := seeds
	if v := os.Getenv("PACERSIM_ZOO_SEEDS"); v != "" {
		ss = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.ParseUint(f, 10, 64)
			if err != nil {
				t.Fatalf("PACERSIM_ZOO_SEEDS=%q: %v", v, err)
			}
			ss = append(ss, n)
		}
	}
	if v := os.Getenv("PACERSIM_ZOO_MAXLIMIT"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("PACERSIM_ZOO_MAXLIMIT=%q: %v", v, err)
		}
		saved := Zoo
		defer func() { Zoo = saved }()
		Zoo = nil
		for _, k := range saved {
			if k.Limit <= n {
				Zoo = append(Zoo, k)
			}
		}
	}
	if v := os.Getenv("PACERSIM_ZOO_KINDS"); v != "" {
		saved := Zoo
		defer func() { Zoo = saved }()
		Zoo = nil
		for _, k := range saved {
			for _, part := range strings.Split(v, "|") {
				if strings.Contains(k.String(), part) {
					Zoo = append(Zoo, k)
					break
				}
			}
		}
	}
	var b bytes.Buffer
	WriteZooTable(&b, ZooWorst(NewPacer, ss))
	if err := os.WriteFile(out, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + b.String())
}
