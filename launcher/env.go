package launcher

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/gorun-hpc/gorun/internal/jobenv"
)

// The environment contract (DESIGN.md); internal/jobenv owns the names.
const (
	EnvRank      = jobenv.Rank
	EnvSize      = jobenv.Size
	EnvLocalRank = jobenv.LocalRank
	EnvLocalSize = jobenv.LocalSize
	EnvSeeds     = jobenv.Seeds
	EnvJobID     = jobenv.JobID
	EnvJobToken  = jobenv.JobToken
	EnvControl   = jobenv.Control
	EnvBind      = jobenv.Bind
	EnvElastic   = jobenv.Elastic
	EnvTimeout   = jobenv.Timeout
	EnvTransport = jobenv.Transport
	EnvAlgo      = jobenv.Algo
	EnvDebug     = jobenv.Debug
	EnvIfname    = jobenv.SocketIfname
	EnvFault     = jobenv.Fault
	EnvChecksum  = jobenv.Checksum
	EnvShmCMA    = jobenv.ShmCMA
	EnvSpin      = jobenv.Spin
)

// Observability (observe.go).
const (
	EnvTimeline    = jobenv.Timeline    // ranks record to FILE.RANK; --timeline
	EnvReport      = jobenv.Report      // "1": gorun prints the job report; --report
	EnvMetricsAddr = jobenv.MetricsAddr // ranks serve Prometheus text; --metrics
)

// jobEnv is what all ranks of a job share.
type jobEnv struct {
	size     int
	seeds    string
	jobID    string
	token    string
	control  string
	bind     string
	elastic  bool
	restarts int      // --max-restarts
	maxNP    int      // --max-np
	extra    []string // -x and tunables, "K=V"
}

