//go:build unix

package benchkit

import (
	"syscall"
	"time"
)

// CPUTime reports the CPU time (user and system) the process has used, all
// its threads together: on a machine shared with other work, CPU time per
// operation is what a request costs, where wall time also counts the waits
// for a core.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
