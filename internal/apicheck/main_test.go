package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckSeesEveryKindOfChange writes a package, records it, then changes
// its API in each way a user would notice and wants the check to report it.
func TestCheckSeesEveryKindOfChange(t *testing.T) {
	const base = `package p

// T is a type.
type T struct {
	A int
	b int
}

// I is an interface.
type I interface{ M(x int) error }

// F is a function.
func F(a, b string) (n int, err error) { return 0, nil }

// M is a method.
func (t *T) M() {}

func (t *T) hidden() {}

// C is a constant.
const C = 3
`
	changes := map[string]string{
		"field added":      strings.Replace(base, "A int", "A int\n\tZ string", 1),
		"param changed":    strings.Replace(base, "F(a, b string)", "F(a string, b int)", 1),
		"result changed":   strings.Replace(base, "(n int, err error)", "(n int64, err error)", 1),
		"method removed":   strings.Replace(base, "func (t *T) M() {}", "", 1),
		"interface method": strings.Replace(base, "M(x int) error", "M(x int) bool", 1),
		"constant value":   strings.Replace(base, "C = 3", "C = 4", 1),
		"receiver kind":    strings.Replace(base, "func (t *T) M()", "func (t T) M()", 1),
	}
	same := map[string]string{
		"param renamed":     strings.Replace(base, "F(a, b string)", "F(x, y string)", 1),
		"unexported change": strings.Replace(base, "b int", "b string", 1),
		"doc changed":       strings.Replace(base, "// F is a function.", "// F does nothing.", 1),
	}
	record := func(t *testing.T, src string) string {
		t.Helper()
		root := t.TempDir()
		if err := os.MkdirAll(filepath.Join(root, "p"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "p", "p.go"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return root
	}
	root := record(t, base)
	pkgs, err := collect(root)
	if err != nil {
		t.Fatal(err)
	}
	apiDir := filepath.Join(t.TempDir(), "api")
	if err := writeAll(apiDir, pkgs); err != nil {
		t.Fatal(err)
	}
	if d := check(apiDir, pkgs); len(d) != 0 {
		t.Fatalf("check of the code just recorded = %q; want no difference", d)
	}
	for name, src := range changes {
		got, err := collect(record(t, src))
		if err != nil {
			t.Fatal(err)
		}
		if d := check(apiDir, rename(got, pkgs)); len(d) == 0 {
			t.Errorf("%s: check found no difference; want one", name)
		}
	}
	for name, src := range same {
		got, err := collect(record(t, src))
		if err != nil {
			t.Fatal(err)
		}
		if d := check(apiDir, rename(got, pkgs)); len(d) != 0 {
			t.Errorf("%s: check = %q; want no difference", name, d)
		}
	}
}

// rename gives got's single package the import path of want's, since the
// two were collected from different temporary roots.
func rename(got, want map[string][]string) map[string][]string {
	out := map[string][]string{}
	for w := range want {
		for _, lines := range got {
			out[w] = lines
		}
	}
	return out
}
