package launcher

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeSSHAgent puts the fake ssh (the test binary named ssh, main_test.go)
// in a directory and returns it as a launch agent.
func fakeSSHAgent(t *testing.T) []string {
	t.Helper()
	bin := t.TempDir()
	if err := os.Symlink(testBinary(t), filepath.Join(bin, "ssh")); err != nil {
		t.Fatal(err)
	}
	return []string{filepath.Join(bin, "ssh")}
}

// A remote rank killed by a signal is reported as killed, as a local one
// is; ssh alone would say 255, its own failure's status.
func TestRemoteRankKilledBySignal(t *testing.T) {
	dir := t.TempDir()
	_, stderr, err := runJob(t, "fail", Config{NP: 2, Hosts: []Host{{Name: "node1", Slots: 2}},
		LaunchAgent: fakeSSHAgent(t),
		Export:      []string{"GORUN_TEST_DIR=" + dir, "GORUN_TEST_FAIL=1", "GORUN_TEST_HOW=kill"}})
	var re *RankError
	if !errors.As(err, &re) || re.Rank != 1 || re.Signal != syscall.SIGKILL || ExitStatus(err) != 137 {
		t.Fatalf("Run = %v (status %d), want rank 1 killed by signal 9, 137\n%s", err, ExitStatus(err), stderr)
	}
	if !strings.Contains(stderr, "rank 1 (node1) was killed by signal 9") || strings.Contains(stderr, "Killed") {
		t.Errorf("stderr:\n%s", stderr)
	}
}

// An agent that fails before the rank starts (ssh's 255) is a launch
// error, not the rank's status.
func TestRemoteAgentFails(t *testing.T) {
	ssh := filepath.Join(t.TempDir(), "ssh")
	if err := os.WriteFile(ssh, []byte("#!/bin/sh\necho 'ssh: connect to host node1 port 22: Connection refused' >&2\nexit 255\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, stderr, err := runJob(t, "env", Config{NP: 1, Hosts: []Host{{Name: "node1", Slots: 1}}, LaunchAgent: []string{ssh}})
	var re *RankError
	if !errors.As(err, &re) || !errors.Is(err, ErrLaunch) || ExitStatus(err) != 255 ||
		!strings.Contains(err.Error(), "launch agent exited with status 255") {
		t.Fatalf("Run = %v (status %d), want a launch error with status 255\n%s", err, ExitStatus(err), stderr)
	}
}

// Remote ranks that ignore SIGTERM get SIGKILL after --kill-grace, and
// gorun waits for them (their agents) before it returns.
func TestRemoteRanksKilledAfterGrace(t *testing.T) {
	dir := t.TempDir()
	start := time.Now()
	_, stderr, err := runJob(t, "ignore-term", Config{NP: 3, Hosts: []Host{{Name: "node1", Slots: 3}},
		LaunchAgent: fakeSSHAgent(t), KillGrace: time.Second,
		Export: []string{"GORUN_TEST_DIR=" + dir}})
	if ExitStatus(err) != 5 {
		t.Fatalf("Run = %v, want rank 0's status 5\n%s", err, stderr)
	}
	took := time.Since(start)
	for _, r := range []string{"1", "2"} {
		b, err := os.ReadFile(filepath.Join(dir, "ignoring-"+r))
		if err != nil {
			t.Fatalf("rank %s never started: %v", r, err)
		}
		if pid := mustAtoi(string(b)); alive(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("remote rank %s (pid %d), which ignores SIGTERM, outlived gorun (%v)", r, pid, took)
		}
	}
	if took > 15*time.Second {
		t.Errorf("took %v", took)
	}
}

// -wdir that does not exist is an error naming it, here and remotely,
// not a run elsewhere or an exec error that blames the program.
func TestWorkDirMissing(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-dir")
	_, stderr, err := runJob(t, "env", Config{NP: 1, WorkDir: missing})
	if !errors.Is(err, ErrLaunch) || !strings.Contains(err.Error(), "-wdir "+missing) {
		t.Errorf("local: Run = %v, want ErrLaunch naming -wdir %s\n%s", err, missing, stderr)
	}
	_, stderr, err = runJob(t, "env", Config{NP: 2, Hosts: []Host{{Name: "node1", Slots: 2}},
		LaunchAgent: fakeSSHAgent(t), WorkDir: missing})
	var re *RankError
	if !errors.As(err, &re) || re.Host != "node1" || !errors.Is(err, ErrLaunch) || !strings.Contains(err.Error(), "-wdir "+missing) {
		t.Errorf("remote: Run = %v, want ErrLaunch on node1 naming -wdir %s\n%s", err, missing, stderr)
	}
}
