//go:build linux

package engine

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Go's sysmon thread and spinning ranks.
//
// sysmon is the runtime's monitor thread. After a system call wakes it
// from its deep sleep (Init makes many) it sleeps 20 µs at a time, 70 µs
// with the kernel's timer slack, for at least 50 rounds, and again after
// every P it retakes, then backs off to 10 ms. Each wake-up preempts a
// rank that spins on its CPU: the kernel favours a thread that has just
// woken. Timed one by one, a fresh 2-rank shm job's first 400 8-byte
// allreduces (a barrier before each) held a 50-100 µs call every 30-70
// calls, and windows of 200 calls after the first ran at 1.0-3.6 µs in
// stretches of up to 1,600 calls (in one job again from call 2,000 to
// 3,600), 0.7 µs otherwise (6 jobs; 2026-11-24). Open MPI's ranks have no
// such thread.
//
// quietSysmon gives sysmon's thread SCHED_IDLE: the kernel then runs it
// when a CPU has nothing else to run, or in the small share it grants that
// class, and never preempts a rank for it. With it, windows 2 to 10 of the
// same kind of job ran at 0.67-0.88 µs (3 jobs; a stray window of
// 1.25-6.1 µs in two).
// sysmon's work (retaking a P from a blocking system call, preempting a
// goroutine that runs for 10 ms, polling the network when nobody has for
// 10 ms, forcing a GC every 2 minutes) waits while the ranks spin; a
// spinning Run yields to the goroutines of its process (runtime.Gosched in
// wait.go), and a rank that sleeps leaves its CPU idle, where sysmon runs.
//
// The runtime does not name sysmon's thread. In an executable it is the
// first thread the runtime creates after the main one (runtime.main starts
// it before any package is initialized), so it has the smallest thread id
// after the process's own; and while it polls it is in nanosleep. Both are
// checked: a process where Go is a library (the C ABI: package
// initialization then runs on a thread that is not the main one) is left
// alone, and so is a thread that is not in nanosleep in any of a few
// looks.

// goMainThread: package initialization ran on the process's main thread,
// as it does in a Go executable (runtime.main locks it there).
var goMainThread = unix.Gettid() == unix.Getpid()

var sysmonOnce sync.Once

// quietSysmon gives sysmon's thread SCHED_IDLE, once per process; see
// above. The first call reports the thread id, or 0 when it left it
// alone; later calls do nothing and report 0.
func quietSysmon() (tid int) {
	sysmonOnce.Do(func() { tid = idleSysmon() })
	return tid
}

func idleSysmon() int {
	if !goMainThread {
		return 0
	}
	tid := sysmonTid()
	if tid <= 0 || tid == unix.Gettid() {
		return 0
	}
	for try := 0; ; try++ {
		if inNanosleep(tid) {
			break
		}
		if try == 4 {
			return 0
		}
		time.Sleep(50 * time.Microsecond)
	}
	var param struct{ priority int32 }
	if _, _, e := unix.RawSyscall(unix.SYS_SCHED_SETSCHEDULER, uintptr(tid), schedIdle, uintptr(unsafe.Pointer(&param))); e != 0 {
		return 0
	}
	return tid
}

const schedIdle = 5 // SCHED_IDLE

// sysmonTid is the smallest thread id of this process after its own pid.
func sysmonTid() int {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return 0
	}
	pid := unix.Getpid()
	var tids []int
	for _, e := range ents {
		if t, err := strconv.Atoi(e.Name()); err == nil && t != pid {
			tids = append(tids, t)
		}
	}
	if len(tids) == 0 {
		return 0
	}
	return slices.Min(tids)
}

// inNanosleep reports whether thread tid of this process is blocked in
// nanosleep or clock_nanosleep (/proc's syscall file: the number first).
func inNanosleep(tid int) bool {
	b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/syscall")
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return false
	}
	n, err := strconv.Atoi(f[0])
	return err == nil && (n == unix.SYS_NANOSLEEP || n == unix.SYS_CLOCK_NANOSLEEP)
}
