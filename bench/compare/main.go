// Command compare runs gorun's collectives beside Open MPI, MPICH and
// torch.distributed's Gloo backend on this machine, interleaved (A B C A B C
// …) so that the machine's drift hits every implementation alike, and prints
// one table of medians per scenario with the ratio gorun / best peer.
//
//	go run ./bench/compare                 # all scenarios, 5 rounds
//	go run ./bench/compare -rounds 3 -scenario shm2
//
// It needs Debian's openmpi-bin libopenmpi-dev mpich libmpich-dev
// python3-torch; implementations whose tools are missing are reported and
// left out. Every run checks its results; a run with wrong results fails the
// comparison.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"
)

type scenario struct {
	name  string
	coll  string // allreduce or broadcast
	ranks int
	fab   string // shm or tcp
	sizes []int64
	impls []string
}

var scenarios = []scenario{
	{"shm2", "allreduce", 2, "shm", []int64{8, 1 << 20, 16 << 20, 256 << 20}, []string{"gorun", "openmpi", "mpich"}},
	{"tcp2", "allreduce", 2, "tcp", []int64{8, 1 << 20, 16 << 20}, []string{"gorun", "openmpi", "gloo"}},
	{"tcp4", "allreduce", 4, "tcp", []int64{8, 1 << 20, 16 << 20}, []string{"gorun", "openmpi", "gloo"}},
	{"bcast4", "broadcast", 4, "shm", []int64{16 << 20}, []string{"gorun", "openmpi", "mpich"}},
}

type result struct {
	bytes int64
	us    float64
	busbw float64
	wrong int64
}

func main() {
	rounds := flag.Int("rounds", 5, "interleaved rounds; medians are reported")
	only := flag.String("scenario", "", "run only this scenario (shm2, tcp2, tcp4, bcast4)")
	out := flag.String("o", "bench/compare/RESULTS.md", "write the tables here too")
	iters := flag.Int("iters", 20, "timed iterations per size")
	flag.Parse()
	ctx := context.Background()

	work, err := os.MkdirTemp("", "gorun-compare")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(work)
	tools := build(ctx, work)

	var report bytes.Buffer
	fmt.Fprintf(&report, "# gorun vs Open MPI, MPICH and Gloo\n\nMeasured %s on %s with `go run ./bench/compare -rounds %d`.\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"), hostDesc(), *rounds)
	fmt.Fprintf(&report, "Medians of %d interleaved rounds, %d timed iterations each; float32, sum, in place; busbw as nccl-tests defines it.\n", *rounds, *iters)
	fmt.Fprintf(&report, "CPUs: %d; load average (1, 5, 15 min) at the start: %s.\n", runtime.NumCPU(), loadAvg())
	for _, sc := range scenarios {
		if *only != "" && sc.name != *only {
			continue
		}
		runs := map[string][][]result{}
		for r := 0; r < *rounds; r++ {
			for i := range sc.impls {
				impl := sc.impls[(i+r)%len(sc.impls)] // rotate the order too
				if tools[impl] == nil {
					continue
				}
				res, err := runOne(ctx, tools, impl, sc, *iters)
				if err != nil {
					fmt.Fprintf(os.Stderr, "%s %s round %d: %v\n", sc.name, impl, r, err)
					continue
				}
				runs[impl] = append(runs[impl], res)
			}
		}
		table := render(sc, runs, tools)
		fmt.Print(table)
		report.WriteString(table)
	}
	fmt.Fprintf(&report, "\nLoad average at the end: %s.\n", loadAvg())
	if err := os.WriteFile(*out, report.Bytes(), 0o644); err != nil {
		fail(err)
	}
	fmt.Println("written to", *out)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "compare:", err)
	os.Exit(1)
}

// loadAvg is /proc/loadavg's three load averages, as uptime prints them.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], ", ")
	}
	return "unknown"
}

func hostDesc() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "model name") {
			if _, v, ok := strings.Cut(l, ":"); ok {
				return strings.TrimSpace(v)
			}
		}
	}
	return "this machine"
}

// tool is how to start one implementation.
type tool struct {
	cmd  func(sc scenario, iters int) []string
	env  func(sc scenario) []string
	note string
}

func build(ctx context.Context, work string) map[string]*tool {
	tools := map[string]*tool{}
	src, _ := filepath.Abs("bench/compare/progs/mpi_coll.c")
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
		name, run := m.name, m.run
		tools[name] = &tool{cmd: func(sc scenario, iters int) []string {
			args := []string{run, "-n", strconv.Itoa(sc.ranks)}
			if name == "openmpi" {
				args = append(args, "--oversubscribe", "--bind-to", "none")
				if sc.fab == "tcp" {
					args = append(args, "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", "lo")
				}
			}
			return append(args, append([]string{bin, sc.coll, "5", strconv.Itoa(iters)}, sizeArgs(sc)...)...)
		}, env: func(scenario) []string {
			return []string{"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1", "OMPI_MCA_plm_rsh_agent="}
		}}
	}
	if err := exec.CommandContext(ctx, "/usr/bin/python3", "-c", "import torch.distributed").Run(); err != nil {
		fmt.Fprintln(os.Stderr, "gloo left out: /usr/bin/python3 cannot import torch.distributed (apt-get install python3-torch)")
	} else {
		py, _ := filepath.Abs("bench/compare/progs/gloo_coll.py")
		tools["gloo"] = &tool{cmd: func(sc scenario, iters int) []string {
			return append([]string{"/usr/bin/python3", py, sc.coll, "5", strconv.Itoa(iters)}, sizeArgs(sc)...)
		}, note: "one process per rank"}
	}
	gorun := filepath.Join(work, "gorun")
	perf := filepath.Join(work, "allreduce_perf")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", gorun, "./cmd/gorun").CombinedOutput(); err != nil {
		fail(fmt.Errorf("building gorun: %v\n%s", err, out))
	}
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", perf, "./examples/allreduce_perf").CombinedOutput(); err != nil {
		fail(fmt.Errorf("building allreduce_perf: %v\n%s", err, out))
	}
	tools["gorun"] = &tool{cmd: func(sc scenario, iters int) []string {
		args := []string{gorun, "-np", strconv.Itoa(sc.ranks), "--tag-output=false", perf,
			"-coll", sc.coll, "-w", "5", "-n", strconv.Itoa(iters), "-d", "float32", "-o", "sum", "-c", "1", "-sizes", strings.Join(sizeArgs(sc), ",")}
		return args
	}, env: func(sc scenario) []string { return []string{"GORUN_TRANSPORT=" + sc.fab} }}
	return tools
}

