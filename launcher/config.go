package launcher

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// Config describes one job. The zero value of a field means its default.
type Config struct {
	NP      int      // number of ranks (-np); 0 without Hosts: the Slurm allocation's tasks
	Hosts   []Host   // -H / --hostfile; nil runs every rank on this machine
	Program string   // binary, or Go package directory to build first
	Args    []string // the program's arguments

	Export []string // -x: "VAR" (the launcher's value) or "VAR=value"

	// Tunables passed to ranks as GORUN_TRANSPORT, GORUN_ALGO, GORUN_DEBUG.
	Transport, Algo, Debug string

	// Fault sets GORUN_FAULT for every rank (--fault): fault injection
	// rules "[rank=R:]ACTION[:OP[:N[:WHERE[:DELAY]]]]" (comm/fault.go).
	Fault string

	// Timeline, when set, has every rank record a timeline (FILE.RANK)
	// that gorun merges into this file, Chrome Trace Event Format, at
	// the end (--timeline).
	Timeline string
	// Report prints a summary of the job's collectives and its stragglers
	// at the end (--report, GORUN_REPORT=1).
	Report bool
	// Metrics, when set, is the address where gorun serves every rank's
	// metrics in Prometheus text, labelled by rank (--metrics); the ranks
	// serve theirs on a free port.
	Metrics string

	// NoTag turns off the "[rank] " prefix of output lines (--tag-output=false).
	NoTag bool

	// Timeout bounds the whole job; 0 means none.
	Timeout time.Duration

	// Bind is the binding policy ranks apply: "core", "numa" or "none" (default).
	Bind string

	// GossipPort is rank 0's seed port; 0 picks a free port when rank 0
	// runs here and a random one in [20000, 32000) otherwise.
	GossipPort int

	// NNodes, NodeRank and Seed start one job from a gorun on each of
	// NNodes nodes, without ssh (--nnodes, --node-rank, --seed HOST:PORT,
	// as torchrun's): this node runs ranks NodeRank·NP … NodeRank·NP+NP-1
	// of NNodes·NP; node 0 serves the seed (nnodes.go). SeedTimeout bounds
	// the wait for the other nodes; 0 means DefaultSeedTimeout.
	NNodes, NodeRank int
	Seed             string
	SeedTimeout      time.Duration

	// LaunchAgent starts ranks on other hosts (argv, host appended); nil
	// means ssh. Setting it also turns off srun inside Slurm allocations.
	LaunchAgent []string

	// UseSrun selects srun: "auto" (default: inside a Slurm allocation,
	// when srun is on PATH, no host list and no agent), "yes" or "no".
	UseSrun string

	// Elastic keeps the job going when a rank dies (and sets
	// GORUN_ELASTIC=1, which tells the ranks to Shrink and go on). Even
	// when the survivors complete, gorun exits with the first failed
	// rank's status (137 for a SIGKILL), as mpirun does: a lost rank is
	// never reported as success; the survivors' own exit statuses are in
	// the output.
	Elastic bool

	// MaxRestarts (with Elastic) restarts a rank that fails, up to this
	// many times per rank, as torchrun's --max_restarts: the new process
	// has the same rank and environment (GORUN_RESTART=n, no GORUN_FAULT)
	// and joins the running job through comm.Init; the survivors admit it
	// with Comm.Grow. A failure that was restarted does not count against
	// the exit status.
	MaxRestarts int

	// MaxNP (with Elastic) lets the job grow beyond NP: every rank gets
	// GORUN_MAX_NP, and a rank launched later for the job, with its
	// environment and NP ≤ GORUN_RANK < MaxNP, joins through comm.Init and
	// Comm.Grow. 0: no growth beyond NP.
	MaxNP int

	// MinNP (with Elastic) is the fewest ranks the job runs on, as
	// torchrun's --nnodes=MIN:MAX: when a rank fails for good (no restart
	// left) and fewer than MinNP remain, gorun stops the job. 0: no floor.
	MinNP int

	// StallTimeout is how long no rank may make progress in a collective
	// before gorun reports the stall; 0 means 30s, negative turns it off.
	StallTimeout time.Duration

	// StatusDelay is how long gorun stays quiet before showing the start-up
	// status line; 0 means 2s.
	StatusDelay time.Duration

	// KillGrace is the time between SIGTERM and SIGKILL when gorun stops
	// ranks; 0 means 5s.
	KillGrace time.Duration

	// Signals delivers signals to forward to every rank. SIGINT, SIGTERM
	// and SIGQUIT stop the job (a second one kills the ranks at once), and
	// so does SIGHUP, as SIGTERM to the ranks; SIGUSR1 and SIGUSR2 are
	// passed on and the job goes on.
	Signals <-chan os.Signal

	// Apps, when set, makes the job MPMD (gorun -np 1 ./a : -np 3 ./b):
	// app i runs the next Apps[i].NP ranks, and NP is their sum; Program
	// and Args are then ignored.
	Apps []App

	// NPerNode caps the ranks per host (--npernode, -N), Hosts' Slots and
	// MaxSlots alike, whatever Oversubscribe says; without Hosts it
	// gives this machine NPerNode slots, or under srun becomes
	// --ntasks-per-node. With NP 0 and no Hosts it sets NP: NPerNode on
	// this machine, NPerNode times the allocation's nodes under srun.
	// With Hosts, NP must be given (gorun without -np gives it one rank
	// per slot, as mpirun does).
	NPerNode int

	// MapBy is the placement policy (--map-by): "slot" (default) fills a
	// host before the next, "node" deals ranks round-robin over hosts.
	MapBy string
	// Oversubscribe lets NP exceed the slots of Hosts (--oversubscribe, as
	// mpirun's): the ranks beyond them are dealt over the hosts in turn,
	// one more slot for each per round. NPerNode still caps every host.
	Oversubscribe bool
	// ReportBindings prints the CPUs each local rank is bound to.
	ReportBindings bool

	// WorkDir is every rank's working directory (-wdir); "" is gorun's,
	// and a relative one is under gorun's.
	WorkDir string
	// OutputDir, if set, also writes each rank's output to
	// OutputDir/rank.N/stdout and stderr, untagged (--output-filename).
	OutputDir string

	Stdin          io.Reader // rank 0's stdin; nil means none
	Stdout, Stderr io.Writer // nil means os.Stdout, os.Stderr
	// Terminal says stderr is a terminal (status line redrawn in place);
	// cmd/gorun detects it.
	Terminal bool
}

