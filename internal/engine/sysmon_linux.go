//go:build linux

package engine

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Go's sysmon thread and spinning ranks.
//
// sysmon is the runtime's monitor thread. After a system call wakes it
// from its deep sleep (Init makes many) it sleeps 20 µs at a time, 70 µs
// with the kernel's timer slack, for at least 50 rounds, and again after
// every P it retakes, then backs off to 10 ms. Each wake-up preempts a
// rank that spins on its CPU: the kernel favours a thread that has just
// woken (README, "Go's sysmon thread").
//
// slowSysmon raises sysmon's timer slack to sysmonSlack, so that the
// kernel may end each of its short sleeps up to that much later: it then
// wakes at most a few hundred times a second instead of every 70 µs. It
// stays at normal priority and runs whenever it wakes: SCHED_IDLE, tried
// before, froze ranks beside other busy processes (SetWait, engine.go).
// Its work is only later by the slack: taking a P back from a blocking
// system call (gorun's own sleeps are in the netpoller and need none),
// preempting a goroutine that runs for 10 ms, polling the network when
// nobody has for 10 ms.
//
// The runtime does not name sysmon's thread. In an executable it is the
// first thread the runtime creates after the main one (runtime.main starts
// it before any package is initialized), so it has the smallest thread id
// after the process's own; and it is asleep: in nanosleep while it polls,
// in a futex wait in its deep sleep (every P idle, as while Init waits for
// its peers). Both are checked: a process where Go is a library (the C
// ABI: package initialization then runs on a thread that is not the main
// one) is left alone, and so is a thread in neither sleep in any of a few
// looks.
//
// Another thread's timer slack is written at /proc/TID/timerslack_ns
// (Linux lists the file among a process's entries, not a thread's, so
// /proc/self/task/TID has none) and needs CAP_SYS_NICE; without it sysmon
// is left alone. Until 2026-11-27 the write went to the task directory,
// failed, and no slack was ever set (README, "Go's sysmon thread").

// sysmonSlack is sysmon's timer slack (the kernel's default is 50 µs).
const sysmonSlack = 2 * time.Millisecond

var sysmonOnce sync.Once

// slowSysmon raises sysmon's timer slack, once per process; see above.
// The first call reports the thread id, or 0 when it left it alone; later
// calls do nothing and report 0.
func slowSysmon() (tid int) {
	sysmonOnce.Do(func() { tid = slackSysmon() })
	return tid
}

func slackSysmon() int {
	if !goMainThread {
		return 0
	}
	tid := sysmonTid()
	if tid <= 0 || tid == unix.Gettid() {
		return 0
	}
	for try := 0; ; try++ {
		if inSysmonSleep(tid) {
			break
		}
		if try == 4 {
			return 0
		}
		time.Sleep(50 * time.Microsecond)
	}
	if os.WriteFile(slackPath(tid), []byte(strconv.FormatInt(int64(sysmonSlack), 10)), 0) != nil {
		return 0 // EPERM without CAP_SYS_NICE
	}
	return tid
}

// slackPath is the file of thread tid's timer slack.
func slackPath(tid int) string { return "/proc/" + strconv.Itoa(tid) + "/timerslack_ns" }

// goMainThread: package initialization ran on the process's main thread,
// as it does in a Go executable (runtime.main locks it there).
var goMainThread = unix.Gettid() == unix.Getpid()

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

// inSysmonSleep reports whether thread tid of this process is blocked in
// one of sysmon's sleeps: nanosleep or clock_nanosleep (usleep), or a
// futex wait (notetsleep). /proc's syscall file gives the number first.
func inSysmonSleep(tid int) bool {
	b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/syscall")
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return false
	}
	n, err := strconv.Atoi(f[0])
	return err == nil && (n == unix.SYS_NANOSLEEP || n == unix.SYS_CLOCK_NANOSLEEP || n == unix.SYS_FUTEX)
}
