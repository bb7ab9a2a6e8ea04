package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// A command line that does not parse gets one line of error, a hint when
// the flag is one of another launcher's (mpirun, MPICH's mpiexec, srun,
// torchrun) that gorun does not take, and a pointer to gorun -h: not the
// whole usage, which buried the error under 80 lines. Flags that gorun
// takes under the same name (-np, -n, -H, --host, --hostfile, -x,
// --map-by, --bind-to, --npernode, -N, -wdir, --nnodes, --node-rank,
// --max-restarts, ...) need no hint. (-N is Open MPI's: ranks per node,
// not srun's node count.)

// habits maps a flag of another launcher, without its dashes, to gorun's
// way of doing what it does, or why gorun does not.
var habits = map[string]string{
	// Open MPI's mpirun.
	"mca":                    "Open MPI's MCA parameters have no gorun equivalent: its tunables are GORUN_* variables (--transport, --algo, --debug, -x GORUN_VAR=value); plm_rsh_agent is --launch-agent",
	"gmca":                   "Open MPI's MCA parameters have no gorun equivalent: gorun's tunables are GORUN_* variables (--transport, --algo, --debug, or -x GORUN_VAR=value)",
	"c":                      "mpirun's -c is -np N; srun's -c (CPUs per task) has no equivalent: gorun gives each rank its share of the CPUs (GOMAXPROCS) and binds with --bind-to",
	"allow-run-as-root":      "gorun needs no such flag: it runs as root without it",
	"nooversubscribe":        "not needed: more ranks than slots are an error unless --oversubscribe (or a hostfile's max_slots)",
	"rank-by":                "not supported: ranks are numbered in placement order (--map-by slot|node)",
	"npersocket":             "not supported: gorun places ranks per host (--npernode N) and binds them with --bind-to core|numa",
	"display-map":            "use --report-bindings (a line per rank: where it runs and its CPUs)",
	"display-allocation":     "use --report-bindings (a line per rank: where it runs and its CPUs)",
	"prefix":                 "not needed: gorun installs nothing on remote hosts; the program must be there (an absolute path, or on PATH)",
	"enable-recovery":        "use --elastic (the job goes on when a rank dies; --max-restarts N restarts it)",
	"merge-stderr-to-stdout": "not supported: ranks' stderr lines come out of gorun's stderr, tagged",
	"use-hwthread-cpus":      "not supported: slots are what -H or --hostfile say, one per rank",
	// MPICH's mpiexec (Hydra).
	"ppn":          "use --npernode N (or -N N): at most N ranks per host",
	"f":            "use --hostfile FILE (MPICH's host:N lines are read as they are)",
	"hosts":        "use -H host1,host2 (or host1:N,host2:N)",
	"genv":         "use -x VAR=value",
	"env":          "use -x VAR=value",
	"genvlist":     "use -x VAR for each variable",
	"envlist":      "use -x VAR for each variable",
	"genvall":      "not needed: ranks on this machine inherit gorun's environment; pass others with -x VAR",
	"envall":       "not needed: ranks on this machine inherit gorun's environment; pass others with -x VAR",
	"iface":        "use -x GORUN_SOCKET_IFNAME=eth0",
	"netif":        "use -x GORUN_SOCKET_IFNAME=eth0",
	"bootstrap":    "use --launch-agent CMD (default ssh)",
	"launcher":     "use --launch-agent CMD (default ssh)",
	"l":            "not needed: every line is tagged with its rank (--tag-output, on by default)",
	"prepend-rank": "not needed: every line is tagged with its rank (--tag-output, on by default)",
	// Slurm's srun.
	"ntasks":           "use -np N",
	"ntasks-per-node":  "use --npernode N (or -N N): at most N ranks per host",
	"nodes":            "srun's node count has no gorun flag: inside a Slurm allocation gorun places ranks with srun on its nodes; elsewhere list the hosts with -H or --hostfile (gorun's -N is ranks per node, as Open MPI's)",
	"cpu-bind":         "use --bind-to core|numa|none",
	"label":            "not needed: every line is tagged with its rank (--tag-output, on by default)",
	"chdir":            "use -wdir DIR",
	"D":                "use -wdir DIR",
	"export":           "use -x VAR or -x VAR=value (ranks on this machine inherit gorun's environment)",
	"kill-on-bad-exit": "not needed: gorun stops the job when a rank fails (unless --elastic)",
	"time":             "use --timeout D (seconds, or 10m)",
	"t":                "use --timeout D (seconds, or 10m)",
	"distribution":     "use --map-by slot (block) or --map-by node (cyclic)",
	"mpi":              "not needed: gorun's ranks need no PMI",
	"partition":        "ask Slurm for the allocation (salloc or sbatch); gorun, run inside it, places its ranks there",
	"p":                "ask Slurm for the allocation (salloc or sbatch); gorun, run inside it, places its ranks there",
	"gres":             "ask Slurm for the allocation (salloc or sbatch); gorun, run inside it, places its ranks there",
	"exclusive":        "ask Slurm for the allocation (salloc or sbatch); gorun, run inside it, places its ranks there",
	// torchrun.
	"nproc-per-node": "use -np N: the ranks of this node (with --nnodes, each node's)",
	"nproc_per_node": "use -np N: the ranks of this node (with --nnodes, each node's)",
	"node_rank":      "use --node-rank R",
	"master-addr":    "use --seed HOST:PORT (node 0's address and port)",
	"master_addr":    "use --seed HOST:PORT (node 0's address and port)",
	"master-port":    "use --seed HOST:PORT (node 0's address and port)",
	"master_port":    "use --seed HOST:PORT (node 0's address and port)",
	"rdzv-endpoint":  "use --seed HOST:PORT (node 0's address and port)",
	"rdzv_endpoint":  "use --seed HOST:PORT (node 0's address and port)",
	"rdzv-backend":   "not needed: node 0's gorun is the rendezvous (--seed); GORUN_JOB_TOKEN keeps jobs apart",
	"rdzv_backend":   "not needed: node 0's gorun is the rendezvous (--seed); GORUN_JOB_TOKEN keeps jobs apart",
	"rdzv-id":        "not needed: GORUN_JOB_TOKEN (the same secret on every node) keeps jobs apart",
	"rdzv_id":        "not needed: GORUN_JOB_TOKEN (the same secret on every node) keeps jobs apart",
	"max_restarts":   "use --max-restarts N (with --elastic)",
	"standalone":     "not needed: without --nnodes gorun runs a job on this node alone",
	"log-dir":        "use --output-filename DIR (DIR/rank.N/stdout and stderr)",
	"log_dir":        "use --output-filename DIR (DIR/rank.N/stdout and stderr)",
	"tee":            "use --output-filename DIR (the console keeps the tagged lines)",
	"redirects":      "use --output-filename DIR (the console keeps the tagged lines)",
	"no-python":      "not needed: gorun runs any program; a Python script is run as python: gorun -np 2 python train.py",
	"no_python":      "not needed: gorun runs any program; a Python script is run as python: gorun -np 2 python train.py",
}

