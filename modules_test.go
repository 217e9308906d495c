package pace_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestNestedModulesRequireARelease: every nested module requires the root
// by a release version (vX.Y.Z), never a pseudo-version or v0.0.0, so that
// `go get github.com/ratepace/pace/redisstore` resolves once the release is
// tagged; the replace to the working tree is for the clone only.
func TestNestedModulesRequireARelease(t *testing.T) {
	mods, err := filepath.Glob("*/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	more, _ := filepath.Glob("*/*/go.mod")
	mods = append(mods, more...)
	if len(mods) < 4 {
		t.Fatalf("found %d nested modules; want redisstore, pgstore, grpclimit, bench at least", len(mods))
	}
	release := regexp.MustCompile(`^\s*github\.com/ratepace/pace v([1-9][0-9]*|0)\.[0-9]+\.[0-9]+$`)
	for _, m := range mods {
		f, err := os.Open(m)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line := strings.TrimPrefix(sc.Text(), "require ")
			if !strings.Contains(line, "github.com/ratepace/pace v") || strings.Contains(line, "=>") {
				continue
			}
			found = true
			if !release.MatchString(line) || strings.Contains(line, " v0.0.0") {
				t.Errorf("%s: %q; want the root required at the version of the next release (vX.Y.Z)", m, strings.TrimSpace(line))
			}
		}
		f.Close()
		if !found {
			t.Errorf("%s does not require github.com/ratepace/pace", m)
		}
	}
}

// TestGodocShort: the root package's `go doc -short` fits in 30 lines (what
// users call, and the seed's names; the implementer's kit is in driver).
func TestGodocShort(t *testing.T) {
	out, err := exec.Command("go", "doc", "-short", ".").Output()
	if err != nil {
		t.Fatalf("go doc -short .: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) > 30 {
		t.Errorf("go doc -short . is %d lines; want at most 30:\n%s", len(lines), out)
	}
}
