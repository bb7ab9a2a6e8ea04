// Package python_test runs gorun's Python package (python/gorun) and the
// torch.distributed backend under the launcher, with Debian's /usr/bin/python3
// (python3-numpy, python3-torch, libtorch-dev for the backend). Tests skip
// with the reason where those are missing.
package python_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

const python = "/usr/bin/python3"

var (
	buildOnce sync.Once
	gorunBin  string
	buildErr  error
	workDir   string
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "gorun-python-test")
	if err != nil {
		panic(err)
	}
	workDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func need(t *testing.T, modules ...string) {
	t.Helper()
	for _, m := range modules {
		if err := exec.Command(python, "-c", "import "+m).Run(); err != nil {
			t.Skipf("%s cannot import %s (apt-get install python3-numpy python3-torch): %v", python, m, err)
		}
	}
}

// gorun runs `gorun -np n PROGRAM ARGS` from the repository root.
func gorun(t *testing.T, n int, args ...string) string {
	t.Helper()
	buildOnce.Do(func() {
		gorunBin = filepath.Join(workDir, "gorun")
		out, err := exec.Command("go", "build", "-o", gorunBin, "../cmd/gorun").CombinedOutput()
		if err != nil {
			buildErr = err
			t.Logf("%s", out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, gorunBin, append([]string{"-np", itoa(n)}, args...)...)
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "GORUN_TIMEOUT=120s", "GORUN_BUILD_DIR="+filepath.Join(workDir, "build"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("gorun -np %d %s: %v\n%s", n, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func itoa(n int) string { return string(rune('0' + n)) }

func TestCollectives(t *testing.T) {
	need(t, "numpy", "torch")
	out := gorun(t, 3, python, "python/tests/collectives_check.py")
	for r := 0; r < 3; r++ {
		if !strings.Contains(out, "collectives_check: rank "+itoa(r)+" ok") {
			t.Fatalf("rank %d did not finish:\n%s", r, out)
		}
	}
}

func compare(t *testing.T, a, b, rtol string) {
	t.Helper()
	out, err := exec.Command(python, "tests/compare_params.py", a, b, rtol).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// Two ranks with gorun.DistributedOptimizer end where one process training
// on the combined batch ends (float32 reassociation only: rtol 1e-4).
func TestDistributedOptimizerMatchesSingleProcess(t *testing.T) {
	need(t, "torch")
	dist := filepath.Join(workDir, "dist.pt")
	single := filepath.Join(workDir, "single.pt")
	gorun(t, 2, python, "examples/torch_train.py", "--mode", "gorun", "--out", dist)
	cmd := exec.Command(python, "examples/torch_train.py", "--mode", "single", "--ranks", "2", "--out", single)
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("single-process reference: %v\n%s", err, out)
	}
	compare(t, dist, single, "1e-4")
}

// An unmodified DistributedDataParallel model on backend "gorun" matches
// the same model on backend "gloo".
func TestDDPBackendMatchesGloo(t *testing.T) {
	need(t, "torch")
	if _, err := os.Stat("/usr/include/torch/csrc/distributed/c10d/ProcessGroup.hpp"); err != nil {
		t.Skip("torch's c10d headers are missing (apt-get install libtorch-dev pybind11-dev): the backend cannot be built")
	}
	g := filepath.Join(workDir, "ddp_gorun.pt")
	l := filepath.Join(workDir, "ddp_gloo.pt")
	gorun(t, 2, python, "examples/torch_train.py", "--mode", "ddp", "--backend", "gorun", "--out", g)
	gorun(t, 2, python, "examples/torch_train.py", "--mode", "ddp", "--backend", "gloo", "--out", l)
	compare(t, g, l, "1e-4")
}

// Every torch.distributed op on backend "gorun", then torch's own
// ZeroRedundancyOptimizer, DDP with gradient_as_bucket_view and
// static_graph (both against Gloo in the same job) and a send/recv
// pipeline (against one process), on 3 ranks.
func TestTorchOpsAndZeRO(t *testing.T) {
	need(t, "torch")
	if _, err := os.Stat("/usr/include/torch/csrc/distributed/c10d/ProcessGroup.hpp"); err != nil {
		t.Skip("torch's c10d headers are missing (apt-get install libtorch-dev pybind11-dev): the backend cannot be built")
	}
	out := gorun(t, 3, python, "python/tests/torch_ops_check.py")
	for r := 0; r < 3; r++ {
		if !strings.Contains(out, "torch_ops_check: rank "+itoa(r)+" ok") {
			t.Fatalf("rank %d did not finish:\n%s", r, out)
		}
	}
}

// The package's reduce, gather, scatter, alltoall,
// broadcast_optimizer_state and join for uneven inputs, on 3 ranks.
func TestPackageOps(t *testing.T) {
	need(t, "numpy", "torch")
	out := gorun(t, 3, python, "python/tests/package_check.py")
	for r := 0; r < 3; r++ {
		if !strings.Contains(out, "package_check: rank "+itoa(r)+" ok") {
			t.Fatalf("rank %d did not finish:\n%s", r, out)
		}
	}
}

// gorun.elastic under gorun --elastic --max-restarts 1: rank 2 of 4 kills
// itself mid-run, the survivors shrink and go on, gorun restarts it and it
// rejoins at a commit, receiving the state; every rank ends at full size
// with the weights of a run without a failure, and gorun exits 0.
func TestElasticStateRejoin(t *testing.T) {
	need(t, "numpy")
	out := gorun(t, 4, "--elastic", "--max-restarts", "1", python, "python/tests/elastic_check.py")
	for r := 0; r < 4; r++ {
		if !strings.Contains(out, "elastic_check: rank "+itoa(r)+" size 4 ") {
			t.Fatalf("rank %d did not end at full size:\n%s", r, out)
		}
	}
	t.Logf("%s", out)
	if strings.Count(out, " ok\n") != 4 || !strings.Contains(out, "restarted True") {
		t.Fatalf("want 4 ranks ok, one of them restarted:\n%s", out)
	}
}
