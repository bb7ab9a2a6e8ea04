package tcp

import "golang.org/x/sys/unix"

// schedYield gives the CPU to another process (sched_yield).
func schedYield() { unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }
