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
