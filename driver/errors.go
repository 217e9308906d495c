package driver

import (
	"fmt"
	"math"

	"github.com/ratepace/pace/internal/errs"
)

// invalid returns an error wrapping pace.ErrInvalidArgument, in the order
// every package of the module writes its errors: "driver: what went wrong: "
// and then the sentinel's text.
func invalid(format string, args ...any) error {
	return fmt.Errorf("driver: "+format+": %w", append(args, errs.InvalidArgument)...)
}

// finitePositive reports whether x is a finite number above zero.
func finitePositive(x float64) bool {
	return x > 0 && !math.IsInf(x, 1) // NaN fails x > 0
}
