package launcher

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
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

// Twenty ranks on one host over ssh start, against an sshd that drops
// connections beyond 8 still being set up, as a stock sshd does beyond
// its MaxStartups of 10: gorun starts a host's ranks a few at a time,
// the next as one's session runs. All at once, 32 ranks on one host
// failed on every try against a stock sshd.
func TestManyRanksPerHostOverSSH(t *testing.T) {
	setup := t.TempDir() // a file per connection being set up
	inner := fakeSSHAgent(t)[0]
	ssh := filepath.Join(t.TempDir(), "ssh")
	// The connection is set up until its session prints its first line
	// on stderr, the pid marker; the handshake takes 50 ms.
	script := "#!/bin/sh\n" +
		"touch " + setup + "/$$\n" +
		"if [ $(ls " + setup + " | wc -l) -gt " + strconv.Itoa(sshStartsPerHost) + " ]; then rm " + setup + "/$$; " +
		"echo 'kex_exchange_identification: Connection closed by remote host' >&2; exit 255; fi\n" +
		"sleep 0.05\n" +
		"{ " + shellQuote(inner) + ` "$@" 2>&1 >&3 3>&- | { IFS= read -r l; rm ` + setup + `/$$; printf '%s\n' "$l"; exec cat; } >&2 3>&-; } 3>&1` + "\n"
	if err := os.WriteFile(ssh, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	out, stderr, err := runJob(t, "env", Config{NP: 20, Hosts: []Host{{Name: "node1", Slots: 20}}, LaunchAgent: []string{ssh}})
	if err != nil {
		t.Fatalf("Run = %v\n%s", err, stderr)
	}
	if n := len(rankLines(t, out)); n != 20 {
		t.Errorf("%d ranks ran, want 20\n%s", n, stderr)
	}
}
