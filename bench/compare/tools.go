package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/gorun-hpc/gorun/internal/jobenv"
)

// tool is how to start one implementation.
type tool struct {
	cmd func(sc scenario, warm, iters int) []string
	env func(sc scenario) []string
}

// result is one size of one run: rank-max time per call, wrong elements.
type result struct {
	bytes int64
	us    float64
	wrong int64
}

// build compiles the MPI program with each MPI's mpicc, gorun and
// allreduce_perf, and finds Debian's torch; what is missing is reported and
// left out.
func build(ctx context.Context, work string) map[string]*tool {
	tools := map[string]*tool{}
	src, _ := filepath.Abs("bench/compare/progs/mpi_coll.c")
	mpiEnv := func(scenario) []string {
		return []string{"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1", "OMPI_MCA_plm_rsh_agent="}
	}
	for _, m := range []struct{ name, cc, run string }{{"openmpi", "mpicc.openmpi", "mpirun.openmpi"}, {"mpich", "mpicc.mpich", "mpirun.mpich"}} {
		if _, err := exec.LookPath(m.cc); err != nil {
			fmt.Fprintf(os.Stderr, "%s left out: %s not found (apt-get install openmpi-bin libopenmpi-dev mpich libmpich-dev)\n", m.name, m.cc)
			continue
		}
		bin := filepath.Join(work, "mpi_coll_"+m.name)
		if out, err := exec.CommandContext(ctx, m.cc, "-O2", "-o", bin, src).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "%s left out: %v\n%s", m.name, err, out)
			continue
		}
		run := m.run
		prog := func(sc scenario, warm, iters int) []string {
			return append([]string{bin, sc.coll, strconv.Itoa(warm), strconv.Itoa(iters)}, sizeArgs(sc)...)
		}
		if m.name == "mpich" {
			tools["mpich"] = &tool{cmd: func(sc scenario, warm, iters int) []string {
				return append([]string{run, "-n", strconv.Itoa(sc.ranks)}, prog(sc, warm, iters)...)
			}, env: mpiEnv}
			continue
		}
		for _, spin := range []bool{false, true} {
			name := "openmpi"
			if spin {
				name = "openmpi-spin"
			}
			tools[name] = &tool{cmd: func(sc scenario, warm, iters int) []string {
				if sc.hosts > 0 {
					return append(openMPIClusterArgs(run, sc), prog(sc, warm, iters)...)
				}
				return append(openMPIArgs(run, sc, runtime.NumCPU(), spin), prog(sc, warm, iters)...)
			}, env: mpiEnv}
		}
	}
	if err := exec.CommandContext(ctx, "/usr/bin/python3", "-c", "import torch.distributed").Run(); err != nil {
		fmt.Fprintln(os.Stderr, "gloo left out: /usr/bin/python3 cannot import torch.distributed (apt-get install python3-torch)")
	} else {
		py, _ := filepath.Abs("bench/compare/progs/gloo_coll.py")
		tools["gloo"] = &tool{cmd: func(sc scenario, warm, iters int) []string {
			return append([]string{"/usr/bin/python3", py, sc.coll, strconv.Itoa(warm), strconv.Itoa(iters)}, sizeArgs(sc)...)
		}}
	}
	gorun := filepath.Join(work, "gorun")
	perf := filepath.Join(work, "allreduce_perf")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", gorun, "./cmd/gorun").CombinedOutput(); err != nil {
		fail(fmt.Errorf("building gorun: %v\n%s", err, out))
	}
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", perf, "./examples/allreduce_perf").CombinedOutput(); err != nil {
		fail(fmt.Errorf("building allreduce_perf: %v\n%s", err, out))
	}
	gorunCmd := func(sc scenario, warm, iters int) []string {
		where := []string{"-np", strconv.Itoa(sc.ranks)}
		if sc.hosts > 0 {
			where = append(where, "-H", hostList(sc))
		}
		return append(append([]string{gorun}, where...), "--tag-output=false", perf,
			"-coll", sc.coll, "-w", strconv.Itoa(warm), "-n", strconv.Itoa(iters), "-d", "float32", "-o", "sum", "-c", "1", "-sizes", strings.Join(sizeArgs(sc), ","))
	}
	gorunEnv := func(sc scenario) []string {
		if sc.hosts > 0 {
			return nil // auto: shm inside a host, tcp between hosts
		}
		return []string{jobenv.Transport + "=" + sc.fab}
	}
	tools["gorun"] = &tool{cmd: gorunCmd, env: gorunEnv}
	// Flat: the ring and the chain, which the table picks for large
	// buffers when the job does not span hosts.
	tools["gorun-flat"] = &tool{cmd: gorunCmd, env: func(sc scenario) []string {
		return append(gorunEnv(sc), jobenv.Algo+"=allreduce:ring,broadcast:chain")
	}}
	return tools
}

// openMPIArgs is mpirun's command line for a scenario: pml ob1 with only the
// fabric's btl (so neither UCX nor shared memory stands in for TCP), no
// binding (gorun binds nothing either), and mpi_yield_when_idle set
// explicitly: 1 where ranks outnumber the CPUs (Open MPI's own default when
// it sees oversubscription, and the fair setting: gorun's ranks yield too),
// 0 otherwise (every rank has a core and busy-polls, as Open MPI does by
// default). spin forces 0 even when oversubscribed, the "openmpi-spin"
// series.
func openMPIArgs(mpirun string, sc scenario, cpus int, spin bool) []string {
	args := []string{mpirun, "-n", strconv.Itoa(sc.ranks), "--oversubscribe", "--bind-to", "none", "--mca", "pml", "ob1"}
	if sc.fab == "tcp" {
		args = append(args, "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", "lo")
	} else {
		args = append(args, "--mca", "btl", "self,vader")
	}
	yield := "0"
	if sc.ranks > cpus && !spin {
		yield = "1"
	}
	return append(args, "--mca", "mpi_yield_when_idle", yield)
}