// remoteVars is rankVars without the token, which remote ranks read from
// stdin (see remoteArgv).
func (j *jobEnv) remoteVars(s Slot) []string {
	var out []string
	for _, kv := range j.rankVars(s) {
		if !strings.HasPrefix(kv, EnvJobToken+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// rankVars is the contract for one rank, "K=V" each.
func (j *jobEnv) rankVars(s Slot) []string {
	v := []string{
		EnvRank + "=" + strconv.Itoa(s.Rank),
		EnvSize + "=" + strconv.Itoa(j.size),
		EnvLocalRank + "=" + strconv.Itoa(s.LocalRank),
		EnvLocalSize + "=" + strconv.Itoa(s.LocalSize),
	}
	return append(v, j.sharedVars()...)
}

// sharedVars is the part of the contract that is the same for every rank
// (all of it under srun, where ranks learn their rank from SLURM_PROCID).
func (j *jobEnv) sharedVars() []string {
	v := []string{
		EnvSeeds + "=" + j.seeds,
		EnvJobID + "=" + j.jobID,
		EnvJobToken + "=" + j.token,
		EnvBind + "=" + j.bind,
	}
	if j.control != "" {
		v = append(v, EnvControl+"="+j.control)
	}
	if j.elastic {
		v = append(v, EnvElastic+"=1")
	}
	if j.restarts > 0 {
		v = append(v, EnvMaxRestarts+"="+strconv.Itoa(j.restarts))
	}
	if j.maxNP > j.size {
		v = append(v, jobenv.MaxNP+"="+strconv.Itoa(j.maxNP))
	}
	return append(v, j.extra...)
}

// settingsOf is the tunables cfg's flags set (--transport, --algo,
// --debug, --fault), for exportVars.
func settingsOf(cfg Config) map[string]string {
	return map[string]string{EnvTransport: cfg.Transport, EnvAlgo: cfg.Algo, EnvDebug: cfg.Debug, EnvFault: cfg.Fault}
}

// RankTunables returns the tunables (jobenv.TunableVars) that every rank
// of the job cfg describes will find in its environment, as exportVars
// gives them: gorun's own environment, then the flags, then -x, the later
// winning. gorun checks them (comm.CheckEnv, --fault's rules) before any
// rank starts.
func RankTunables(cfg Config) (map[string]string, error) {
	var x []string // -x of tunables only: the others are no business of the check
	for _, kv := range cfg.Export {
		if name, _, _ := strings.Cut(kv, "="); slices.Contains(jobenv.TunableVars, name) {
			x = append(x, kv)
		}
	}
	vars, err := exportVars(x, settingsOf(cfg))
	if err != nil {
		return nil, err
	}
	t := map[string]string{}
	for _, kv := range vars {
		name, val, _ := strings.Cut(kv, "=")
		t[name] = val
	}
	return t, nil
}

// exportVars resolves -x arguments ("VAR" takes the launcher's value) and
// adds the tunables set in the launcher's environment. Later entries win.
func exportVars(x []string, settings map[string]string) ([]string, error) {
	var out []string
	for _, name := range jobenv.TunableVars {
		if val, ok := os.LookupEnv(name); ok {
			out = append(out, name+"="+val)
		}
	}
	for _, name := range []string{EnvTransport, EnvAlgo, EnvDebug, EnvFault} {
		if val := settings[name]; val != "" {
			out = append(out, name+"="+val)
		}
	}
	for _, kv := range x {
		name, val, hasVal := strings.Cut(kv, "=")
		if !validEnvName(name) {
			return nil, fmt.Errorf("%w: -x %q: not a valid variable name", ErrUsage, name)
		}
		if isContractVar(name) {
			return nil, fmt.Errorf("%w: -x %s: set by gorun itself", ErrUsage, name)
		}
		if !hasVal {
			var ok bool
			if val, ok = os.LookupEnv(name); !ok {
				return nil, fmt.Errorf("%w: -x %s: not set in gorun's environment", ErrUsage, name)
			}
		}
		if strings.ContainsRune(val, 0) {
			return nil, fmt.Errorf("%w: -x %s: value contains a NUL byte", ErrUsage, name)
		}
		out = append(out, name+"="+val)
	}
	return out, nil
}

// localEnv is the full environment of a rank started on this machine: the
// launcher's own, minus the contract, plus vars. Unless GOMAXPROCS is set
// (in gorun's environment or with -x), a rank gets its share of this
// machine's CPUs, as one MPI rank per core: with Go's default every rank
// runs a thread per CPU, and on a full host the ranks' threads preempt each
// other (8-byte allreduce, 2 ranks on 2 cores: ~90 µs with the default,
// ~27 µs with one thread each, measured with examples/allreduce_perf).
func localEnv(vars []string) []string { return rankEnv(vars, true) }

// rankEnv is localEnv, with this machine's CPUs shared out (shareCPUs) or
// not: srun's tasks run on other nodes, where comm.Init shares out theirs.
func rankEnv(vars []string, shareCPUs bool) []string {
	env := make([]string, 0, len(os.Environ())+len(vars)+1)
	procsSet := false
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !isContractVar(name) {
			env = append(env, kv)
		}
		procsSet = procsSet || name == "GOMAXPROCS"
	}
	local := 1
	for _, kv := range vars {
		name, val, _ := strings.Cut(kv, "=")
		procsSet = procsSet || name == "GOMAXPROCS"
		if name == EnvLocalSize {
			if n, err := strconv.Atoi(val); err == nil && n > 0 {
				local = n
			}
		}
	}
	if !procsSet && shareCPUs {
		n := strconv.Itoa(max(1, runtime.NumCPU()/local))
		env = append(env, "GOMAXPROCS="+n, jobenv.Procs+"="+n)
	}
	return append(env, vars...)
}

func isContractVar(name string) bool { return jobenv.IsContractVar(name) }

func validEnvName(name string) bool {
	if name == "" {
		return false
	}
	for i, r := range name {
		ok := r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9'
		if !ok {
			return false
		}
	}
	return true
}
