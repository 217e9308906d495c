//go:build unix

package httplimit_test

import (
	"syscall"
	"time"
)

// cpuTime reports the CPU time (user and system) the process has used, all
// its threads together: on a machine shared with other work, CPU time per
// operation is what a request costs, where wall time also counts the waits
// for a core.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