func sizeArgs(sc scenario) []string {
	var s []string
	for _, b := range sc.sizes {
		s = append(s, strconv.FormatInt(b, 10))
	}
	return s
}

func runOne(ctx context.Context, tools map[string]*tool, impl string, sc scenario, iters int) ([]result, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	t := tools[impl]
	argv := t.cmd(sc, iters)
	var out []byte
	var err error
	if impl == "gloo" {
		out, err = runRanks(ctx, argv, sc.ranks)
	} else {
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
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
	res := parse(out, impl == "gorun")
	if len(res) != len(sc.sizes) {
		return nil, fmt.Errorf("parsed %d of %d sizes from:\n%s", len(res), len(sc.sizes), out)
	}
	for _, r := range res {
		if r.wrong != 0 {
			return nil, fmt.Errorf("%d wrong results at %d bytes", r.wrong, r.bytes)
		}
	}
	return res, nil
}

// runRanks starts one process per rank with torchrun's variables.
func runRanks(ctx context.Context, argv []string, n int) ([]byte, error) {
	port := 29500 + os.Getpid()%1000
	var out bytes.Buffer
	cmds := make([]*exec.Cmd, n)
	for r := 0; r < n; r++ {
		c := exec.CommandContext(ctx, argv[0], argv[1:]...)
		c.Env = append(os.Environ(), "RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(n), "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port))
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
// columns are the in-place time, algbw, busbw and #wrong.
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
		var us, busbw float64
		var wrong int64
		if nccl {
			n := len(f)
			us, _ = strconv.ParseFloat(f[n-4], 64)
			busbw, _ = strconv.ParseFloat(f[n-2], 64)
			wrong, _ = strconv.ParseInt(f[n-1], 10, 64)
		} else {
			us, _ = strconv.ParseFloat(f[2], 64)
			busbw, _ = strconv.ParseFloat(f[4], 64)
			wrong, _ = strconv.ParseInt(f[5], 10, 64)
		}
		res = append(res, result{bytes: b, us: us, busbw: busbw, wrong: wrong})
	}
	return res
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func render(sc scenario, runs map[string][][]result, tools map[string]*tool) string {
	var w strings.Builder
	fabric := map[string]string{"shm": "same host, shared memory", "tcp": "TCP loopback"}[sc.fab]
	fmt.Fprintf(&w, "\n## %s: %s, %d ranks, %s\n\n", sc.name, sc.coll, sc.ranks, fabric)
	fmt.Fprintf(&w, "| bytes |")
	for _, impl := range sc.impls {
		fmt.Fprintf(&w, " %s µs | %s busbw GB/s |", impl, impl)
	}
	fmt.Fprintf(&w, " gorun / best peer |\n|---:|")
	for range sc.impls {
		fmt.Fprintf(&w, "---:|---:|")
	}
	fmt.Fprintf(&w, "---:|\n")
	for i, size := range sc.sizes {
		fmt.Fprintf(&w, "| %s |", human(size))
		med := map[string][2]float64{}
		for _, impl := range sc.impls {
			var us, bw []float64
			for _, r := range runs[impl] {
				us = append(us, r[i].us)
				bw = append(bw, r[i].busbw)
			}
			if len(us) == 0 {
				fmt.Fprintf(&w, " – | – |")
				continue
			}
			med[impl] = [2]float64{median(us), median(bw)}
			fmt.Fprintf(&w, " %.2f | %.3f |", median(us), median(bw))
		}
		ratio := "–"
		if g, ok := med["gorun"]; ok {
			best := [2]float64{}
			for impl, m := range med {
				if impl != "gorun" && (best[0] == 0 || m[0] < best[0]) {
					best = m
				}
			}
			if best[0] > 0 {
				if size <= 64 { // latency: best peer time / gorun time (>1 means gorun is faster)
					ratio = fmt.Sprintf("%.2f× (latency)", best[0]/g[0])
				} else {
					ratio = fmt.Sprintf("%.2f× (busbw)", g[1]/best[1])
				}
			}
		}
		fmt.Fprintf(&w, " %s |\n", ratio)
	}
	for _, impl := range sc.impls {
		if tools[impl] == nil {
			fmt.Fprintf(&w, "\n%s was not run: its tools are not installed.\n", impl)
		}
	}
	return w.String()
}

func human(b int64) string {
	switch {
	case b >= 1<<20:
		return fmt.Sprintf("%d MiB", b>>20)
	case b >= 1<<10:
		return fmt.Sprintf("%d KiB", b>>10)
	}
	return fmt.Sprintf("%d B", b)
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
