package launcher

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/scripts/cluster"
)

// hostAndRank is a rank program for the namespace cluster: it prints the
// host it runs on and its place there.
var hostAndRank = Config{Program: "/bin/sh", Args: []string{"-c", `echo "$(hostname) $GORUN_LOCAL_RANK/$GORUN_LOCAL_SIZE"`}}

// TestClusterOverRealSSH starts a job on two namespace hosts through the
// real ssh client and Debian's sshd: each rank runs on its host, under
// that host's hostname.
func TestClusterOverRealSSH(t *testing.T) {
	c := cluster.Start(t, cluster.Options{Hosts: 2})
	h1, h2 := c.Hosts[0].Name, c.Hosts[1].Name
	cfg := hostAndRank
	cfg.NP = 4
	cfg.Hosts = []Host{{Name: h1, Slots: 2}, {Name: h2, Slots: 2}}
	out, stderr, err := runJob(t, "", cfg)
	if err != nil {
		t.Fatalf("Run: %v\n%s%s", err, out, stderr)
	}
	lines := rankLines(t, out)
	want := []string{h1 + " 0/2", h1 + " 1/2", h2 + " 0/2", h2 + " 1/2"}
	for r, w := range want {
		if len(lines[r]) != 1 || lines[r][0] != w {
			t.Errorf("rank %d printed %q, want %q", r, lines[r], w)
		}
	}

	// Names of this machine are one host (mergeLocal); the cluster's
	// hosts, by name or by address, are others (their own namespaces).
	t.Run("local-names-and-cluster-hosts", func(t *testing.T) {
		here, err := os.Hostname()
		if err != nil {
			t.Fatal(err)
		}
		cfg := hostAndRank
		cfg.NP = 4
		cfg.Hosts = []Host{{Name: "localhost", Slots: 1}, {Name: h1, Slots: 1}, {Name: "127.0.0.1", Slots: 1}, {Name: h2, Slots: 1}}
		out, stderr, err := runJob(t, "", cfg)
		if err != nil {
			t.Fatalf("Run: %v\n%s%s", err, out, stderr)
		}
		lines := rankLines(t, out)
		for r, w := range []string{here + " 0/2", here + " 1/2", h1 + " 0/1", h2 + " 0/1"} {
			if len(lines[r]) != 1 || lines[r][0] != w {
				t.Errorf("rank %d printed %q, want %q", r, lines[r], w)
			}
		}
		// ssh knows the hosts by name only: their addresses are checked
		// without a job.
		ips := []Host{{Name: "localhost", Slots: 1}, {Name: c.Hosts[0].IP, Slots: 1}, {Name: c.Hosts[1].IP, Slots: 1}}
		if got := mergeLocal(ips); !reflect.DeepEqual(got, ips) {
			t.Errorf("mergeLocal(%v) = %v: a cluster host's address taken for this machine's", ips, got)
		}
	})

	// On the same cluster: how remote ranks end (tokenScript, signalRemote).
	hosts := []Host{{Name: h1, Slots: 1}, {Name: h2, Slots: 1}}
	t.Run("killed-by-signal", func(t *testing.T) {
		_, stderr, err := runJob(t, "fail", Config{NP: 2, Hosts: hosts,
			Export: []string{"GORUN_TEST_DIR=" + t.TempDir(), "GORUN_TEST_FAIL=1", "GORUN_TEST_HOW=kill"}})
		var re *RankError
		if !errors.As(err, &re) || re.Rank != 1 || re.Host != h2 || re.Signal != syscall.SIGKILL || ExitStatus(err) != 137 {
			t.Fatalf("Run = %v (status %d), want rank 1 on %s killed by signal 9\n%s", err, ExitStatus(err), h2, stderr)
		}
	})
	// sshd's shell gives 138 for both; the wrapper's marker tells them apart.
	t.Run("signal-or-status", func(t *testing.T) {
		for _, tc := range []struct{ script, want string }{
			{`[ "$GORUN_RANK" = 1 ] && kill -s USR1 $$; exit 0`, "gorun: rank 1 (" + h2 + ") was killed by signal 10 (user defined signal 1)"},
			{`[ "$GORUN_RANK" = 1 ] && exit 138; exit 0`, "gorun: rank 1 (" + h2 + ") exited with status 138"},
		} {
			_, stderr, err := runJob(t, "", Config{NP: 2, Hosts: hosts, Program: "/bin/sh", Args: []string{"-c", tc.script}})
			if ExitStatus(err) != 138 || !strings.Contains(stderr, tc.want) {
				t.Errorf("%s: Run = %v (status %d), want status 138 and %q\n%s", tc.script, err, ExitStatus(err), tc.want, stderr)
			}
		}
	})
	t.Run("kill-grace", func(t *testing.T) {
		dir := t.TempDir()
		out, stderr, err := runJob(t, "ignore-term", Config{NP: 2, Hosts: hosts, KillGrace: time.Second,
			Export: []string{"GORUN_TEST_DIR=" + dir}})
		if ExitStatus(err) != 5 {
			t.Fatalf("Run = %v, want rank 0's status 5\n%s%s", err, out, stderr)
		}
		// The namespaces share this machine's pids.
		b, err := os.ReadFile(filepath.Join(dir, "ignoring-1"))
		if err != nil {
			t.Fatal(err)
		}
		if pid := mustAtoi(string(b)); alive(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("rank 1 on %s ignored SIGTERM and outlived gorun", h2)
		}
	})
	t.Run("stop-keeps-output", func(t *testing.T) {
		// A grace longer than runJob's 1 s: the SIGTERM crosses ssh, and
		// under CI's load (2026-12-04) rank 0 had not written its last
		// words and exited within 1 s, so gorun killed it. What is
		// checked is that its words reach gorun's output, not how fast.
		out, stderr, err := runJob(t, "fail", Config{NP: 2, Hosts: hosts, KillGrace: 10 * time.Second,
			Export: []string{"GORUN_TEST_DIR=" + t.TempDir(), "GORUN_TEST_FAIL=1"}})
		if ExitStatus(err) != 7 || !strings.Contains(out, "[0] stopping on SIGTERM\n") {
			t.Errorf("Run = %v; rank 0's last words lost?\n%s%s", err, out, stderr)
		}
	})
	t.Run("wdir-missing", func(t *testing.T) {
		cfg := hostAndRank
		cfg.NP, cfg.Hosts = 2, []Host{{Name: h1, Slots: 1}, {Name: h2, Slots: 1}}
		cfg.WorkDir = "/nonexistent-gorun-wdir"
		out, stderr, err := runJob(t, "", cfg)
		if !errors.Is(err, ErrLaunch) || !strings.Contains(err.Error(), "-wdir /nonexistent-gorun-wdir") {
			t.Errorf("Run = %v, want ErrLaunch naming -wdir\n%s%s", err, out, stderr)
		}
	})
}

