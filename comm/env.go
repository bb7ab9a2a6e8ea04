package comm

// Environment variables. internal/jobenv owns their names and the parsers
// shared with the launcher and the C ABI; comm's tunables are parsed here.
//
// Job variables (set by the launcher; comm.Init reads them):
//
//	GORUN_RANK        this process's rank, 0 ≤ rank < GORUN_SIZE (required with GORUN_SIZE)
//	GORUN_SIZE        number of ranks in the job
//	GORUN_LOCAL_RANK  rank among the job's processes on this host (default: derived at Init)
//	GORUN_LOCAL_SIZE  number of the job's processes on this host (default: derived at Init)
//	GORUN_SEEDS       comma-separated host:port gossip addresses to join
//	GORUN_JOB_ID      job identifier (distinguishes concurrent jobs)
//	GORUN_JOB_TOKEN   secret shared by the job's ranks; authenticates connections
//
// When GORUN_SIZE is unset the job is taken, in this order, from
//
//	Open MPI  OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
//	          OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE
//	MPICH     PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS (Hydra)
//	Slurm     SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_JOB_NODELIST
//	          (SLURM_JOB_ID becomes the job id)
//	torchrun  RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
//	          MASTER_ADDR, MASTER_PORT (MASTER_ADDR:MASTER_PORT+1 becomes the
//	          seed unless GORUN_SEEDS is set, torch's store holding
//	          MASTER_PORT; TORCHELASTIC_RUN_ID the job id)
//
// GORUN_SEEDS, GORUN_JOB_ID and GORUN_JOB_TOKEN apply under every launcher.
//
// Tunables (read by Init and NewLocal; options given in code win):
//
//	GORUN_TRANSPORT      auto (default) | verbs | tcp | shm | mem: the provider
//	                     for every peer; auto picks shm on the same host, verbs
//	                     when both ranks have a device, tcp otherwise (mem in
//	                     NewLocal)
//	GORUN_ALGO           per-collective algorithm, e.g. "allreduce:ring,broadcast:tree";
//	                     a bare name ("ring") applies to every collective that has it
//	GORUN_TIMEOUT        per-operation timeout: a Go duration ("90s") or seconds ("90");
//	                     default 5m (jobenv.DefaultTimeout); 0 disables
//	GORUN_SOCKET_IFNAME  network interface whose address tcp advertises (default: the
//	                     first up, non-loopback interface)
//	GORUN_DEBUG          warn (default) | info | trace: log verbosity (standard log package)
//	GORUN_CHECKSUM       1: tcp verifies a CRC32C of every frame (rdma.Config.Checksum);
//	                     every rank must agree, or connecting fails clearly
//	GORUN_SPIN           how long a collective with nothing to do polls before it
//	                     sleeps: a duration ("200us", "0" sleeps at once), optionally
//	                     ",yield" or ",noyield" (give the CPU to other processes
//	                     between polls); default 1ms, yielding when the ranks on
//	                     this rank's CPUs outnumber them, and 100us if some of
//	                     those are on other hosts of this kernel (WithSpin)
//	GORUN_QUORUM         majority: a Shrink or Grow whose world keeps no majority
//	                     of the ranks of the last whole world fails with
//	                     ErrNoQuorum (half of them: the half with its rank 0
//	                     goes on); off (default): every side of a partition
//	                     goes on; every rank must set the same (WithQuorum)
//	GORUN_COST_FILE      a JSON file of the cost model's constants fitted on this
//	                     machine (collectives.TuningFile; GORUN_COST_OUT of
//	                     collectives' TestCostPoints writes one): the selection
//	                     table is derived from them instead of cost.go's; every
//	                     rank must read the same (WithTuning)
//	GORUN_PROBE_INTERVAL gossip failure detection's probe period, 50ms to 1m;
//	                     default 250ms, times the ranks per CPU / 2 (at
//	                     most 8) on a host the job's ranks oversubscribe
//	                     (relaxProbes); a silent rank on another host is
//	                     reported about 4 intervals after it stops answering
//	                     (13 unconfirmed), so a longer one spares ranks
//	                     starved of CPU by other work (WithProbeInterval)

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/gorun-hpc/gorun/collectives"
	"github.com/gorun-hpc/gorun/internal/jobenv"
)

// jobEnv is the job description found in the environment (internal/jobenv
// owns the variables and their parsers).
type jobEnv = jobenv.Job

// envError names the variable and the bad value.
type envError = jobenv.Error

func envErr(name, value, why string) *envError {
	return &envError{Var: name, Value: value, Why: why}
}

// readJobEnv parses the job variables. It returns Source "" and no error
// when no launcher variables are set.
func readJobEnv(getenv func(string) string) (jobEnv, error) { return jobenv.Read(getenv) }

// tunables are the GORUN_* settings that options can also set.
type tunables struct {
	Transport    string
	Algos        map[collectives.Collective]collectives.Algo
	Timeout      time.Duration
	HasTimeout   bool
	SocketIfname string
	Debug        int
	Checksum     bool
	Spin         time.Duration
	HasSpin      bool
	Yield        int // 0 auto, 1 yield, -1 don't
	Quorum       bool
	Tuning       *collectives.Tuning
	Probe        time.Duration // 0: the default
}

// Debug levels.
const (
	debugWarn = iota
	debugInfo
	debugTrace
)

