// Package python_test runs gorun's Python package (python/gorun) and the
// torch.distributed backend under the launcher, with Debian's /usr/bin/python3
// (python3-numpy, python3-torch, libtorch-dev for the backend). Tests skip
// with the reason where those are missing.
package python_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
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
		if err := importable(m); err != nil {
			t.Skipf("%s cannot import %s (apt-get install python3-numpy python3-torch): %v", python, m, err)
		}
	}
}

// imports holds, by module, whether python can import it: each test asks,
// and importing torch alone costs 1.6-2.3 s of CPU here.
var imports sync.Map // module → func() error

func importable(module string) error {
	f, _ := imports.LoadOrStore(module, sync.OnceValue(func() error {
		return exec.Command(python, "-c", "import "+module).Run()
	}))
	return f.(func() error)()
}

// gorun runs `gorun -np n PROGRAM ARGS` from the repository root.
func gorun(t *testing.T, n int, args ...string) string {
	t.Helper()
	return gorunEnv(t, nil, n, args...)
}

// gorunEnv is gorun with env added to the ranks' environment, after
// GORUN_TIMEOUT=120s (so it may set another).
func gorunEnv(t *testing.T, env []string, n int, args ...string) string {
	t.Helper()
	out, err := gorunRun(t, env, n, args...)
	if err != nil {
		t.Fatalf("gorun -np %d %s: %v\n%s", n, strings.Join(args, " "), err, out)
	}
	return out
}

// gorunRun is gorunEnv that returns the job's error rather than failing t.
func gorunRun(t *testing.T, env []string, n int, args ...string) (string, error) {
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
	killGroup(cmd)
	cmd.Env = append(append(os.Environ(), "GORUN_TIMEOUT=120s", "GORUN_BUILD_DIR="+filepath.Join(workDir, "build")), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// killGroup makes cmd's timeout kill its whole process group, and stop
// waiting for output soon after: a launcher killed on timeout (torchrun)
// leaves its ranks holding the output pipe, and the test would wait for
// them instead of failing.
func killGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
}

// TestTorchLeftoverLock: a rank killed while building the extension
// leaves torch's lock file behind (torch's FileBaton), and every later
// load used to wait for it forever, silently. Now the ranks load under a
// lock the kernel releases, and remove such a leftover.
func TestTorchLeftoverLock(t *testing.T) {
	needBackend(t)
	ext := filepath.Join(workDir, "build", "torch_ext")
	if err := os.MkdirAll(ext, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ext, "lock"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PYTHONPATH", "python")
	out := gorun(t, 2, python, "-m", "gorun.torch_backend")
	if c := strings.Count(out, "gorun torch backend built"); c != 2 {
		t.Fatalf("%d ranks loaded the backend, want 2:\n%s", c, out)
	}
	if c := strings.Count(out, "left by a process killed while building"); c != 1 {
		t.Fatalf("the leftover lock was reported %d times, want once:\n%s", c, out)
	}
}

func itoa(n int) string { return string(rune('0' + n)) }

func TestCollectives(t *testing.T) {
	need(t, "numpy", "torch")
	out := gorun(t, 3, python, "python/tests/collectives_check.py")
	ranksOK(t, out, "collectives_check", 3)
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

// Three ranks, --group 0,2: ranks 0 and 2 train data-parallel in a group
// of their own (broadcast_parameters and DistributedOptimizer with
// group=, rank 2 starting from other weights), rank 1 alone in a group of
// itself. The pair ends where one process on their combined batch ends,
// so "avg" divided by the group's 2, and rank 1 where one process on its
// batch alone ends.
func TestDistributedOptimizerGroup(t *testing.T) {
	need(t, "torch")
	dist := filepath.Join(workDir, "group-{rank}.pt")
	gorun(t, 3, python, "examples/torch_train.py", "--mode", "gorun", "--group", "0,2", "--out", dist)
	for _, c := range []struct{ rank, ranks string }{{"0", "2"}, {"1", "1"}} {
		single := filepath.Join(workDir, "group-single-"+c.ranks+".pt")
		cmd := exec.Command(python, "examples/torch_train.py", "--mode", "single", "--ranks", c.ranks, "--out", single)
		cmd.Dir = ".."
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("single-process reference: %v\n%s", err, out)
		}
		compare(t, strings.ReplaceAll(dist, "{rank}", c.rank), single, "1e-4")
	}
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
	ranksOK(t, out, "torch_ops_check", 3)
}

// The package's reduce, gather, scatter, alltoall, allgather of uneven
// first dimensions, create_group, broadcast_optimizer_state, join for
// uneven inputs and DistributedOptimizer's synchronize then step, and
// arguments every rank refuses alike (each aborting its group), on 3
// ranks.
func TestPackageOps(t *testing.T) {
	need(t, "numpy", "torch")
	out := gorun(t, 3, python, "python/tests/package_check.py")
	ranksOK(t, out, "package_check", 3)
}

// TestPackagePointToPoint: the package's send, recv, isend and irecv (a
// ring where every rank isends right and irecvs left, both started before
// either wait, in every dtype of numpy and torch, up to 4 MiB; blocking
// pairs; an isend and an irecv whose Handles are dropped unwaited, whose
// buffers must live until the message lands and be released after; two
// tags in flight, a negative one included; messages to the
// rank itself), ibarrier unfinished until the last rank starts it,
// ireduce_scatter, scan and exscan, exact values, on 4 ranks and again
// through a Group of ranks 3, 1 and 2 with peers numbered in the group.
// Then, each on a group it aborts: a wrong tag fails the receive; a send
// to the rank itself with no irecv is refused, failing the others naming
// it; a destination out of the group's range fails the exchange on every
// member, naming the refusing rank.
func TestPackagePointToPoint(t *testing.T) {
	need(t, "numpy", "torch")
	out := gorun(t, 4, python, "python/tests/p2p_check.py")
	ranksOK(t, out, "p2p_check", 4)
}

// TestPackageRefusalFailsEveryRank: where one rank's argument is refused
// by the package itself (a root out of range, an op its type lacks, a
// tensor not contiguous, a read-only array, a length size does not
// divide, a create_group list without it, a send's or recv's peer out of
// range or tag outside int32), that rank raises ValueError or
// TypeError and every other rank GorunError naming it within a minute,
// with GORUN_TIMEOUT=10m; each case on a group of every rank. They used to
// wait for it until GORUN_TIMEOUT (refuse_check.py exits at its minute).
func TestPackageRefusalFailsEveryRank(t *testing.T) {
	need(t, "numpy", "torch")
	out := gorunEnv(t, []string{"GORUN_TIMEOUT=10m"}, 3, python, "python/tests/refuse_check.py")
	ranksOK(t, out, "refuse_check", 3)
	t.Logf("%s", out)
}

// TestTorchWaitTimeout: Work.wait(timeout) on backend "gorun" raises at
// its timeout while the operation cannot finish (the peer joins it only
// afterwards), and aborts that group's communicator, so the peer's side
// returns (completing with the part sent before the abort, or failing
// naming rank 0) and later calls fail instead of hanging; the job's group
// goes on. A group's own timeout (new_group's timeout=) bounds a blocking
// call alike (it used to wait for GORUN_TIMEOUT).
func TestTorchWaitTimeout(t *testing.T) {
	needBackend(t)
	out := gorun(t, 3, python, "python/tests/torch_wait_check.py")
	ranksOK(t, out, "torch_wait_check", 3)
}

// TestTorchRefusalFailsEveryRank: where the torch backend refuses one
// rank's argument (a send's tensor not contiguous, a recv from any
// source, a bitwise op on floats, a complex send, an output of another dtype, split sizes that do not
// fit, a scatter list one short), that rank raises RuntimeError saying
// what it refused and every other rank RuntimeError naming it within a
// minute, with GORUN_TIMEOUT=10m; each case on a new group of 3 of the 4
// ranks, the last on the default group. They used to wait for it until
// GORUN_TIMEOUT (torch_refuse_check.py exits at its minute).
func TestTorchRefusalFailsEveryRank(t *testing.T) {
	needBackend(t)
	out := gorunEnv(t, []string{"GORUN_TIMEOUT=10m"}, 4, python, "python/tests/torch_refuse_check.py")
	ranksOK(t, out, "torch_refuse_check", 4)
	t.Logf("%s", out)
}

// TestHandleWaitTimeout: the package's Handle.wait(timeout) returns when
// the operation beats it and raises GorunError (status ERR_TIMEOUT) at
// its timeout while the operation cannot finish (the peer starts it only
// afterwards), aborting that group's communicator, so the peer's side
// returns (completing with the half sent before the abort, or failing
// naming the aborting rank) and later calls fail instead of hanging; the
// job's communicator goes on.
// gorun.poll is False before the peer starts and True once finished.
func TestHandleWaitTimeout(t *testing.T) {
	need(t, "torch")
	out := gorun(t, 2, python, "python/tests/handle_wait_check.py")
	ranksOK(t, out, "handle_wait_check", 2)
}

// freePorts returns a port p such that p and p+1 are free on loopback
// (torch's store takes one, gorun's gossip seed the other). It picks them
// below the kernel's ephemeral range, where no other process's connect or
// listen on port 0 can take p+1 in the seconds before gorun binds it
// (.ci/run failed once so: the parallel test packages' sockets come from
// that range).
func freePorts(t *testing.T) int {
	t.Helper()
	lo := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil {
				lo = v
			}
		}
	}
	try := func(p int) bool {
		a, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			return false
		}
		defer a.Close()
		b, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+1))
		if err != nil {
			return false
		}
		b.Close()
		return true
	}
	if lo > 12000 {
		for range 100 {
			if p := 10000 + rand.IntN(lo-12000); try(p) {
				return p
			}
		}
	}
	for range 50 { // no room below the ephemeral range: take one from it
		a, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := a.Addr().(*net.TCPAddr).Port
		a.Close()
		if try(p) {
			return p
		}
	}
	t.Fatal("no two adjacent free ports")
	return 0
}

// ranksOK fails t unless out has every one of n ranks' "NAME: rank R ok".
func ranksOK(t *testing.T, out, name string, n int) {
	t.Helper()
	for r := range n {
		if !strings.Contains(out, name+": rank "+itoa(r)+" ok") {
			t.Fatalf("rank %d did not finish:\n%s", r, out)
		}
	}
}

// run runs a launcher command from the repository root with the backend's
// build directory and timeout, and checks every rank's "NAME: rank R ok".
func runLauncher(t *testing.T, name string, n int, env []string, argv ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = ".."
	killGroup(cmd)
	cmd.Env = append(os.Environ(), append(env, "GORUN_TIMEOUT=120s", "GORUN_BUILD_DIR="+filepath.Join(workDir, "build"))...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	ranksOK(t, string(out), name, n)
}

func needBackend(t *testing.T) {
	t.Helper()
	need(t, "torch")
	if _, err := os.Stat("/usr/include/torch/csrc/distributed/c10d/ProcessGroup.hpp"); err != nil {
		t.Skip("torch's c10d headers are missing (apt-get install libtorch-dev pybind11-dev): the backend cannot be built")
	}
}

// TestTorchReinit: destroy_process_group then init_process_group again,
// on 4 ranks: after the group was aborted (rank 0's wait timed out), with
// rank 0 destroying its group a second after the others, the new group
// works (it ran on the aborted communicator, and the others met rank 0's
// old TCPStore: "Broken pipe"); again with the group healthy; and with
// store=, a prefix used again fails on every rank saying so (torch's
// barrier would wait out its timeout), a new one works.
func TestTorchReinit(t *testing.T) {
	needBackend(t)
	out := gorun(t, 4, python, "python/tests/torch_reinit_check.py")
	ranksOK(t, out, "torch_reinit_check", 4)
}

// TestTorchDestroyPendingCallback: a process group on backend "gorun"
// destroyed while a future of its operation has a Python then() callback
// still to run (started and asleep; the operation still in flight; the
// callback holding the group's last reference; the default group). The
// destructor waited for the completer thread running the callback while
// holding the GIL, which the callback needed: every case but the third
// hung (the check exits at its minute with every thread's stack); the
// third aborted the process (a completer joining itself).
func TestTorchDestroyPendingCallback(t *testing.T) {
	needBackend(t)
	out := gorun(t, 2, python, "python/tests/torch_destroy_check.py")
	ranksOK(t, out, "torch_destroy_check", 2)
}

// TestTorchExitPendingCallback: a script that ends without destroying its
// process groups while their futures' then() callbacks are still to run
// (one started and asleep; one whose all_reduce is still in flight on the
// default group). The interpreter ended a completer thread as its
// callback took the GIL back during finalization, and the process died
// of SIGSEGV ("rank R was killed by signal 11"); now every rank exits 0
// after each callback ran with the reduced tensor.
func TestTorchExitPendingCallback(t *testing.T) {
	needBackend(t)
	out, err := gorunRun(t, nil, 2, python, "python/tests/torch_exit_check.py")
	if err != nil || strings.Contains(out, "signal") {
		t.Fatalf("a script ending with callbacks to run: %v\n%s", err, out)
	}
	for r := range 2 {
		for _, c := range []string{"running", "in flight"} {
			if w := "torch_exit_check: rank " + itoa(r) + ": " + c + ": callback ok"; !strings.Contains(out, w) {
				t.Errorf("no %q:\n%s", w, out)
			}
		}
	}
}

// TestTorchSpawnRefused: ranks started by torch.multiprocessing.spawn,
// which no launcher describes to gorun, raise an error saying to use one,
// with init_process_group(rank=, world_size=) and with RANK and
// WORLD_SIZE set in os.environ by the rank itself (they used to join a
// job of one rank each: "torch says rank 0 of 2").
func TestTorchSpawnRefused(t *testing.T) {
	needBackend(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "python/tests/torch_spawn_check.py")
	cmd.Dir = ".."
	killGroup(cmd)
	cmd.Env = append(os.Environ(), "GORUN_TIMEOUT=60s", "GORUN_BUILD_DIR="+filepath.Join(workDir, "build"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	ranksOK(t, string(out), "torch_spawn_check", 2)
}

// TestTorchrun: torch's own launcher (torch.distributed.run, as `torchrun`)
// starts 2 ranks of torch_ops_check on backend "gorun": every op,
// ZeroRedundancyOptimizer, DDP with gradient_as_bucket_view and
// static_graph, and the send/recv pipeline, with no gorun launcher. gorun
// finds its peers from torchrun's MASTER_ADDR/MASTER_PORT.
func TestTorchrun(t *testing.T) {
	needBackend(t)
	p := freePorts(t)
	// --redirects 1 --tee 1: Debian's torch 1.13 on Python 3.11 cannot
	// parse its own default "0" (Std.from_str returns None, since 3.11's
	// Flag iteration skips the zero member); teeing stdout still shows it.
	runLauncher(t, "torch_ops_check", 2, nil, python, "-m", "torch.distributed.run", "--nproc_per_node", "2",
		"--master_addr", "127.0.0.1", "--master_port", strconv.Itoa(p),
		"--redirects", "1", "--tee", "1", "--log_dir", filepath.Join(workDir, "torchrun-logs"),
		"python/tests/torch_ops_check.py")
}

// TestTorchMPIRun: MPICH's mpirun starts the same script, with only
// GORUN_SEEDS (and a job id) passed: the backend derives torch's RANK,
// WORLD_SIZE and LOCAL_RANK from PMI_RANK, PMI_SIZE and MPI_LOCALRANKID.
func TestTorchMPIRun(t *testing.T) {
	needBackend(t)
	bin, err := exec.LookPath("mpirun.mpich")
	if err != nil {
		t.Skip("mpirun.mpich not installed (apt-get install mpich)")
	}
	p := freePorts(t)
	runLauncher(t, "torch_ops_check", 2, nil, bin, "-genv", "GORUN_SEEDS", "127.0.0.1:"+strconv.Itoa(p),
		"-genv", "GORUN_JOB_ID", "torch-mpirun-"+strconv.Itoa(p), "-np", "2", python, "python/tests/torch_ops_check.py")
}

// TestTorchTimeline: with gorun --timeline, every torch.distributed call on
// backend "gorun" is a span on its rank's "torch" row, named as torch
// names the op, beside the collectives it ran.
func TestTorchTimeline(t *testing.T) {
	needBackend(t)
	file := filepath.Join(workDir, "torch-timeline.json")
	out := gorun(t, 2, "--timeline", file, python, "python/tests/torch_trace_check.py")
	ranksOK(t, out, "torch_trace_check", 2)
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var tr struct {
		TraceEvents []struct {
			Name string         `json:"name"`
			Ph   string         `json:"ph"`
			Pid  int            `json:"pid"`
			Tid  int            `json:"tid"`
			Args map[string]any `json:"args"`
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal(data, &tr); err != nil {
		t.Fatalf("%v\n%.2000s", err, data)
	}
	torchRow := map[[2]int]bool{} // (pid, tid) of each rank's "torch" row
	for _, e := range tr.TraceEvents {
		if e.Ph == "M" && e.Name == "thread_name" && e.Args["name"] == "torch" {
			torchRow[[2]int{e.Pid, e.Tid}] = true
		}
	}
	count := map[int]map[string]int{} // pid -> torch op name -> spans
	ops := map[int]int{}              // pid -> allreduce collectives
	for _, e := range tr.TraceEvents {
		if e.Ph != "X" {
			continue
		}
		if torchRow[[2]int{e.Pid, e.Tid}] {
			if count[e.Pid] == nil {
				count[e.Pid] = map[string]int{}
			}
			count[e.Pid][e.Name]++
		} else if e.Name == "allreduce" {
			ops[e.Pid]++
		}
	}
	if len(count) != 2 {
		t.Fatalf("torch rows with spans on %d ranks, want 2 (rows %v)\n%.3000s", len(count), torchRow, data)
	}
	for pid, c := range count {
		if c["ALLREDUCE"] != 3 || c["BROADCAST"] != 1 || c["BARRIER"] != 1 {
			t.Errorf("rank process %d: torch spans %v, want 3 ALLREDUCE, 1 BROADCAST, 1 BARRIER", pid, c)
		}
		if ops[pid] < 3 {
			t.Errorf("rank process %d: %d allreduce collectives beside the torch spans, want at least 3", pid, ops[pid])
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

// The same script with --no-wait and rank 2's restart slowed by a second:
// the survivors finish at 3 ranks before it is back, its gorun.init()
// raises GorunError with status gorun.ERR_JOB_GONE once it has found no
// rank left for 10 s (not at GORUN_TIMEOUT, 120 s here), and the script
// exits 0 there, so gorun does.
func TestElasticJobGone(t *testing.T) {
	need(t, "numpy")
	slow := `if [ -n "$GORUN_RESTART" ]; then sleep 1; fi; exec "$0" "$@"`
	t0 := time.Now()
	out := gorun(t, 4, "--elastic", "--max-restarts", "1", "sh", "-c", slow, python, "python/tests/elastic_check.py", "--no-wait")
	t.Logf("%v\n%s", time.Since(t0).Round(time.Millisecond), out)
	if strings.Count(out, " ok\n") != 3 || !strings.Contains(out, "rank restarted after the job ended") {
		t.Fatalf("want 3 ranks ok at size 3 and the restarted rank finding the job gone:\n%s", out)
	}
}