// TestClusterSSHDRefuses: a host whose sshd is down, or whose name does not
// resolve, fails the job at once, naming the host.
func TestClusterSSHDRefuses(t *testing.T) {
	c := cluster.Start(t, cluster.Options{Hosts: 2})
	h2 := c.Hosts[1].Name
	pid, err := os.ReadFile(filepath.Join(c.Dir, h2, "sshd.pid"))
	if err != nil {
		t.Fatal(err)
	}
	var p int
	fmt.Sscan(string(pid), &p)
	if proc, err := os.FindProcess(p); err != nil || proc.Kill() != nil {
		t.Fatalf("cannot stop %s's sshd (pid %d)", h2, p)
	}
	// Until it has exited, its socket may still take a connection and
	// reset it ("kex_exchange_identification: ... reset by peer").
	for end := time.Now().Add(10 * time.Second); alive(p); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%s's sshd (pid %d) still runs 10s after SIGKILL", h2, p)
		}
	}
	cfg := hostAndRank
	cfg.NP = 2
	cfg.Hosts = []Host{{Name: c.Hosts[0].Name, Slots: 1}, {Name: h2, Slots: 1}}
	start := time.Now()
	out, stderr, err := runJob(t, "", cfg)
	var re *RankError
	if !errors.As(err, &re) || re.Rank != 1 || re.Host != h2 {
		t.Fatalf("Run: %v, want rank 1 on %s failing\n%s%s", err, h2, out, stderr)
	}
	if !strings.Contains(out+stderr, "refused") {
		t.Errorf("output does not say the connection was refused:\n%s%s", out, stderr)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("took %v", d)
	}

	// A host that does not resolve, other than rank 0's: ssh says so at
	// once, and the job fails naming it.
	bad := "gorun-no-such-host.invalid"
	cfg.Hosts = []Host{{Name: c.Hosts[0].Name, Slots: 1}, {Name: bad, Slots: 1}}
	start = time.Now()
	out, stderr, err = runJob(t, "", cfg)
	if !errors.As(err, &re) || re.Rank != 1 || re.Host != bad {
		t.Fatalf("Run: %v, want rank 1 on %s failing\n%s%s", err, bad, out, stderr)
	}
	if !strings.Contains(out+stderr, "resolve") {
		t.Errorf("output does not say the host does not resolve:\n%s%s", out, stderr)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("unresolvable host: took %v", d)
	}
}

// TestUnresolvableSeedHost: rank 0's host must resolve (it is the gossip
// seed); a namespace name given to "ip netns exec" does not, and the job
// fails at once instead of waiting for the world.
func TestUnresolvableSeedHost(t *testing.T) {
	start := time.Now()
	err := Run(t.Context(), Config{NP: 2, Program: "/bin/true",
		Hosts:       []Host{{Name: "gorun-no-such-host.invalid", Slots: 2}},
		LaunchAgent: []string{"ip", "netns", "exec"}, Stdout: new(strings.Builder), Stderr: new(strings.Builder)})
	if !errors.Is(err, ErrLaunch) || !strings.Contains(err.Error(), "does not resolve") {
		t.Fatalf("Run: %v, want ErrLaunch saying the host does not resolve", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v", d)
	}
}
