package collectives

import "golang.org/x/sys/unix"

// yieldCPU lets another process run on this CPU (runtime.Gosched only
// yields to this process's goroutines).
func yieldCPU() { unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }
