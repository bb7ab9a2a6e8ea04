// Command compare runs gorun's collectives beside Open MPI, MPICH and
// torch.distributed's Gloo backend on this machine, interleaved (A B C A B C
// …, the order rotating every round) so that the machine's drift hits every
// implementation alike. It writes one table of medians per scenario, the
// ratio gorun / best peer paired within rounds, a table of the latency
// issue's targets (met or missed), an SVG plot per scenario next to the
// report, and the vCPU placement at the start and end of every scenario.
//
//	go run ./bench/compare                              # everything, 3 rounds
//	go run ./bench/compare -scenarios shm2,barrier -rounds 2
//	go run ./bench/compare -quick                       # smoke test, a few minutes
//
// Scenarios: shm2 shm4 tcp2 tcp4 bcast4, cluster-{2x2,4x1,bcast2x2} (on
// the namespace cluster: root, openssh-server), barrier-{shm,tcp}{2,4} (group
// "barrier"), sweep-shm2 and sweep-tcp2 (group "sweep": 8 B to 64 KiB).
// It needs Debian's openmpi-bin libopenmpi-dev mpich libmpich-dev
// python3-torch and a C compiler; implementations whose tools are missing
// are reported and left out. Every run checks its results; a run with wrong
// results is reported and left out of the medians.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	rounds := flag.Int("rounds", 3, "interleaved rounds; medians are reported")
	list := flag.String("scenarios", "", "comma-separated scenarios or groups (shm2,shm4,tcp2,tcp4,bcast4,barrier,sweep,cluster; default all)")
	one := flag.String("scenario", "", "the same as -scenarios (kept for old command lines)")
	out := flag.String("o", "bench/compare/RESULTS.md", "the report; plots go next to it (-quick: none kept unless set)")
	iters := flag.Int("iters", 20, "timed iterations per size")
	latIters := flag.Int("lat-iters", 200, "timed iterations per size in the barrier and sweep scenarios, and at sizes up to 8 KiB")
	warm := flag.Int("warmup", 5, "warm-up iterations per size")
	// OSU's micro-benchmarks skip 1,000 iterations of a small message
	// before they time; gorun's first few milliseconds after Init hold a
	// start-up transient (Go's sysmon, ranks woken onto one CPU: README),
	// which the rows of -iters calls after -warmup still show.
	latWarm := flag.Int("lat-warmup", 1000, "warm-up iterations per size where -lat-iters applies")
	quick := flag.Bool("quick", false, "smoke test: 1 round, 3 iterations (20 for latency), sizes up to 1 MiB, sweeps by 4")
	spin := flag.Bool("ompi-spin", false, "also run Open MPI busy-polling (mpi_yield_when_idle 0) where ranks outnumber CPUs")
	flag.Parse()
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *one != "" {
		*list = strings.Trim(*list+","+*one, ",")
	}
	if *quick {
		for name, v := range map[string]*int{"rounds": rounds, "iters": iters, "lat-iters": latIters, "warmup": warm, "lat-warmup": latWarm} {
			if !set[name] {
				*v = map[string]int{"rounds": 1, "iters": 3, "lat-iters": 20, "warmup": 1, "lat-warmup": 5}[name]
			}
		}
	}
	scs, err := selectScenarios(*list, *quick, *spin, runtime.NumCPU())
	if err != nil {
		fail(err)
	}
	// An interrupt stops the runs (each gets SIGINT: command) and the
	// run as a whole, taking the cluster and the work directory down.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	work, err = os.MkdirTemp("", "gorun-compare")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(work)
	// A smoke test keeps no files: its report and plots go to the
	// work directory, removed at the end (the sections are printed).
	keep := !*quick || set["o"]
	if !keep {
		*out = filepath.Join(work, "report", "RESULTS.md")
	}
	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
		fail(err)
	}
	if scs = startCluster(ctx, scs); theCluster != nil {
		defer theCluster.Down()
	}
	tools := build(ctx, work)
	probe := buildProber(ctx, work)

	var body bytes.Buffer
	outs := map[string]*outcome{}
	start := loadAvg()
	for _, sc := range scs {
		o := &outcome{sc: sc, runs: map[string][]run{}, before: probe.probe(ctx)}
		fmt.Printf("%s: placement %s\n", sc.name, o.before)
		for r := 0; r < *rounds; r++ {
			for i := range sc.impls {
				impl := sc.impls[(i+r)%len(sc.impls)] // rotate the order too
				if tools[impl] == nil {
					continue
				}
				res, err := runSized(ctx, tools[impl], impl, sc, counts{*warm, *iters, *latWarm, *latIters})
				if ctx.Err() != nil {
					fail(fmt.Errorf("interrupted during %s %s round %d: no report written", sc.name, impl, r))
				}
				if err != nil {
					fmt.Fprintf(os.Stderr, "%s %s round %d: %v\n", sc.name, impl, r, err)
					o.failed = append(o.failed, fmt.Sprintf("%s round %d: %s", impl, r, firstLine(err.Error())))
					continue
				}
				o.runs[impl] = append(o.runs[impl], run{round: r, res: res})
			}
		}
		o.after = probe.probe(ctx)
		for _, impl := range sc.impls {
			if tools[impl] == nil {
				o.missing = append(o.missing, impl)
			}
		}
		plot := ""
		if sc.coll != "barrier" { // one point per series: the table says it all
			plot = sc.name + ".svg"
			if err := writePlotFile(filepath.Join(filepath.Dir(*out), plot), o); err != nil {
				fail(err)
			}
		}
		section := o.render(plot)
		fmt.Print(section)
		body.WriteString(section)
		outs[sc.name] = o
	}

	var report bytes.Buffer
	fmt.Fprintf(&report, "# gorun vs Open MPI, MPICH and Gloo\n\n")
	fmt.Fprintf(&report, "Measured %s on %s (%d CPUs) with `go run ./bench/compare %s`.\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"), hostDesc(), runtime.NumCPU(), strings.Join(os.Args[1:], " "))
	fmt.Fprintf(&report, "Medians of %d interleaved rounds; %d timed iterations per size after %d warm-up (%d after %d in the barrier and sweep scenarios, and up to 8 KiB in the others); float32, sum, in place; busbw as nccl-tests defines it, computed from the time.\n", *rounds, *iters, *warm, *latIters, *latWarm)
	end := loadAvg()
	fmt.Fprintf(&report, "Load average (1, 5, 15 min): %s at the start, %s at the end.\n\n", start, end)
	if w := loadWarning(start, end, runtime.NumCPU()); w != "" {
		fmt.Fprintf(&report, "%s\n\n", w)
		fmt.Fprintln(os.Stderr, w)
	}
	fmt.Fprintf(&report, "Open MPI: pml ob1, btl self,vader (shm) or tcp,self on lo (tcp), --bind-to none, mpi_yield_when_idle 1 where ranks outnumber CPUs (its own default when oversubscribed; gorun's ranks yield too) and 0 otherwise. gorun: GORUN_TRANSPORT=shm or tcp. MPICH: Debian's ch4:ucx, defaults. Gloo: torch.distributed over TCP loopback.\n")
	fmt.Fprintf(&report, "Cluster scenarios (scripts/cluster, hosts linked at 2 Gbit/s by tc htb, control traffic first): gorun -H over ssh, GORUN_TRANSPORT auto (shm in a host, tcp between); gorun-flat adds GORUN_ALGO=allreduce:ring,broadcast:chain; Open MPI over ssh with btl self,vader,tcp on the hosts' subnet, mpi_yield_when_idle 1; Gloo's ranks started in their hosts, GLOO_SOCKET_IFNAME=eth0.\n")
	fmt.Fprintf(&report, "\n## Targets\n\nRatios from the same interleaved run, paired within rounds: gorun's time over the best peer's (latency), gorun's busbw over the best peer's (bandwidth).\n\n")
	report.WriteString(renderTargets(judge(outs, targets)))
	report.Write(body.Bytes())
	if _, err := os.Stat(filepath.Join(filepath.Dir(*out), "HISTORY.md")); err == nil {
		fmt.Fprintf(&report, "\nEarlier runs and their profile analysis: [HISTORY.md](HISTORY.md).\n")
	}
	if !keep {
		fmt.Print("\n" + renderTargets(judge(outs, targets)))
		fmt.Println("\n-quick keeps no report (-o FILE keeps one)")
		return
	}
	if err := os.WriteFile(*out, report.Bytes(), 0o644); err != nil {
		fail(err)
	}
	fmt.Println("\nwritten to", *out)
}

func writePlotFile(path string, o *outcome) error {
	var b bytes.Buffer
	title := fmt.Sprintf("%s: %s, %d ranks, %s; placement %s → %s", o.sc.name, o.sc.coll, o.sc.ranks, o.sc.fab, o.before, o.after)
	if err := writePlot(&b, title, o.plotPanels()); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// loadWarning is a warning when the 1-minute load average at the start or
// the end exceeds the CPUs: other work was running, and it preempts the
// busy-polling MPI ranks far more than gorun's, which sleep.
func loadWarning(start, end string, cpus int) string {
	worst := 0.0
	for _, l := range []string{start, end} {
		f, _, _ := strings.Cut(l, ",")
		if v, err := strconv.ParseFloat(f, 64); err == nil {
			worst = max(worst, v)
		}
	}
	if worst <= float64(cpus) {
		return ""
	}
	return fmt.Sprintf("**Warning: the machine was loaded (1-minute load average up to %.1f on %d CPUs).** Other work preempts the busy-polling MPI ranks far more than gorun's, so the ratios favour gorun; rerun on a quiet machine.", worst, cpus)
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// work holds the built programs (and a -quick run's report) until exit.
var work string

func fail(err error) {
	fmt.Fprintln(os.Stderr, "compare:", err)
	if theCluster != nil {
		theCluster.Down()
	}
	if work != "" {
		os.RemoveAll(work) // os.Exit skips main's deferred removal
	}
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
