package engine

import (
	"os"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestQuietSysmon: in a Go executable (this test binary) the thread
// quietSysmon picks is sysmon's, in nanosleep, and it alone of the
// process's threads ends up in SCHED_IDLE.
func TestQuietSysmon(t *testing.T) {
	if !goMainThread {
		t.Fatal("package initialization did not run on the main thread of a Go executable")
	}
	tid := 0
	for try := 0; tid == 0 && try < 20; try++ {
		os.ReadDir("/proc/self/task") // a system call wakes a sleeping sysmon
		tid = idleSysmon()
		if tid == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	if tid == 0 {
		t.Fatalf("sysmon (thread %d) not found in nanosleep", sysmonTid())
	}
	quietSysmon() // once per process: the same thread, or nothing
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		id, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		pol, _, errno := unix.RawSyscall(unix.SYS_SCHED_GETSCHEDULER, uintptr(id), 0, 0)
		if errno != 0 {
			continue // the thread exited
		}
		if want := id == tid; (pol == schedIdle) != want {
			t.Errorf("thread %d (sysmon %d, pid %d): policy %d", id, tid, os.Getpid(), pol)
		}
	}
}
