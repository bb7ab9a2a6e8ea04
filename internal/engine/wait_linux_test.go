package engine

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSetWaitLeavesThreadsAlone: no wait policy changes the scheduling
// policy or priority of any thread of the process (a spinning one raises
// sysmon's timer slack only: TestSlowSysmon). Go's sysmon must run when
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

// TestSlowSysmon: in a Go executable (this test binary) the thread
// slowSysmon picks is sysmon's, and it alone of the process's threads
// gets the larger timer slack.
func TestSlowSysmon(t *testing.T) {
	if !goMainThread {
		t.Fatal("package initialization did not run on the main thread of a Go executable")
	}
	// A goroutine that spins, as an engine does: sysmon then polls (in
	// nanosleep) rather than sleeping deeply as it does when every P is
	// idle.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
				runtime.Gosched()
			}
		}
	}()
	tid := sysmonTid()
	if slackOf(tid) < 0 {
		t.Fatalf("sysmon's thread %d: no timer slack at %s", tid, slackPath(tid))
	}
	slowSysmon() // once per process: an earlier test's SetWait may have made the call
	for try := 0; slackOf(tid) != int(sysmonSlack) && try < 100; try++ {
		if slackSysmon() == 0 && !canSetSlack() {
			t.Skip("another thread's timer slack needs CAP_SYS_NICE; this process has not got it")
		}
		time.Sleep(time.Millisecond)
	}
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, e := range ents {
		id, _ := strconv.Atoi(e.Name())
		slack := slackOf(id)
		if slack < 0 {
			continue // the thread exited
		}
		seen++
		if want := id == tid; (slack == int(sysmonSlack)) != want {
			t.Errorf("thread %d (sysmon %d): timer slack %d ns", id, tid, slack)
		}
	}
	if seen < 2 {
		t.Fatalf("read the timer slack of %d threads: the test looked at nothing", seen)
	}
}

// canSetSlack reports whether this process may set another thread's timer
// slack (CAP_SYS_NICE): it tries on another of its threads, then restores
// it.
func canSetSlack() bool {
	done := make(chan bool)
	tid := make(chan int)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		tid <- unix.Gettid()
		<-done
	}()
	id := <-tid
	defer close(done)
	old := slackOf(id)
	if old < 0 {
		return false
	}
	err := os.WriteFile(slackPath(id), []byte(strconv.Itoa(old+1)), 0)
	os.WriteFile(slackPath(id), []byte(strconv.Itoa(old)), 0)
	return err == nil
}

// slackOf is thread tid's timer slack in nanoseconds, -1 if unknown.
func slackOf(tid int) int {
	b, err := os.ReadFile(slackPath(tid))
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return -1
	}
	return n
}
