package comm

import (
	"os"

	"github.com/gorun-hpc/gorun/internal/jobenv"
)

// Launched reports whether a launcher started this process: gorun, srun,
// Open MPI's or MPICH's mpirun, or torchrun (their rank and size
// variables, see Init). A launched process calls Init, which joins the
// job or fails with an error naming the launcher and what is missing; a
// program that was not launched may make its own world with NewLocal.
func Launched() bool { return jobenv.Launched(os.Getenv) }

// Launch is where a launcher placed this process, as its variables say,
// read without joining the job (Init does that): for what a program sets
// up before Init, such as GOMAXPROCS by the ranks sharing its host, or a
// per-rank file name.
type Launch struct {
	Launcher   string // "gorun", "openmpi", "mpich", "slurm" or "torchrun"; "" if none
	Rank, Size int    // -1 if not launched
	LocalRank  int    // -1 where the launcher does not say
	LocalSize  int    // -1 where the launcher does not say (srun)
}

// LaunchInfo reads the launcher's variables, the same ones, with the same
// checks, as Init. Outside a launched job it returns Launcher "" and no
// error; a malformed variable is an error naming it.
func LaunchInfo() (Launch, error) {
	j, err := jobenv.Read(os.Getenv)
	if err != nil {
		return Launch{Rank: -1, Size: -1, LocalRank: -1, LocalSize: -1}, err
	}
	return Launch{Launcher: j.Source, Rank: j.Rank, Size: j.Size, LocalRank: j.LocalRank, LocalSize: j.LocalSize}, nil
}
