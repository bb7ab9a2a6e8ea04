package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/gorun-hpc/gorun/comm"
	"github.com/gorun-hpc/gorun/internal/jobenv"
	"github.com/gorun-hpc/gorun/launcher"
	"github.com/gorun-hpc/gorun/transport/rdma/faulty"
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
func parseArgs(args []string, stdout, stderr io.Writer) (launcher.Config, error) {
	// MPMD: gorun [flags] -np 1 ./a ARGS : -np 3 ./b ARGS
	segs := [][]string{nil}
	for _, a := range args {
		if a == ":" {
			segs = append(segs, nil)
			continue
		}
		segs[len(segs)-1] = append(segs[len(segs)-1], a)
	}
	cfg, err := parseFirst(segs[0], stdout, stderr)
	if err != nil {
		return cfg, err
	}
	if len(segs) == 1 {
		return cfg, checkTunables(cfg)
	}
	if cfg.NP < 1 {
		return cfg, fmt.Errorf("%w: an MPMD job needs -np N before each program", launcher.ErrUsage)
	}
	cfg.Apps = []launcher.App{{NP: cfg.NP, Program: cfg.Program, Args: cfg.Args}}
	for _, seg := range segs[1:] {
		fs := flag.NewFlagSet("gorun", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		fs.Usage = func() {}
		var np int
		fs.IntVar(&np, "np", 0, "number of ranks of this program")
		fs.IntVar(&np, "n", 0, "same as -np")
		if err := fs.Parse(seg); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return cfg, fmt.Errorf("%w: after ':', want -np N PROGRAM [ARGS...]", launcher.ErrUsage)
			}
			return cfg, badFlag(err, seg)
		}
		if np < 1 || fs.NArg() == 0 {
			return cfg, fmt.Errorf("%w: after ':', want -np N PROGRAM [ARGS...], got %q", launcher.ErrUsage, seg)
		}
		cfg.Apps = append(cfg.Apps, launcher.App{NP: np, Program: fs.Arg(0), Args: fs.Args()[1:]})
		cfg.NP += np
	}
	return cfg, checkTunables(cfg) // with the ranks of every program
}

// parseFirst parses the command line up to the first ':'.
func parseFirst(args []string, stdout, stderr io.Writer) (launcher.Config, error) {
	var (
		cfg      launcher.Config
		hosts    string
		hostfile string
		agent    string
		tag      = true
		export   listFlag
		slurm    = "auto"

		showVersion bool
		npernode    int
	)
	// The flag package prints nothing: gorun -h prints the usage, and an
	// error is one line and a hint (habits.go).
	fs := flag.NewFlagSet("gorun", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.IntVar(&cfg.NP, "np", 0, "number of ranks")
	fs.IntVar(&cfg.NP, "n", 0, "same as -np")
	fs.StringVar(&hosts, "H", "", "hosts and slots: host1:2,host2:2")
	fs.StringVar(&hosts, "host", "", "same as -H")
	fs.StringVar(&hostfile, "hostfile", "", "hostfile: Open MPI's \"host slots=N max_slots=M\" or MPICH's \"host:N\" lines")
	fs.StringVar(&hostfile, "machinefile", "", "same as --hostfile")
	fs.StringVar(&agent, "launch-agent", "", "command that runs argv on a host, host appended (default ssh)")
	fs.Var(&export, "x", "pass VAR (gorun's value) or VAR=value to the ranks; repeatable")
	fs.BoolVar(&tag, "tag-output", true, "prefix each output line with [rank]")
	fs.Var(durationFlag{&cfg.Timeout}, "timeout", "stop the job after this long (seconds or 10m)")
	fs.StringVar(&cfg.Bind, "bind-to", "none", "bind each rank to a core, a NUMA node or nothing: core|numa|none")
	fs.IntVar(&cfg.GossipPort, "gossip-port", 0, "rank 0's gossip seed port (0: pick one)")
	fs.BoolVar(&cfg.Elastic, "elastic", false, "keep the job going when a rank dies (sets GORUN_ELASTIC=1; exit status is still the dead rank's)")
	fs.IntVar(&cfg.MaxRestarts, "max-restarts", 0, "with --elastic: restart a failed rank up to N times; it rejoins through comm.Init and Comm.Grow")
	fs.IntVar(&cfg.MinNP, "min-np", 0, "with --elastic: stop the job when a rank fails for good and fewer than N ranks remain (torchrun's --nnodes=MIN:MAX)")
	fs.IntVar(&cfg.MaxNP, "max-np", 0, "with --elastic: the job may grow to N ranks (GORUN_MAX_NP): a rank launched later with the job's environment and GORUN_RANK in [np, N) joins through Comm.Grow; gorun --add-ranks K --job ID starts K of them")
	fs.Var(durationFlag{&cfg.StallTimeout}, "stall-timeout", "report ranks stuck in a collective after this long; 0: 30s, <0: off")
	fs.Var(durationFlag{&cfg.KillGrace}, "kill-grace", "time between SIGTERM and SIGKILL when stopping ranks (0: 5s)")
	fs.StringVar(&cfg.Transport, "transport", "", "sets GORUN_TRANSPORT: auto or a provider (verbs|tcp|shm); checked before any rank starts")
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
	fs.BoolVar(&showVersion, "version", false, "print gorun's version and exit")
	fs.StringVar(&cfg.MapBy, "map-by", "", "place ranks: slot (default: fill each host first) or node (round-robin over hosts)")
	fs.BoolVar(&cfg.Oversubscribe, "oversubscribe", false, "allow more ranks than the slots of -H or --hostfile (the extra ranks are dealt over the hosts in turn)")
	fs.IntVar(&npernode, "npernode", 0, "at most N ranks per host (caps every host's slots)")
	fs.IntVar(&npernode, "N", 0, "same as --npernode, as Open MPI's -N (not srun's -N, a node count)")
	fs.BoolVar(&cfg.ReportBindings, "report-bindings", false, "print the CPUs each local rank is bound to")
	fs.StringVar(&cfg.WorkDir, "wdir", "", "every rank's working directory (default: gorun's)")
	fs.StringVar(&cfg.OutputDir, "output-filename", "", "also write each rank's output to DIR/rank.N/stdout and stderr")
	if err := fs.Parse(boolValues(fs, args)); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(fs, stderr)
			return cfg, err
		}
		return cfg, badFlag(err, args)
	}
	if showVersion {
		fmt.Fprintln(stdout, version())
		return cfg, errVersion
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return cfg, &flagError{msg: "no program given: gorun -np N [flags] PROGRAM [ARGS...]"}
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
	// Without hosts, the launcher applies -N: to this machine, or to srun
	// (--ntasks-per-node) inside a Slurm allocation.
	cfg.NPerNode = npernode
	if len(cfg.Hosts) > 0 {
		cfg.Hosts = launcher.CapSlots(cfg.Hosts, npernode)
	}
	npGiven := false
	fs.Visit(func(f *flag.Flag) { npGiven = npGiven || f.Name == "np" || f.Name == "n" })
	if npGiven && cfg.NP < 1 {
		return cfg, fmt.Errorf("%w: -np %d: want at least 1", launcher.ErrUsage, cfg.NP)
	}
	// As mpirun: without -np, one rank per slot. Without hosts, the
	// launcher decides: --npernode, or a Slurm allocation's tasks.
	for _, h := range cfg.Hosts {
		if !npGiven {
			cfg.NP += h.Slots
		}
	}
	return cfg, nil
}

