package jobenv

import (
	"fmt"
	"strconv"
)

// Launchers, in the order Read looks for them. Job.Launcher is one of
// these, or "" outside a job.
const (
	LauncherGorun    = "gorun"
	LauncherOpenMPI  = "openmpi"
	LauncherHydra    = "mpich" // MPICH's mpiexec.hydra (and Intel MPI's)
	LauncherSlurm    = "slurm"
	LauncherTorchrun = "torchrun"
)

// launcher names one launcher's variables. size is what marks a process
// it started; so does rank where lone is set (Slurm's and torchrun's rank
// names also appear outside their jobs, in salloc shells and scripts).
type launcher struct {
	name, rank, size, lrank, lsize string
	lone                           bool
}

// launchers is the detection order: gorun's own variables win; Open MPI
// and Hydra come before Slurm because mpirun inside an allocation starts
// its processes with the allocation's SLURM_* variables still set.
var launchers = []launcher{
	{LauncherGorun, Rank, Size, LocalRank, LocalSize, true},
	{LauncherOpenMPI, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", true},
	{LauncherHydra, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", true},
	{LauncherSlurm, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "", false},
	{LauncherTorchrun, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", false},
}

// Job is the job description found in the environment.
type Job struct {
	Source    string // the launcher (Launcher* constants); "" if none
	Rank      int
	Size      int
	LocalRank int // -1 if unknown
	LocalSize int // -1 if unknown
	Seeds     []string
	JobID     string
	Token     string
	NodeList  string // Slurm's node list, unexpanded
	MaxNP     int    // GORUN_MAX_NP: the most ranks Grow admits; 0: Size
}

// Launched reports whether some launcher started this process: any
// launcher's size or rank variable is set. Such a process must join its
// job (or fail), never run alone.
func Launched(getenv func(string) string) bool {
	for _, l := range launchers {
		if getenv(l.size) != "" || l.lone && getenv(l.rank) != "" {
			return true
		}
	}
	return false
}

// SizeVar and RankVar name the variables the launcher src sets.
func SizeVar(src string) string { return find(src).size }

// RankVar: see SizeVar.
func RankVar(src string) string { return find(src).rank }

func find(src string) launcher {
	for _, l := range launchers {
		if l.name == src {
			return l
		}
	}
	return launcher{}
}

// Read parses the job variables. It returns Source "" and no error when
// no launcher variables are set.
func Read(getenv func(string) string) (Job, error) {
	j := Job{Rank: -1, Size: -1, LocalRank: -1, LocalSize: -1}
	var err error
	for _, v := range launchers {
		if getenv(v.size) == "" {
			if v.lone && getenv(v.rank) != "" {
				return j, &Error{v.size, "", "unset while " + v.rank + " is set (" + v.name + ")"}
			}
			continue
		}
		j.Source = v.name
		if j.Size, err = Int(getenv, v.size, 1); err != nil {
			return j, err
		}
		if getenv(v.rank) == "" {
			return j, &Error{v.rank, "", "unset while " + v.size + " is set"}
		}
		if j.Rank, err = Int(getenv, v.rank, 0); err != nil {
			return j, err
		}
		if s := getenv(MaxNP); s != "" && v.rank == Rank {
			if j.MaxNP, err = Int(getenv, MaxNP, j.Size); err != nil {
				return j, err
			}
		}
		if j.Rank >= max(j.Size, j.MaxNP) { // a rank launched to grow the job: size ≤ rank < max-np
			return j, &Error{v.rank, getenv(v.rank), fmt.Sprintf("not below %s=%d", v.size, j.Size)}
		}
		if v.lsize != "" && getenv(v.lsize) != "" {
			if j.LocalSize, err = Int(getenv, v.lsize, 1); err != nil {
				return j, err
			}
		}
		if getenv(v.lrank) != "" {
			if j.LocalRank, err = Int(getenv, v.lrank, 0); err != nil {
				return j, err
			}
			if j.LocalSize > 0 && j.LocalRank >= j.LocalSize {
				return j, &Error{v.lrank, getenv(v.lrank), fmt.Sprintf("not below %s=%d", v.lsize, j.LocalSize)}
			}
		}
		break
	}
	switch j.Source {
	case LauncherSlurm:
		j.JobID = getenv("SLURM_JOB_ID")
		j.NodeList = SlurmNodeList(getenv)
		if host := FirstHost(j.NodeList); host != "" {
			// The first node's first rank serves the seed.
			j.Seeds = []string{JoinHostPort(host, strconv.Itoa(SlurmGossipPort(j.JobID)))}
		}
	case LauncherTorchrun:
		j.JobID = getenv("TORCHELASTIC_RUN_ID")
		addr, port := getenv("MASTER_ADDR"), getenv("MASTER_PORT")
		if addr != "" || port != "" {
			if addr == "" || port == "" {
				return j, &Error{"MASTER_ADDR", addr, "MASTER_ADDR and MASTER_PORT must be set together"}
			}
			p, err := Int(getenv, "MASTER_PORT", 1)
			if err != nil {
				return j, err
			}
			if p >= 65535 {
				return j, &Error{"MASTER_PORT", port, "want a port below 65535 (gorun's seed is MASTER_PORT+1)"}
			}
			// torchrun's own store listens on MASTER_PORT: the gossip
			// seed is the port after it.
			j.Seeds = []string{JoinHostPort(addr, strconv.Itoa(p+1))}
		}
	}
	if s := getenv(Seeds); s != "" {
		if j.Seeds, err = ParseSeeds(s); err != nil {
			return j, err
		}
	}
	if s := getenv(JobID); s != "" {
		j.JobID = s
	}
	j.Token = getenv(JobToken)
	return j, nil
}

// displayNames are the launchers as users know them.
var displayNames = map[string]string{
	LauncherGorun:    "gorun",
	LauncherOpenMPI:  "Open MPI's mpirun",
	LauncherHydra:    "MPICH's mpiexec (Hydra)",
	LauncherSlurm:    "srun",
	LauncherTorchrun: "torchrun",
}

// seedHints say how to pass GORUN_SEEDS to every rank under a launcher.
var seedHints = map[string]string{
	LauncherOpenMPI:  "mpirun -x GORUN_SEEDS=HOST:PORT ...",
	LauncherHydra:    "mpiexec -genv GORUN_SEEDS HOST:PORT ...",
	LauncherSlurm:    "SLURM_JOB_NODELIST names the seed host; or export GORUN_SEEDS=HOST:PORT before srun",
	LauncherTorchrun: "torchrun sets MASTER_ADDR and MASTER_PORT; or export GORUN_SEEDS=HOST:PORT",
	LauncherGorun:    "gorun sets it; a rank started by hand needs GORUN_SEEDS=HOST:PORT",
}

// seedPortHints say how to give the job's gossip seed another port under
// a launcher.
var seedPortHints = map[string]string{
	LauncherGorun:    "gorun --gossip-port PORT chooses another",
	LauncherOpenMPI:  "mpirun -x GORUN_SEEDS=HOST:PORT chooses another",
	LauncherHydra:    "mpiexec -genv GORUN_SEEDS HOST:PORT chooses another",
	LauncherSlurm:    "under gorun, --gossip-port PORT chooses another; under srun alone it is derived from SLURM_JOB_ID: export GORUN_SEEDS=HOST:PORT before srun",
	LauncherTorchrun: "it is MASTER_PORT+1: choose another MASTER_PORT, or export GORUN_SEEDS=HOST:PORT",
}

// SeedInUse is the error of a rank that serves the job's gossip seed at
// seed (host:port) and cannot listen there: another process on its host
// holds the port (err says how the bind failed).
func (j Job) SeedInUse(seed string, err error) error {
	hint := seedPortHints[j.Source]
	if hint == "" {
		hint = "set " + Seeds + "=HOST:PORT, the same for every rank, to choose another"
	}
	return fmt.Errorf("it serves the job's gossip seed %s, whose port another process on this host holds (%s): %w", seed, hint, err)
}

// Describe names the launcher and the variables that made the job, for
// error messages: "MPICH's mpiexec (Hydra) (PMI_RANK=1, PMI_SIZE=4)".
func (j Job) Describe() string {
	l := find(j.Source)
	if l.name == "" {
		return "no launcher"
	}
	return fmt.Sprintf("%s (%s=%d, %s=%d)", displayNames[l.name], l.rank, j.Rank, l.size, j.Size)
}

// MissingSeeds is the error of a process that a launcher started in a
// job of several ranks but that has no way to find its peers.
func (j Job) MissingSeeds() error {
	return fmt.Errorf("started by %s, but no gossip seeds to find the other %d ranks: set %s (host:port where rank 0 listens, the same for every rank): %s",
		j.Describe(), j.Size-1, Seeds, seedHints[j.Source])
}
