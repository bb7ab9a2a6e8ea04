package trace

import (
	"time"

	"golang.org/x/sys/unix"
)

// base pairs a reading of Go's monotonic clock with CLOCK_MONOTONIC, so
// that Now costs one vDSO clock read and gives absolute CLOCK_MONOTONIC
// times, comparable across the processes of a host (and shifted, as the
// kernel's, inside a time namespace).
var (
	baseTime = time.Now()
	baseMono = func() int64 {
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
			return 0
		}
		return ts.Nano()
	}()
)

// Now is the current CLOCK_MONOTONIC time in nanoseconds.
func Now() int64 { return baseMono + int64(time.Since(baseTime)) }