const (
	defaultStallTimeout = 30 * time.Second
	defaultStatusDelay  = 2 * time.Second
	defaultKillGrace    = 5 * time.Second
)

// withDefaults checks c and fills in defaults.
func (c Config) withDefaults() (Config, error) {
	// NP 0 without hosts is decided later: --npernode, or the Slurm
	// allocation (defaultNP).
	if c.NP < 0 || c.NP == 0 && (len(c.Hosts) > 0 || c.NNodes > 0 || len(c.Apps) > 0) {
		return c, fmt.Errorf("%w: -np must be at least 1", ErrUsage)
	}
	if c.Program == "" {
		return c, fmt.Errorf("%w: no program to run", ErrUsage)
	}
	if err := checkHosts(c.Hosts); err != nil {
		return c, err
	}
	switch c.Bind {
	case "":
		c.Bind = "none"
	case "core", "numa", "none":
	default:
		return c, fmt.Errorf("%w: --bind-to %q: want core, numa or none", ErrUsage, c.Bind)
	}
	switch c.UseSrun {
	case "":
		c.UseSrun = "auto"
	case "auto", "yes", "no":
	default:
		return c, fmt.Errorf("%w: srun mode %q: want auto, yes or no", ErrUsage, c.UseSrun)
	}
	if c.GossipPort < 0 || c.GossipPort > 65535 {
		return c, fmt.Errorf("%w: --gossip-port %d out of range", ErrUsage, c.GossipPort)
	}
	if c.NNodes < 0 || c.NNodes == 0 && (c.Seed != "" || c.NodeRank != 0) {
		return c, fmt.Errorf("%w: --seed and --node-rank need --nnodes", ErrUsage)
	}
	if c.WorkDir != "" && !filepath.IsAbs(c.WorkDir) {
		// As mpirun: under gorun's directory, for every rank; a remote
		// rank's command starts in the home directory there.
		abs, err := filepath.Abs(c.WorkDir)
		if err != nil {
			return c, fmt.Errorf("%w: -wdir %s: %v", ErrLaunch, c.WorkDir, err)
		}
		c.WorkDir = abs
	}
	if c.Timeout < 0 || c.KillGrace < 0 || c.SeedTimeout < 0 {
		// A typo, not "none" or the default, which 0 is.
		return c, fmt.Errorf("%w: --timeout, --kill-grace and --seed-timeout take a duration of 0 or more", ErrUsage)
	}
	if c.MaxRestarts < 0 || c.MinNP < 0 || c.MaxNP < 0 {
		return c, fmt.Errorf("%w: --max-restarts, --min-np and --max-np take a count", ErrUsage)
	}
	if !c.Elastic && (c.MaxRestarts > 0 || c.MinNP > 0 || c.MaxNP > 0) {
		// Without it a failed rank stops the job: nothing would restart,
		// shrink or grow, and the flag would do nothing unsaid.
		return c, fmt.Errorf("%w: --max-restarts, --min-np and --max-np need --elastic", ErrUsage)
	}
	if c.LaunchAgent != nil && len(c.LaunchAgent) == 0 {
		return c, fmt.Errorf("%w: empty --launch-agent", ErrUsage)
	}
	if c.StallTimeout == 0 {
		c.StallTimeout = defaultStallTimeout
	}
	if c.StatusDelay == 0 {
		c.StatusDelay = defaultStatusDelay
	}
	if c.KillGrace <= 0 {
		c.KillGrace = defaultKillGrace
	}
	if c.Stdout == nil {
		c.Stdout = os.Stdout
	}
	if c.Stderr == nil {
		c.Stderr = os.Stderr
	}
	return c, nil
}

// App is one program of an MPMD job and its number of ranks.
type App struct {
	NP      int
	Program string
	Args    []string
}
