package pacersim

import (
	"os"
	"testing"
)

func TestTuneTable(t *testing.T) {
	if os.Getenv("PACERSIM_TABLE") == "" {
		t.Skip("set PACERSIM_TABLE=1")
	}
	WriteTable(os.Stdout, Compare(1))
}