func readTunables(getenv func(string) string) (tunables, error) {
	var t tunables
	if s := getenv(jobenv.Transport); s != "" {
		name, err := parseTransport(s)
		if err != nil {
			return t, envErr(jobenv.Transport, s, err.Error())
		}
		t.Transport = name
	}
	if s := getenv(jobenv.Algo); s != "" {
		m, err := parseAlgoSpec(s)
		if err != nil {
			return t, envErr(jobenv.Algo, s, err.Error())
		}
		t.Algos = m
	}
	if s := strings.TrimSpace(getenv(jobenv.Timeout)); s != "" {
		d, err := jobenv.ParseTimeout(s)
		if err != nil {
			return t, err
		}
		t.Timeout, t.HasTimeout = d, true
	}
	t.SocketIfname = strings.TrimSpace(getenv(jobenv.SocketIfname))
	switch s := strings.ToLower(strings.TrimSpace(getenv(jobenv.Checksum))); s {
	case "", "0", "false", "off":
	case "1", "true", "on":
		t.Checksum = true
	default:
		return t, envErr(jobenv.Checksum, s, "want 1 or 0")
	}
	switch s := strings.ToLower(strings.TrimSpace(getenv(jobenv.Quorum))); s {
	case "", "off":
	case "majority":
		t.Quorum = true
	default:
		return t, envErr(jobenv.Quorum, s, "want majority or off")
	}
	if s := strings.TrimSpace(getenv(jobenv.CostFile)); s != "" {
		tu, err := collectives.ReadTuning(s)
		if err != nil {
			return t, envErr(jobenv.CostFile, s, err.Error())
		}
		t.Tuning = tu
	}
	if s := strings.TrimSpace(getenv(jobenv.Probe)); s != "" {
		d, err := jobenv.ParseProbe(s)
		if err != nil {
			return t, err
		}
		t.Probe = d
	}
	if s := strings.ToLower(strings.TrimSpace(getenv(jobenv.Spin))); s != "" {
		d, y, err := parseSpin(s)
		if err != nil {
			return t, envErr(jobenv.Spin, s, err.Error())
		}
		t.Spin, t.HasSpin, t.Yield = d, true, y
	}
	switch s := strings.ToLower(strings.TrimSpace(getenv(jobenv.Debug))); s {
	case "", "warn":
		t.Debug = debugWarn
	case "info":
		t.Debug = debugInfo
	case "trace":
		t.Debug = debugTrace
	default:
		return t, envErr(jobenv.Debug, s, "want warn, info or trace")
	}
	return t, nil
}

// parseAlgoSpec parses "allreduce:ring,broadcast:tree" or a bare "ring".
func parseAlgoSpec(s string) (map[collectives.Collective]collectives.Algo, error) {
	m := map[collectives.Collective]collectives.Algo{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, algo, ok := strings.Cut(item, ":")
		if !ok {
			a, err := collectives.ParseAlgo(item)
			if err != nil {
				return nil, err
			}
			found := false
			for c := collectives.AllReduce; c <= collectives.AllToAll; c++ {
				if collectives.Supports(c, a) || a == collectives.Auto {
					m[c] = a
					found = true
				}
			}
			if !found {
				return nil, fmt.Errorf("no collective has algorithm %q", item)
			}
			continue
		}
		c, err := collectives.ParseCollective(name)
		if err != nil {
			return nil, err
		}
		if strings.TrimSpace(algo) == "" {
			return nil, fmt.Errorf("no algorithm after %q", name+":")
		}
		a, err := collectives.ParseAlgo(algo)
		if err != nil {
			return nil, err
		}
		if a != collectives.Auto && !collectives.Supports(c, a) {
			return nil, fmt.Errorf("%s has no algorithm %q (have %v)", c, algo, collectives.Algos(c))
		}
		m[c] = a
	}
	return m, nil
}

// osGetenv is os.Getenv; tests replace the environment with a map.
var osGetenv = os.Getenv

// parseSpin reads GORUN_SPIN: "DURATION[,yield|,noyield]" ("0" is a
// duration here).
func parseSpin(s string) (time.Duration, int, error) {
	ds, mode, _ := strings.Cut(s, ",")
	ds = strings.TrimSpace(ds)
	d, err := time.ParseDuration(ds)
	if err != nil && ds == "0" {
		d, err = 0, nil
	}
	if err != nil || d < 0 {
		return 0, 0, fmt.Errorf("want a duration such as 200us, optionally followed by ,yield or ,noyield")
	}
	switch strings.TrimSpace(mode) {
	case "":
		return d, 0, nil
	case "yield":
		return d, 1, nil
	case "noyield":
		return d, -1, nil
	}
	return 0, 0, fmt.Errorf("after the duration, want yield or noyield")
}

// Observability (observe.go): off unless set.
//
//	GORUN_TIMELINE      FILE: each rank records its operations to FILE.RANK (FILE.RANK.restartN in its N-th restart;
//	                    .initN after it for the N-th later first communicator of a process, an Init after Close)
//	                    (gorun --timeline merges them); an unwritable path fails Init
//	GORUN_METRICS_ADDR  host:port: each rank serves Prometheus text at /metrics
//	                    (port + local rank when several ranks share a host)
type obsEnv struct {
	Timeline    string
	MetricsAddr string
}

func readObsEnv(getenv func(string) string) obsEnv {
	return obsEnv{Timeline: strings.TrimSpace(getenv(jobenv.Timeline)), MetricsAddr: strings.TrimSpace(getenv(jobenv.MetricsAddr))}
}
