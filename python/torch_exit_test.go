package python_test

import (
	"strings"
	"testing"
)

// torch_backend's exit: scripts that end without destroying their process
// groups (TestTorchExitPendingCallback is the first of them).

// TestTorchExitLateGroup: process groups made by atexit hooks. One
// registered after init_process_group makes a group and leaves an
// all_reduce whose then() callback sleeps; making it took the backend's
// stop hook off the atexit list, and the callback, left to the
// interpreter's finalization, crashed the process ("rank R was killed by
// signal 11"). Now gorun's own exit hook stops the groups, after every
// hook registered after init, and the callback runs. One registered
// before init_process_group runs after gorun finalized the job: its
// new_group made the job again and a group that crashed alike; now it,
// and an all_reduce on the default group, raise saying the interpreter
// exits.
func TestTorchExitLateGroup(t *testing.T) {
	needBackend(t)
	out, err := gorunRun(t, nil, 2, python, "python/tests/torch_exit_late_check.py")
	if err != nil || strings.Contains(out, "signal") {
		t.Fatalf("groups made at exit: %v\n%s", err, out)
	}
	for r := range 2 {
		for _, c := range []string{"after: callback ok", "before: refused"} {
			if w := "torch_exit_late_check: rank " + itoa(r) + ": " + c + "\n"; !strings.Contains(out, w) {
				t.Errorf("no %q:\n%s", w, out)
			}
		}
	}
}

// TestTorchExitDaemonThreads: daemon threads in loops of all_reduce (on
// the default group, on a group of two; one blocked in an all_reduce its
// peer never starts; two waiting in torch's own waits, Work.wait and
// torch.futures.wait_all; one calling gorun's own Python API over ctypes
// on a gorun.Group) while ranks 0 and 1 end their scripts. A daemon
// thread that returned from or called the backend as the interpreter
// finalized aborted its process (torch's GIL guard, unwound by the
// thread's end: "rank R was killed by signal 6"); now it waits in the
// backend until the process ends. Rank 2, still running, gets an error
// naming rank 0 or 1.
func TestTorchExitDaemonThreads(t *testing.T) {
	needBackend(t)
	out, err := gorunRun(t, nil, 3, python, "python/tests/torch_exit_daemon_check.py")
	if err != nil || strings.Contains(out, "signal") {
		t.Fatalf("daemon threads at exit: %v\n%s", err, out)
	}
	ranksOK(t, out, "torch_exit_daemon_check", 3)
}

// TestTorchExitPendingNeverStarted: at exit, an operation left that its
// peer never starts. Crossed (rank 0's on group A, rank 1's on group B,
// both of the two), each rank waited GORUN_TIMEOUT for its own; now each
// fails at once naming the other rank. On a group made with timeout=5s,
// the wait was bounded by GORUN_TIMEOUT only; now by the group's timeout.
func TestTorchExitPendingNeverStarted(t *testing.T) {
	needBackend(t)
	out, err := gorunRun(t, []string{"GORUN_TIMEOUT=60s"}, 3, python, "python/tests/torch_exit_wait_check.py")
	if err != nil || strings.Contains(out, "signal") {
		t.Fatalf("operations left at exit: %v\n%s", err, out)
	}
	for _, w := range []string{
		"torch_exit_wait_check: rank 0: crossed: gorun: allreduce: rank 1: peer closed the communicator\n",
		"torch_exit_wait_check: rank 1: crossed: gorun: allreduce: rank 0: peer closed the communicator\n",
		"torch_exit_wait_check: rank 0: group timeout: gorun backend: ALLREDUCE timed out after 5000 ms, the process group's timeout",
		"torch_exit_wait_check: rank 2: ends\n",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("no %q:\n%s", w, out)
		}
	}
}
