package comm

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/internal/jobenv"
	"github.com/gorun-hpc/gorun/launcher"
	"github.com/gorun-hpc/gorun/scripts/cluster"
)

const clusterChildEnv = "GORUN_CLUSTER_TEST_CHILD"

// clusterProbes gives TestCluster's ranks a 1 s gossip probe period. The
// namespace hosts share this machine's 2 CPUs, which each host's launcher
// cannot see (relaxProbes counts 2–3 ranks of the host on 2 CPUs: no
// relaxation), with up to three jobs of -race ranks at once and, in CI,
// two more test binaries. With the default 250 ms a rank starved past its
// 750 ms of suspicion was declared dead, "peer failed (unreachable)": in
// the fresh-clone CI run at 277aa8c (2026-12-05) three jobs failed so, and
// here nnodes-2x2 failed 2 of 3 runs beside 4 busy loops; with 1 s all
// passed 8 of 8 beside 4 and 5 (and with GOMAXPROCS=2 instead of the
// lowered 1, 0 of 4). The test is about the layouts, not failure
// detection.
var clusterProbes = jobenv.Probe + "=1s"

// TestClusterChild is a rank of TestCluster: it joins the job gorun
// started over ssh, reports its topology and checks every collective.
func TestClusterChild(t *testing.T) {
	if os.Getenv(clusterChildEnv) == "" {
		t.Skip("run by TestCluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Init(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	host, _ := os.Hostname()
	fmt.Printf("host=%s hosts=%v hier=%v\n", host, c.Topology().Hosts, c.hier != nil)
	// Above the threshold, a count that does not split evenly (the flat
	// algorithms below it have their own process tests).
	if err := checkCollectives(ctx, c, hierCounts[1]); err != nil {
		t.Fatal(err)
	}
	// An allreduce and broadcasts in pieces: the host's shm communicator
	// and the tcp ones between hosts at once.
	if err := checkAllReduceSum(ctx, c, hierPipelineCount); err != nil {
		t.Fatal(err)
	}
	if err := checkBroadcasts(ctx, c, hierPipelineCount); err != nil {
		t.Fatal(err)
	}
}

// TestClusterNodeLauncher is one node's gorun of TestCluster's --nnodes
// case: it runs in a namespace host and starts that host's ranks.
func TestClusterNodeLauncher(t *testing.T) {
	node := os.Getenv(clusterChildEnv + "_NODE")
	if node == "" {
		t.Skip("run by TestCluster")
	}
	exe, _ := os.Executable()
	var nodeRank int
	fmt.Sscan(node, &nodeRank)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	err := launcher.Run(ctx, launcher.Config{NP: 2, NNodes: 2, NodeRank: nodeRank, Seed: os.Getenv(clusterChildEnv + "_SEED"),
		Program: exe, Args: []string{"-test.run=^TestClusterChild$", "-test.v"},
		Export: []string{clusterChildEnv + "=1", clusterProbes}, UseSrun: "no"})
	if err != nil {
		t.Fatal(err)
	}
}

// TestCluster runs every collective on the namespace cluster, as separate
// processes started by gorun over real ssh, on the layouts of the issue:
// 2x2, 2x3, 3x1 and 1+3 (hosts with different rank counts).
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	// With Slurm where it is installed: srun starts one more layout.
	cl := cluster.Start(t, cluster.Options{Hosts: 3, Slurm: cluster.SlurmAvailable() == nil})
	h := cl.Names()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// At most three jobs at once: all six are 25 ranks under -race, which
	// on 2 CPUs beside the other packages' tests (CI) starved a live rank
	// past its gossip probes, and host 1's ranks declared rank 3 of
	// nnodes-2x2 dead, "peer failed (unreachable)" (2026-12-04). With
	// nothing else running, go test -run '^TestCluster$' took 23 and 27 s
	// so, 23 s without the limit.
	slots := make(chan struct{}, 3)
	slot := func(t *testing.T) {
		t.Parallel()
		slots <- struct{}{}
		t.Cleanup(func() { <-slots })
	}
	for _, tc := range []struct {
		name  string
		hosts []launcher.Host
		want  string // rank 0's topology
	}{
		{"2x2", []launcher.Host{{Name: h[0], Slots: 2}, {Name: h[1], Slots: 2}}, "hosts=[[0 1] [2 3]] hier=true"},
		{"2x3", []launcher.Host{{Name: h[0], Slots: 3}, {Name: h[1], Slots: 3}}, "hosts=[[0 1 2] [3 4 5]] hier=true"},
		{"3x1", []launcher.Host{{Name: h[0], Slots: 1}, {Name: h[1], Slots: 1}, {Name: h[2], Slots: 1}}, "hosts=[[0] [1] [2]] hier=false"},
		{"1+3", []launcher.Host{{Name: h[0], Slots: 1}, {Name: h[1], Slots: 3}}, "hosts=[[0] [1 2 3]] hier=true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			slot(t) // the jobs share the hosts, not ports
			np := 0
			for _, x := range tc.hosts {
				np += x.Slots
			}
			var out, errb bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			err := launcher.Run(ctx, launcher.Config{NP: np, Hosts: tc.hosts, Program: exe,
				Args:   []string{"-test.run=^TestClusterChild$", "-test.v"},
				Export: []string{clusterChildEnv + "=1", clusterProbes}, UseSrun: "no", Stdout: &out, Stderr: &errb})
			if err != nil {
				t.Fatalf("%v\n%s%s", err, out.String(), errb.String())
			}
			if !strings.Contains(out.String(), "[0] host="+tc.hosts[0].Name+" "+tc.want) {
				t.Errorf("rank 0 did not report %q:\n%s", tc.want, out.String())
			}
			if got := strings.Count(out.String(), "--- PASS: TestClusterChild"); got != np {
				t.Errorf("%d of %d ranks passed:\n%s%s", got, np, out.String(), errb.String())
			}
		})
	}
	// Without ssh: one gorun per host, meeting at a seed (--nnodes).
	t.Run("nnodes-2x2", func(t *testing.T) {
		slot(t)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		seed := fmt.Sprintf("%s:%d", h[0], 29000+os.Getpid()%1000)
		outs := make([][]byte, 2)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for node := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cmd := cl.Command(ctx, h[node], exe, "-test.run=^TestClusterNodeLauncher$", "-test.v")
				cmd.Env = append(os.Environ(), fmt.Sprintf("%s_NODE=%d", clusterChildEnv, node), clusterChildEnv+"_SEED="+seed)
				cmd.WaitDelay = time.Second
				outs[node], errs[node] = cmd.CombinedOutput()
			}()
		}
		wg.Wait()
		for node := range 2 {
			if errs[node] != nil {
				t.Errorf("node %d: %v\n%s", node, errs[node], outs[node])
			}
		}
		if !strings.Contains(string(outs[0]), "[0] host="+h[0]+" hosts=[[0 1] [2 3]] hier=true") {
			t.Errorf("rank 0 did not report two hosts of two:\n%s", outs[0])
		}
		if got := strings.Count(string(outs[0])+string(outs[1]), "--- PASS: TestClusterChild"); got != 4 {
			t.Errorf("%d of 4 ranks passed:\n%s\n%s", got, outs[0], outs[1])
		}
	})
	// Under real Slurm: comm.Init reads srun's variables.
	t.Run("srun-2x2", func(t *testing.T) {
		if cl.SlurmConf == "" {
			t.Skipf("no Slurm: %v", cluster.SlurmAvailable())
		}
		slot(t)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "srun", "-N2", "-n4", "--ntasks-per-node=2", "--label", exe,
			"-test.run=^TestClusterChild$", "-test.v")
		cmd.Env = append(os.Environ(), "SLURM_CONF="+cl.SlurmConf, clusterChildEnv+"=1", clusterProbes)
		cmd.Dir = t.TempDir()
		cmd.WaitDelay = time.Second
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("srun: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), "0: host="+h[0]+" hosts=[[0 1] [2 3]] hier=true") {
			t.Errorf("rank 0 did not report two hosts of two:\n%s", out)
		}
		if got := strings.Count(string(out), "--- PASS: TestClusterChild"); got != 4 {
			t.Errorf("%d of 4 ranks passed:\n%s", got, out)
		}
	})
}
