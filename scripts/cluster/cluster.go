// Package cluster brings up and tears down the namespace cluster of
// cluster.sh from Go: H "hosts", each a network and UTS namespace with its
// own hostname, a tbf-shaped veth onto one bridge, an /etc/hosts entry and
// a real sshd. Tests and bench/compare use it; people use the script.
//
// Up returns a running cluster; Down removes everything it made. Start is
// the test form: it skips when a prerequisite is missing and registers
// Down with t.Cleanup. A test binary killed before its cleanups run leaves
// a cluster whose owner pid is dead; the next Up removes it.
package cluster

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

//go:embed cluster.sh
var script []byte

// Options describe a cluster; zero values are defaults.
type Options struct {
	Hosts int    // number of hosts; default 2
	Rate  string // tc rate of each host's link, e.g. "2gbit" (default)
	// Queue is the longest a packet waits in a link's queue at Rate, e.g.
	// "20ms" (default); more is dropped.
	Queue string
	// NoPriority puts control traffic (DSCP CS6/CS7/EF, packets of at most
	// 256 bytes) in the same queue as bulk data; by default it goes first.
	NoPriority bool
	Prefix     string // host names are Prefix1..PrefixH; default "h"
	Slurm      bool   // also run munged, slurmctld and a slurmd per host
}

// Host is one host of a cluster.
type Host struct {
	Name  string // hostname, resolvable through /etc/hosts while the cluster is up
	IP    string
	Netns string // the network namespace's name (ip netns)
}

// Cluster is a running cluster.
type Cluster struct {
	Dir   string // its state directory, /run/gorun-cluster/ID
	Hosts []Host
	// SlurmConf is the slurm.conf of its Slurm (Options.Slurm): set
	// SLURM_CONF to it for srun and sbatch; "" without Slurm.
	SlurmConf string

	once sync.Once
	err  error
}

// Available reports why a cluster cannot be made here, or nil.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("needs root")
	}
	for _, p := range []string{"ip", "tc", "unshare", "nsenter", "flock", "ssh", "ssh-keygen", "/usr/sbin/sshd"} {
		if _, err := exec.LookPath(p); err != nil {
			return fmt.Errorf("missing %s (Debian: iproute2, util-linux, openssh-server)", p)
		}
	}
	return nil
}

// scriptPath is cluster.sh beside this file's source, for bash to run.
// A binary built elsewhere (go build, then copied) runs the embedded copy
// with bash -c instead, so nothing is written to disk.
func scriptArgv() []string {
	if _, file, _, ok := runtime.Caller(0); ok {
		p := filepath.Join(filepath.Dir(file), "cluster.sh")
		if b, err := os.ReadFile(p); err == nil && bytes.Equal(b, script) {
			return []string{"bash", p}
		}
	}
	return []string{"bash", "-c", string(script), "cluster.sh"}
}

// SlurmAvailable reports why Slurm cannot run on a cluster here, or nil.
func SlurmAvailable() error {
	if err := Available(); err != nil {
		return err
	}
	for _, p := range []string{"munged", "slurmctld", "slurmd", "srun", "sbatch", "sinfo"} {
		if _, err := exec.LookPath(p); err != nil {
			return fmt.Errorf("missing %s (Debian: slurm-wlm, munge)", p)
		}
	}
	return nil
}

// Up brings a cluster up. The calling process owns it: should it die
// without Down, the next Up removes the cluster.
func Up(ctx context.Context, o Options) (*Cluster, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	sh := scriptArgv()
	if o.Hosts == 0 {
		o.Hosts = 2
	}
	if o.Rate == "" {
		o.Rate = "2gbit"
	}
	if o.Prefix == "" {
		o.Prefix = "h"
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, sh[0], append(sh[1:], "up", "-n", fmt.Sprint(o.Hosts), "-rate", o.Rate,
		"-prefix", o.Prefix, "-owner", fmt.Sprint(os.Getpid()))...)
	if o.Slurm {
		cmd.Args = append(cmd.Args, "-slurm")
	}
	if o.Queue != "" {
		cmd.Args = append(cmd.Args, "-queue", o.Queue)
	}
	if o.NoPriority {
		cmd.Args = append(cmd.Args, "-prio", "0")
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("cluster up: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	c := &Cluster{Dir: strings.TrimSpace(string(out))}
	f, err := os.Open(filepath.Join(c.Dir, "hosts"))
	if err != nil {
		c.Down()
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		w := strings.Fields(sc.Text())
		if len(w) == 3 {
			c.Hosts = append(c.Hosts, Host{Name: w[0], IP: w[1], Netns: w[2]})
		}
	}
	if o.Slurm {
		c.SlurmConf = filepath.Join(c.Dir, "slurm", "slurm.conf")
	}
	if len(c.Hosts) != o.Hosts {
		c.Down()
		return nil, fmt.Errorf("cluster up: %d hosts in %s, want %d", len(c.Hosts), c.Dir, o.Hosts)
	}
	return c, nil
}

// Down removes the cluster: its processes, namespaces, bridge, /etc/hosts
// lines, ssh configuration and files. Calling it again returns the first
// result.
func (c *Cluster) Down() error {
	c.once.Do(func() {
		out, err := c.script("down", c.Dir).CombinedOutput()
		if err != nil {
			c.err = fmt.Errorf("cluster down: %v: %s", err, out)
		}
	})
	return c.err
}

// Start brings a cluster up for a test, skipping it with the reason when
// this machine cannot make one, and removes it when the test ends.
func Start(t testing.TB, o Options) *Cluster {
	t.Helper()
	avail := Available
	if o.Slurm {
		avail = SlurmAvailable
	}
	if err := avail(); err != nil {
		t.Skipf("namespace cluster: %v", err)
	}
	if o.Prefix == "" {
		o.Prefix = fmt.Sprintf("t%dh", os.Getpid()%100000) // unique among parallel test binaries
	}
	c, err := Up(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Down(); err != nil {
			t.Error(err)
		}
	})
	return c
}

// Agent is a launch agent ("AGENT HOST ARGV...") that runs a command in a
// host's namespaces without ssh.
func (c *Cluster) Agent() []string { return append(scriptArgv(), "exec") }

// Command runs argv in host's namespaces.
func (c *Cluster) Command(ctx context.Context, host string, argv ...string) *exec.Cmd {
	a := append(c.Agent(), host)
	return exec.CommandContext(ctx, a[0], append(a[1:], argv...)...)
}

func (c *Cluster) script(args ...string) *exec.Cmd {
	a := append(scriptArgv(), args...)
	return exec.Command(a[0], a[1:]...)
}

// Names are the hosts' names.
func (c *Cluster) Names() []string {
	n := make([]string, len(c.Hosts))
	for i, h := range c.Hosts {
		n[i] = h.Name
	}
	return n
}
