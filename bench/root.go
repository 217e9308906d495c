package bench

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
)

// RepoRoot returns the root of the repository the commands of bench/cmd
// run in: the directory of its go.work.
func RepoRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOWORK").Output()
	if err != nil {
		return "", fmt.Errorf("bench: go env GOWORK: %w", err)
	}
	work := strings.TrimSpace(string(out))
	if work == "" || work == "off" {
		return "", errors.New("bench: run it from inside the repository, where go.work is (go run ./bench/cmd/...)")
	}
	return filepath.Dir(work), nil
}
