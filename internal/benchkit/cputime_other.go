//go:build !unix

package benchkit

import "time"

// CPUTime reports zero: the process's CPU time is read on Unix only.
func CPUTime() time.Duration { return 0 }
