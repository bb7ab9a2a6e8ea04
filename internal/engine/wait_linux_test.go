package engine

import (
	"os"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSetWaitLeavesThreadsAlone: no wait policy changes the scheduling
// policy or priority of any thread of the process. Go's sysmon must run when
// other processes keep the CPUs busy: it alone takes a P back from a
// goroutine blocked in a system call and preempts a long-running one, and
// with one P per rank gossip and tcp handshakes wait for it (SetWait's
// comment).
func TestSetWaitLeavesThreadsAlone(t *testing.T) {
	for _, p := range []WaitPolicy{{}, {Spin: DefaultSpin}, {Spin: DefaultSpin, Yield: true}, DefaultWait(1), DefaultWait(1 << 10)} {
		e := &Engine{}
		e.SetWait(p)
	}
	prs := threadPriorities(t)
	main, ok := prs[os.Getpid()]
	if !ok {
		t.Fatal("no main thread in /proc/self/task")
	}
	for tid, pr := range prs {
		if pr != main {
			t.Errorf("thread %d: scheduling policy and priority %v, the main thread's %v", tid, pr, main)
		}
	}
}

// threadPriorities maps each thread of this process to its scheduling
// policy and priority (getpriority's value: 20 - nice).
func threadPriorities(t *testing.T) map[int][2]int {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	m := make(map[int][2]int)
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		pol, _, errno := unix.RawSyscall(unix.SYS_SCHED_GETSCHEDULER, uintptr(tid), 0, 0)
		if errno != 0 {
			continue // the thread exited
		}
		nice, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
		if err != nil {
			continue
		}
		m[tid] = [2]int{int(pol), nice}
	}
	return m
}
