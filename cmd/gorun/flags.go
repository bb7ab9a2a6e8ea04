package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gorun-hpc/gorun/launcher"
)

// errHelp is returned for -h: print usage, exit 0.
var errHelp = flag.ErrHelp

// listFlag collects a repeated flag (-x).
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// durationFlag accepts a Go duration ("90s", "10m") or, as mpirun's
// --timeout does, a number of seconds.
type durationFlag struct{ d *time.Duration }

func (f durationFlag) String() string {
	if f.d == nil {
		return "0s"
	}
	return f.d.String()
}

func (f durationFlag) Set(v string) error {
	if n, err := strconv.ParseFloat(v, 64); err == nil {
		*f.d = time.Duration(n * float64(time.Second))
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return fmt.Errorf("%q is neither seconds nor a duration like 90s", v)
	}
	*f.d = d
	return nil
}

// parseArgs turns gorun's command line (without argv[0]) into a job.
// Flags come first; the first non-flag word is the program and everything
// after it is the program's.
func parseArgs(args []string, stderr io.Writer) (launcher.Config, error) {
	var (
		cfg      launcher.Config
		hosts    string
		hostfile string
		agent    string
		tag      = true
		export   listFlag
		slurm    = "auto"
	)
	fs := flag.NewFlagSet("gorun", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: gorun -np N [flags] PROGRAM [ARGS...]\n\n"+
			"PROGRAM is a binary or a Go package directory (built once with the go tool).\n\nFlags:\n")
		fs.PrintDefaults()
	}
	fs.IntVar(&cfg.NP, "np", 0, "number of ranks")
	fs.IntVar(&cfg.NP, "n", 0, "same as -np")
	fs.StringVar(&hosts, "H", "", "hosts and slots: host1:2,host2:2")
	fs.StringVar(&hosts, "host", "", "same as -H")
	fs.StringVar(&hostfile, "hostfile", "", "Open MPI hostfile (\"host slots=N\" lines)")
	fs.StringVar(&hostfile, "machinefile", "", "same as --hostfile")
	fs.StringVar(&agent, "launch-agent", "", "command that runs argv on a host, host appended (default ssh)")
	fs.Var(&export, "x", "pass VAR (gorun's value) or VAR=value to the ranks; repeatable")
	fs.BoolVar(&tag, "tag-output", true, "prefix each output line with [rank]")
	fs.Var(durationFlag{&cfg.Timeout}, "timeout", "stop the job after this long (seconds or 10m)")
	fs.StringVar(&cfg.Bind, "bind-to", "none", "bind each rank to a core, a NUMA node or nothing: core|numa|none")
	fs.IntVar(&cfg.GossipPort, "gossip-port", 0, "rank 0's gossip seed port (0: pick one)")
	fs.BoolVar(&cfg.Elastic, "elastic", false, "keep the job going when a rank dies (sets GORUN_ELASTIC=1; exit status is still the dead rank's)")
	fs.IntVar(&cfg.MaxRestarts, "max-restarts", 0, "with --elastic: restart a failed rank up to N times; it rejoins through comm.Init and Comm.Grow")
	fs.Var(durationFlag{&cfg.StallTimeout}, "stall-timeout", "report ranks stuck in a collective after this long; 0: 30s, <0: off")
	fs.Var(durationFlag{&cfg.KillGrace}, "kill-grace", "time between SIGTERM and SIGKILL when stopping ranks (0: 5s)")
	fs.StringVar(&cfg.Transport, "transport", "", "sets GORUN_TRANSPORT: auto|verbs|tcp|shm")
	fs.StringVar(&cfg.Algo, "algo", "", "sets GORUN_ALGO, e.g. allreduce:ring,broadcast:tree")
	fs.StringVar(&cfg.Debug, "debug", "", "sets GORUN_DEBUG: warn|info|trace")
	fs.StringVar(&cfg.Fault, "fault", "", "sets GORUN_FAULT (fault injection), e.g. rank=2:kill:write:40")
	fs.StringVar(&cfg.Timeline, "timeline", os.Getenv(launcher.EnvTimeline), "record every rank's collectives and merge them into this file (Chrome trace JSON, for Perfetto; default GORUN_TIMELINE)")
	fs.BoolVar(&cfg.Report, "report", os.Getenv(launcher.EnvReport) == "1", "print each collective's calls, bytes, time and busbw, and the stragglers, at the end (GORUN_REPORT=1)")
	fs.StringVar(&cfg.Metrics, "metrics", "", "serve every rank's metrics (Prometheus text) at http://ADDR/metrics, e.g. 127.0.0.1:9400")
	fs.IntVar(&cfg.NNodes, "nnodes", 0, "start one job from a gorun on each of this many nodes, without ssh (with --node-rank, --seed)")
	fs.IntVar(&cfg.NodeRank, "node-rank", 0, "this node's index, 0..nnodes-1 (node 0 serves the seed)")
	fs.StringVar(&cfg.Seed, "seed", "", "HOST:PORT of node 0, where the nodes meet (the ranks gossip on PORT+1)")
	fs.Var(durationFlag{&cfg.SeedTimeout}, "seed-timeout", "how long the nodes wait for each other at the seed (0: 30s)")
	fs.StringVar(&slurm, "srun", "auto", "place ranks with srun: auto (inside a Slurm allocation)|yes|no")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	rest := fs.Args()
	if len(rest) == 0 {
		fs.Usage()
		return cfg, fmt.Errorf("%w: no program given", launcher.ErrUsage)
	}
	cfg.Program, cfg.Args = rest[0], rest[1:]
	cfg.Export = export
	cfg.NoTag = !tag
	cfg.UseSrun = slurm
	if agent != "" {
		cfg.LaunchAgent = strings.Fields(agent)
	}
	if hosts != "" && hostfile != "" {
		return cfg, fmt.Errorf("%w: give -H or --hostfile, not both", launcher.ErrUsage)
	}
	var err error
	switch {
	case hosts != "":
		cfg.Hosts, err = launcher.ParseHostList(hosts)
	case hostfile != "":
		var f *os.File
		if f, err = os.Open(hostfile); err == nil {
			cfg.Hosts, err = launcher.ParseHostfile(f)
			f.Close()
		}
	}
	if err != nil {
		return cfg, err
	}
	if cfg.NP == 0 {
		// As mpirun: without -np, one rank per slot.
		for _, h := range cfg.Hosts {
			cfg.NP += h.Slots
		}
		if cfg.NP == 0 {
			return cfg, fmt.Errorf("%w: -np is required without -H or --hostfile", launcher.ErrUsage)
		}
	}
	return cfg, nil
}

func isHelp(err error) bool { return errors.Is(err, errHelp) }