// flagError is a command line that does not parse. Its text is the error,
// the hint, and the pointer to gorun -h, a line each; main prefixes the
// first with "gorun: ", so the others carry it.
type flagError struct {
	msg  string
	hint string
	help string // the command whose -h lists the flags; "gorun" if empty
}

func (e *flagError) Error() string {
	s := e.msg
	if e.hint != "" {
		s += "\ngorun: " + e.hint
	}
	if e.help != "" {
		return s + "\ngorun: run '" + e.help + " -h' for its flags"
	}
	return s + "\ngorun: run 'gorun -h' for gorun's flags"
}

// badFlag turns the flag package's error for args into a flagError.
func badFlag(err error, args []string) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		return &flagError{msg: "unknown flag " + spelled(args, name), hint: habits[name]}
	}
	// `invalid value "1:4" for flag -nnodes: ...`: torchrun's MIN:MAX.
	if v, ok := strings.CutPrefix(msg, "invalid value \""); ok && strings.Contains(v, "\" for flag -nnodes:") {
		if v, _, _ = strings.Cut(v, "\""); strings.Contains(v, ":") {
			return &flagError{msg: msg, hint: "torchrun's --nnodes MIN:MAX is --nnodes N here; an elastic job is --elastic --min-np MIN --max-np MAX"}
		}
	}
	return &flagError{msg: msg}
}

// spelled is the flag name as args spelled it (-mca or --mca).
func spelled(args []string, name string) string {
	for _, a := range args {
		n, _, _ := strings.Cut(a, "=")
		if strings.TrimLeft(n, "-") == name && strings.HasPrefix(n, "-") {
			return n
		}
	}
	return "-" + name
}

// printUsage writes gorun's usage (gorun -h) to w.
func printUsage(fs *flag.FlagSet, w io.Writer) {
	fmt.Fprintf(w, "usage: gorun -np N [flags] PROGRAM [ARGS...]\n\n"+
		"PROGRAM is a binary or a Go package directory (built once with the go tool).\n\nFlags:\n")
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}