// checkTunables checks the tunables as every rank will get them (--fault
// and the other flags, -x, gorun's environment: launcher.RankTunables) and
// its Init read them, once, before any rank starts: a bad value would
// otherwise fail every rank's Init, and --max-restarts restart them all.
// GORUN_FAULT's rules must also name ranks the job has, or they would never
// fire; the ranks of a job under --nnodes are counted on each node, and
// are not checked.
func checkTunables(cfg launcher.Config) error {
	tun, err := launcher.RankTunables(cfg)
	if err != nil {
		return err
	}
	if err := comm.CheckEnv(func(k string) string { return tun[k] }, max(cfg.NP, 2)); err != nil {
		return fmt.Errorf("%w: %s", launcher.ErrUsage, strings.TrimPrefix(err.Error(), "gorun: "))
	}
	spec := tun[jobenv.Fault]
	if spec == "" {
		return nil
	}
	// Without -np the Slurm allocation sets the ranks, later: only the
	// syntax is checked here.
	ranks, err := faulty.Ranks(spec)
	if err != nil {
		return fmt.Errorf("%w: %s=%q: %s", launcher.ErrUsage, jobenv.Fault, spec, strings.TrimPrefix(err.Error(), "faulty: "))
	}
	size := cfg.NP
	if cfg.Elastic {
		size = max(size, cfg.MaxNP)
	}
	for _, r := range ranks {
		if r >= size && cfg.NNodes == 0 && cfg.NP > 0 {
			return fmt.Errorf("%w: %s=%q: rank %d is not a rank of this job (0 to %d)", launcher.ErrUsage, jobenv.Fault, spec, r, size-1)
		}
	}
	return nil
}

func isHelp(err error) bool { return errors.Is(err, errHelp) || errors.Is(err, errVersion) }

// errVersion is returned for --version: the version was printed, exit 0.
var errVersion = errors.New("version printed")

// version is "gorun VERSION (REVISION)" from the build information: the
// module version for go install ...@v1.2.3, the VCS revision for a build
// in a checkout.
func version() string {
	v, rev := "(devel)", ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				rev = s.Value[:12]
			}
			if s.Key == "vcs.modified" && s.Value == "true" {
				rev += "+dirty"
			}
		}
	}
	if rev != "" {
		return fmt.Sprintf("gorun %s (%s, %s)", v, rev, runtime.Version())
	}
	return fmt.Sprintf("gorun %s (%s)", v, runtime.Version())
}

// boolValues rewrites "--flag true|false" as "--flag=true|false" for
// gorun's boolean flags, so that "--tag-output false" turns tagging off
// instead of running /bin/false (a program named true or false is given
// as a path: ./false). Parsing stops at the first non-flag word, as
// flag.Parse does.
func boolValues(fs *flag.FlagSet, args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		out = append(out, a)
		if a == "--" || !strings.HasPrefix(a, "-") || a == "-" {
			return append(out, args[i+1:]...)
		}
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		f := fs.Lookup(name)
		if f == nil {
			continue
		}
		if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && bf.IsBoolFlag() {
			if i+1 < len(args) {
				if _, err := strconv.ParseBool(args[i+1]); err == nil {
					out[len(out)-1] = a + "=" + args[i+1]
					i++
				}
			}
			continue
		}
		if i+1 < len(args) { // the flag's value
			i++
			out = append(out, args[i])
		}
	}
	return out
}
