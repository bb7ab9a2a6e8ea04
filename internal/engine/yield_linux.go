package engine

import "golang.org/x/sys/unix"

// yieldCPU lets another process run on this CPU (runtime.Gosched only
// yields to this process's goroutines). A raw system call: sched_yield
// never blocks, and through syscall.Syscall the runtime would count the
// time the thread spends off the CPU, while the other process runs, as a
// blocking call: sysmon retakes the P (a thread hand-off) and, seeing
// such work every round, polls every 20 µs instead of every 10 ms, a
// context switch each time on a host whose CPUs are already shared.
func yieldCPU() { unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }
