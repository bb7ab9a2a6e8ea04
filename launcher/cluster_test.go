package launcher

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
