package jobctl_test

import "github.com/gorun-hpc/gorun/internal/jobctl"

// A rank reports its start-up phases and each collective it runs. Every
// call is cheap and safe without a launcher: FromEnv then returns nil.
func Example() {
	ctl := jobctl.FromEnv()
	defer ctl.Close()
	rank := 0
	ctl.Phase(rank, "bootstrap")
	ctl.Phase(rank, "connecting")
	ctl.Joined(rank)
	ctl.Phase(rank, "ready")
	for seq := uint64(1); seq <= 3; seq++ {
		ctl.Enter("allreduce", seq)
		// ... the collective ...
		ctl.Leave()
	}
	// Output:
}
