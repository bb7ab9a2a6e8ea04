package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// leftovers lists what a cluster made that still exists.
func leftovers(t *testing.T, c *Cluster) []string {
	var left []string
	if _, err := os.Stat(c.Dir); err == nil {
		left = append(left, "directory "+c.Dir)
	}
	id := filepath.Base(c.Dir)
	if out, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(out), "gorun-c"+id+"-") {
		left = append(left, "namespaces: "+string(out))
	}
	if exec.Command("ip", "link", "show", "grc"+id).Run() == nil {
		left = append(left, "bridge grc"+id)
	}
	if b, _ := os.ReadFile("/etc/hosts"); strings.Contains(string(b), "# gorun-cluster "+id+"\n") {
		left = append(left, "/etc/hosts lines")
	}
	if _, err := os.Stat("/etc/ssh/ssh_config.d/gorun-cluster-" + id + ".conf"); err == nil {
		left = append(left, "ssh config drop-in")
	}
	if out, _ := exec.Command("pgrep", "-f", c.Dir).Output(); len(out) > 0 {
		left = append(left, "processes "+strings.Join(strings.Fields(string(out)), ","))
	}
	return left
}

// running reports whether process pid exists and is not a zombie. A
// daemon killed by cluster.sh is reparented to pid 1, and where pid 1
// does not reap (a container's init that is not an init, as in CI) it
// stays a zombie: dead, holding nothing, but still answering kill -0.
func running(pid string) bool {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	// The state follows the command name, which is in parentheses.
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z' && s[i+2] != 'X'
	}
	return true
}

// TestUpSSHDown brings up two hosts, checks that each has its own
// hostname, reaches the other by name over real ssh at the shaped link,
// and that Down leaves nothing behind.
func TestUpSSHDown(t *testing.T) {
	c := Start(t, Options{Hosts: 2})
	a, b := c.Hosts[0], c.Hosts[1]
	out, err := exec.Command("ssh", a.Name, "hostname; ssh "+b.Name+" hostname").CombinedOutput()
	if err != nil {
		t.Fatalf("ssh %s: %v: %s", a.Name, err, out)
	}
	if got := strings.Fields(string(out)); len(got) != 2 || got[0] != a.Name || got[1] != b.Name {
		t.Fatalf("hostnames over ssh: %q, want %s then %s", out, a.Name, b.Name)
	}
	if host, _ := os.Hostname(); host == a.Name {
		t.Fatalf("this process's hostname changed to %s", host)
	}
	out, err = c.Command(context.Background(), b.Name, "hostname").Output()
	if err != nil || strings.TrimSpace(string(out)) != b.Name {
		t.Fatalf("exec in %s: %q, %v", b.Name, out, err)
	}
	// exec passes its stdin on: gorun --launch-agent sends the job token
	// on it (it used to read the hosts file there).
	cmd := c.Command(context.Background(), b.Name, "sh", "-c", "IFS= read -r x; echo \"$x\"")
	cmd.Stdin = strings.NewReader("the token\n")
	if out, err = cmd.Output(); err != nil || string(out) != "the token\n" {
		t.Fatalf("exec in %s read %q from its stdin (%v), want the token", b.Name, out, err)
	}
	// Shaped to 2 Gbit/s, with a control class that goes first.
	cl, _ := exec.Command("tc", "-n", a.Netns, "class", "show", "dev", "eth0").Output()
	if !strings.Contains(string(cl), "class htb 1:1 root rate 2Gbit ceil 2Gbit") ||
		!strings.Contains(string(cl), "class htb 1:10 parent 1:1 leaf") || !strings.Contains(string(cl), "prio 0") {
		t.Errorf("%s's link is not shaped to 2Gbit with a control class: %s", a.Name, cl)
	}
	fl, _ := exec.Command("tc", "-n", a.Netns, "filter", "show", "dev", "eth0").Output()
	if !strings.Contains(string(fl), "match 00c00000/00fc0000 at 0") {
		t.Errorf("%s's link does not send DSCP CS6 to the control class: %s", a.Name, fl)
	}
	if err := c.Down(); err != nil {
		t.Fatal(err)
	}
	if left := leftovers(t, c); len(left) > 0 {
		t.Fatalf("left behind after Down: %v", left)
	}
	if err := exec.Command("ssh", a.Name, "true").Run(); err == nil {
		t.Fatalf("ssh %s still works after Down", a.Name)
	}
}

// TestRunCleansUpOnFailure: "cluster.sh run -- CMD" removes the cluster
// when CMD fails, and "up" removes a cluster whose owner died.
func TestRunCleansUpOnFailure(t *testing.T) {
	if err := Available(); err != nil {
		t.Skipf("namespace cluster: %v", err)
	}
	sh := scriptArgv()
	out, err := exec.Command(sh[0], append(sh[1:], "run", "-n", "1", "-prefix", "r1h", "--",
		"sh", "-c", `echo "$GORUN_CLUSTER"; exit 3`)...).Output()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
		t.Fatalf("run: %v, want exit status 3", err)
	}
	dir := strings.TrimSpace(string(out))
	if left := leftovers(t, &Cluster{Dir: dir}); dir == "" || len(left) > 0 {
		t.Fatalf("run left %q behind: %v", dir, left)
	}

	// An owner that is gone: a process that already exited.
	dead := exec.Command("true")
	dead.Run()
	out, err = exec.Command(sh[0], append(sh[1:], "up", "-n", "1", "-prefix", "r2h", "-owner", fmt.Sprint(dead.Process.Pid))...).Output()
	if err != nil {
		t.Fatal(err)
	}
	orphan := &Cluster{Dir: strings.TrimSpace(string(out))}
	t.Cleanup(func() { orphan.Down() })
	pid, err := os.ReadFile(filepath.Join(orphan.Dir, "r2h1", "sshd.pid"))
	if err != nil {
		t.Fatal(err)
	}
	Start(t, Options{Hosts: 1})
	if p := strings.TrimSpace(string(pid)); running(p) {
		t.Errorf("the dead owner's sshd (pid %s) still runs", p)
	}
	if b, _ := os.ReadFile("/etc/hosts"); strings.Contains(string(b), " r2h1 ") {
		t.Errorf("the dead owner's /etc/hosts line is still there")
	}
	if out, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(out), "-r2h1") {
		t.Errorf("the dead owner's namespace is still there: %s", out)
	}
}
