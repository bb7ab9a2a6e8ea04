package jobenv

// The environment contract (DESIGN.md). Variables the launcher sets for
// every rank; Init reads them.
const (
	Rank      = "GORUN_RANK"       // this process's rank, 0 ≤ rank < size
	Size      = "GORUN_SIZE"       // number of ranks in the job
	LocalRank = "GORUN_LOCAL_RANK" // rank among the job's processes on this host
	LocalSize = "GORUN_LOCAL_SIZE" // number of the job's processes on this host
	Seeds     = "GORUN_SEEDS"      // comma-separated host:port gossip addresses
	JobID     = "GORUN_JOB_ID"     // distinguishes concurrent jobs
	JobToken  = "GORUN_JOB_TOKEN"  // secret shared by the job's ranks
	Control   = "GORUN_CONTROL"    // the launcher's job-control address (internal/jobctl)
	Bind      = "GORUN_BIND"       // core|numa|none, applied by comm.Init
	Elastic   = "GORUN_ELASTIC"    // "1": the job goes on after a rank dies
	MaxNP     = "GORUN_MAX_NP"     // --max-np: Grow admits ranks up to this many; a rank launched later has size ≤ rank < max
	// Procs is the GOMAXPROCS the launcher chose (its count of the host's
	// ranks), set beside GOMAXPROCS: Init may lower it where more ranks
	// share the rank's CPUs (comm/procs.go). Not set where the user set
	// GOMAXPROCS.
	Procs = "GORUN_GOMAXPROCS"
)

// Tunables: read by every rank, passed on by the launcher from its own
// environment (as Open MPI passes OMPI_MCA_*).
const (
	Timeout      = "GORUN_TIMEOUT"        // per-operation timeout (ParseTimeout)
	Transport    = "GORUN_TRANSPORT"      // auto|verbs|tcp|shm|mem
	Algo         = "GORUN_ALGO"           // e.g. allreduce:ring,broadcast:tree
	Debug        = "GORUN_DEBUG"          // warn|info|trace
	SocketIfname = "GORUN_SOCKET_IFNAME"  // interface whose address tcp advertises
	Fault        = "GORUN_FAULT"          // fault-injection rules (comm/fault.go)
	Checksum     = "GORUN_CHECKSUM"       // 1: CRC32C of every tcp frame
	ShmCMA       = "GORUN_SHM_CMA"        // 0: shm does not use process_vm_writev
	ShmFence     = "GORUN_SHM_MEMBARRIER" // 0: shm's doorbells use locked exchanges, not membarrier
	ShmMailbox   = "GORUN_SHM_MAILBOX"    // 0: shm connections offer no mailboxes (small messages go through the ring)
	Spin         = "GORUN_SPIN"           // how long a waiting collective polls
	Quorum       = "GORUN_QUORUM"         // majority: Shrink and Grow go on only with most of the last world (comm/quorum.go)
	CostFile     = "GORUN_COST_FILE"      // the cost model's constants fitted on this machine (collectives.TuningFile)
	Probe        = "GORUN_PROBE_INTERVAL" // gossip failure detection's probe period (ParseProbe)
)

// Observability: set by gorun's --timeline, --report and --metrics, or by
// hand for ranks another launcher started.
const (
	Timeline    = "GORUN_TIMELINE"     // ranks record their timeline to FILE.RANK
	Report      = "GORUN_REPORT"       // "1": the launcher prints the job report
	MetricsAddr = "GORUN_METRICS_ADDR" // ranks serve Prometheus text on ADDR (port 0: any)
)

// Restarts (gorun --max-restarts).
const (
	Restart     = "GORUN_RESTART"      // n: this process is the n-th restart of its rank
	MaxRestarts = "GORUN_MAX_RESTARTS" // --max-restarts, for every rank
)

// Providers and the Python package.
const (
	VerbsDevice = "GORUN_VERBS_DEVICE" // the RDMA device verbs opens (e.g. mlx5_0)
	BuildDir    = "GORUN_BUILD_DIR"    // python/gorun: where libgorun.so and the torch extension are built
	Lib         = "GORUN_LIB"          // python/gorun: a libgorun.so to load instead of building one
)

// ContractVars are set by the launcher and never inherited from its own
// environment (a gorun started inside a rank must not leak its rank).
var ContractVars = []string{Rank, Size, LocalRank, LocalSize, Seeds, JobID, JobToken, Control, Bind, Elastic, MaxNP, Procs}

// TunableVars pass from the launcher's environment to every rank.
var TunableVars = []string{Timeout, Transport, Algo, Debug, SocketIfname, Fault, Checksum, ShmCMA, ShmFence, ShmMailbox, Spin, Quorum, CostFile, Probe}

// IsContractVar reports whether name is one of ContractVars.
func IsContractVar(name string) bool {
	for _, c := range ContractVars {
		if name == c {
			return true
		}
	}
	return false
}
