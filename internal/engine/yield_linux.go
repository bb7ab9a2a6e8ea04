package engine

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// yieldCPU lets another process run on this CPU (runtime.Gosched only
// yields to this process's goroutines). A raw system call: sched_yield
// never blocks, and through syscall.Syscall the runtime would count the
// time the thread spends off the CPU, while the other process runs, as a
// blocking call: sysmon retakes the P (a thread hand-off) and, seeing
// such work every round, polls every 20 µs instead of every 10 ms, a
// context switch each time on a host whose CPUs are already shared.
func yieldCPU() { unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }

// leaveCPU has the kernel run this thread on another CPU of its affinity
// mask at once: it takes the current CPU out of the mask, which migrates
// the thread, then puts the mask back (the thread stays where it went). It
// does nothing for a thread bound to one CPU. See leaveAfter (wait.go).
func leaveCPU() {
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) != nil || set.Count() < 2 {
		return
	}
	var cpu uint32
	if _, _, e := unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&cpu)), 0, 0); e != 0 {
		return
	}
	away := set
	away.Clear(int(cpu))
	if away.Count() == 0 || unix.SchedSetaffinity(0, &away) != nil {
		return
	}
	unix.SchedSetaffinity(0, &set)
}