func sizeArgs(sc scenario) []string {
	var s []string
	for _, b := range sc.sizes {
		s = append(s, strconv.FormatInt(b, 10))
	}
	return s
}

// latMax is the largest size that every scenario times as the barrier
// and sweep scenarios do (-lat-iters after -lat-warmup), as OSU's
// micro-benchmarks run more iterations below their large-message size (8
// KiB): a row of 30 calls of a few microseconds measures the scheduler
// more than the library (4 ranks on 2 CPUs, 8 B: rows of 30 calls moved
// 2-4x between runs, for Open MPI as for gorun, 2026-11-27).
const latMax = 8 << 10

// counts are the iterations: warm and iters for large sizes, latWarm and
// latIters for latency-bound ones.
type counts struct{ warm, iters, latWarm, latIters int }

// runSized runs sc's sizes with t: the latency-bound ones (all of a lat
// scenario's, those up to latMax in the others) with the latency counts,
// the rest in a second run with the others.
func runSized(ctx context.Context, t *tool, impl string, sc scenario, n counts) ([]result, error) {
	if sc.lat {
		return runOne(ctx, t, impl, sc, n.latWarm, n.latIters)
	}
	small, large := sc, sc
	small.sizes, large.sizes = nil, nil
	for _, b := range sc.sizes {
		if b <= latMax {
			small.sizes = append(small.sizes, b)
		} else {
			large.sizes = append(large.sizes, b)
		}
	}
	var res []result
	if len(small.sizes) > 0 {
		r, err := runOne(ctx, t, impl, small, n.latWarm, n.latIters)
		if err != nil {
			return nil, err
		}
		res = r
	}
	if len(large.sizes) > 0 {
		r, err := runOne(ctx, t, impl, large, n.warm, n.iters)
		if err != nil {
			return nil, err
		}
		res = append(res, r...)
	}
	// In sc's order, as one run would give them.
	by := make(map[int64]result, len(res))
	for _, r := range res {
		by[r.bytes] = r
	}
	out := make([]result, 0, len(sc.sizes))
	for _, b := range sc.sizes {
		out = append(out, by[b])
	}
	return out, nil
}

// runOne runs one implementation on one scenario and checks its results.
func runOne(ctx context.Context, t *tool, impl string, sc scenario, warm, iters int) ([]result, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	argv := t.cmd(sc, warm, iters)
	var out []byte
	var err error
	if impl == "gloo" {
		out, err = runRanks(ctx, argv, sc)
	} else {
		cmd := command(ctx, argv)
		cmd.Env = append(os.Environ(), t.env(sc)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err = cmd.Output()
		if err != nil {
			err = fmt.Errorf("%v: %s", err, lastLines(stderr.String(), 5))
		}
	}
	if err != nil {
		return nil, err
	}
	res := parse(out, strings.HasPrefix(impl, "gorun"))
	if len(res) != len(sc.sizes) {
		return nil, fmt.Errorf("parsed %d of %d sizes from:\n%s", len(res), len(sc.sizes), out)
	}
	for _, r := range res {
		if r.wrong != 0 {
			return nil, fmt.Errorf("%d wrong results at %d bytes", r.wrong, r.bytes)
		}
		if r.us <= 0 {
			return nil, fmt.Errorf("no time at %d bytes in:\n%s", r.bytes, out)
		}
	}
	return res, nil
}

// command runs argv until ctx ends, then interrupts it (SIGINT), as a
// person at the terminal would, so that a launcher (gorun, mpirun) takes
// its ranks down; SIGKILL after 10 s.
func command(ctx context.Context, argv []string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// runRanks starts one process per rank with torchrun's variables (on the
// cluster, each in its rank's host).
func runRanks(ctx context.Context, argv []string, sc scenario) ([]byte, error) {
	port := 29500 + os.Getpid()%1000
	n := sc.ranks
	var out bytes.Buffer
	cmds := make([]*exec.Cmd, n)
	for r := 0; r < n; r++ {
		a, master, extra := argv, "127.0.0.1", []string(nil)
		if sc.hosts > 0 {
			a, master, extra = clusterAgent(sc, r, argv), rankHost(sc, 0), []string{"GLOO_SOCKET_IFNAME=eth0"}
		}
		c := command(ctx, a)
		c.Env = append(append(os.Environ(), "RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(n), "MASTER_ADDR="+master, "MASTER_PORT="+strconv.Itoa(port)), extra...)
		if r == 0 {
			c.Stdout = &out
		}
		c.Stderr = os.Stderr
		if err := c.Start(); err != nil {
			return nil, err
		}
		cmds[r] = c
	}
	var errs []error
	for _, c := range cmds {
		errs = append(errs, c.Wait())
	}
	return out.Bytes(), errors.Join(errs...)
}

// parse reads "bytes count time_us algbw busbw wrong" lines (the MPI and
// Gloo programs), or for gorun the nccl-tests style table whose last four
// columns are the in-place time, algbw, busbw and #wrong. Bandwidths are
// recomputed from the times (see busbw), not parsed: the printed ones are
// rounded to nothing at small sizes.
func parse(out []byte, nccl bool) []result {
	var res []result
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 {
			continue
		}
		b, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			continue
		}
		t, w := 2, 5
		if nccl {
			t, w = len(f)-4, len(f)-1
		}
		us, _ := strconv.ParseFloat(f[t], 64)
		wrong, _ := strconv.ParseInt(f[w], 10, 64)
		res = append(res, result{bytes: b, us: us, wrong: wrong})
	}
	return res
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
