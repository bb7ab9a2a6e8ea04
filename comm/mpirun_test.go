package comm

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Real mpirun launches this test binary (it re-runs itself as each rank):
// MPICH's Hydra and Open MPI. With GORUN_SEEDS passed the ranks form one
// job; without it each rank fails naming the launcher and GORUN_SEEDS,
// never running as a singleton.

const mpirunChildEnv = "GORUN_MPIRUN_TEST_CHILD"

func TestMPIRunChild(t *testing.T) {
	if os.Getenv(mpirunChildEnv) == "" {
		t.Skip("run by TestMPIRun")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if !Launched() {
		fmt.Println("NOT LAUNCHED")
		t.Fatal("comm.Launched() is false under mpirun")
	}
	c, err := Init(ctx)
	if err != nil {
		fmt.Printf("INIT ERROR: %v\n", err)
		return // the parent checks the message
	}
	defer c.Close()
	vec := []int64{int64(c.Rank() + 1)}
	if err := AllReduce(ctx, c, vec, vec, Sum); err != nil {
		t.Fatalf("rank %d: allreduce: %v", c.Rank(), err)
	}
	if err := c.Barrier(ctx); err != nil {
		t.Fatalf("rank %d: barrier: %v", c.Rank(), err)
	}
	// LaunchInfo, read without joining, agrees with the joined job.
	li, err := LaunchInfo()
	if err != nil || li.Rank != c.Rank() || li.Size != c.Size() || li.LocalRank != c.LocalRank() || li.LocalSize != c.LocalSize() {
		t.Fatalf("rank %d: LaunchInfo %+v, %v; Init: rank %d of %d, local %d of %d", c.Rank(), li, err, c.Rank(), c.Size(), c.LocalRank(), c.LocalSize())
	}
	fmt.Printf("RANK %d OF %d LOCAL %d OF %d SUM %d LAUNCHER %s\n", c.Rank(), c.Size(), c.LocalRank(), c.LocalSize(), vec[0], li.Launcher)
}

func TestMPIRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts mpirun")
	}
	for _, l := range []struct {
		name, bin string
		args      func(env []string) []string // mpirun options passing env to every rank
		launcher  string                      // what the error must name
	}{
		{"mpich", "mpirun.mpich", func(env []string) []string {
			var a []string
			for _, kv := range env {
				k, v, _ := strings.Cut(kv, "=")
				a = append(a, "-genv", k, v)
			}
			return a
		}, "MPICH"},
		{"openmpi", "mpirun.openmpi", func(env []string) []string {
			a := []string{"--oversubscribe", "--allow-run-as-root", "--mca", "btl", "self,tcp"}
			for _, kv := range env {
				a = append(a, "-x", kv)
			}
			return a
		}, "Open MPI"},
	} {
		t.Run(l.name, func(t *testing.T) {
			bin, err := exec.LookPath(l.bin)
			if err != nil {
				t.Skipf("%s not installed (apt-get install %s)", l.bin, map[string]string{"mpich": "mpich", "openmpi": "openmpi-bin"}[l.name])
			}
			const n = 3
			run := func(t *testing.T, env []string) string {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				env = append(env, mpirunChildEnv+"=1", "GORUN_TIMEOUT=60s", "GORUN_TRANSPORT=tcp")
				args := append(l.args(env), "-np", strconv.Itoa(n), os.Args[0], "-test.run=^TestMPIRunChild$", "-test.v")
				cmd := exec.CommandContext(ctx, bin, args...)
				cmd.Env = append(initCleanEnv(), "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
				out, err := cmd.CombinedOutput()
				if ctx.Err() != nil {
					t.Fatalf("%s did not finish: %v\n%s", l.bin, ctx.Err(), out)
				}
				if err != nil {
					t.Logf("%s: %v", l.bin, err)
				}
				return string(out)
			}
			t.Run("seeds", func(t *testing.T) {
				seed := "127.0.0.1:" + strconv.Itoa(initFreePort(t))
				out := run(t, []string{"GORUN_SEEDS=" + seed, "GORUN_JOB_ID=mpirun-" + initRandomID()})
				for r := range n {
					if want := fmt.Sprintf("RANK %d OF %d LOCAL %d OF %d SUM %d LAUNCHER %s\n", r, n, r, n, n*(n+1)/2, l.name); !strings.Contains(out, want) {
						t.Errorf("no %q in the output:\n%s", want, out)
					}
				}
			})
			t.Run("no-seeds", func(t *testing.T) {
				out := run(t, nil)
				if strings.Contains(out, " OF 1 ") {
					t.Errorf("a rank ran as a singleton:\n%s", out)
				}
				for _, want := range []string{"INIT ERROR", l.launcher, "GORUN_SEEDS"} {
					if c := strings.Count(out, want); c < n {
						t.Errorf("%q appears %d times, want once per rank (%d):\n%s", want, c, n, out)
					}
				}
			})
		})
	}
}
