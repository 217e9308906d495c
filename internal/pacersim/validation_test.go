package pacersim

import (
	"os"
	"strings"
	"testing"
)

func TestValidationTablePrint(t *testing.T) {
	if os.Getenv("PACERSIM_VAL") == "" {
		t.Skip()
	}
	var b strings.Builder
	WriteZooTable(&b, Worst(Validation, ValidationScenarios, NewPacer, seeds))
	t.Log("\n" + b.String())
}
