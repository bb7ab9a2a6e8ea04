package comm

import (
	"fmt"

	"github.com/gorun-hpc/gorun/internal/jobenv"
	"github.com/gorun-hpc/gorun/internal/numa"
)

// applyBind binds this process's threads as GORUN_BIND asks (core, numa or
// none; the launcher's --bind-to), once the rank's place on its host is
// known. The launcher binds the ranks it forks itself; this covers ranks
// started through ssh, an agent or srun. A bad value is an error; a
// sched_setaffinity the system refuses is reported as a warning, since the
// job can run unbound.
func applyBind(c *Comm, getenv func(string) string) error {
	mode, err := numa.ParseBindMode(getenv(jobenv.Bind))
	if err != nil {
		return envErr(jobenv.Bind, getenv(jobenv.Bind), "want core, numa or none")
	}
	if mode == numa.BindNone {
		return nil
	}
	topo, err := numa.System()
	if err != nil {
		c.debugf(debugWarn, "GORUN_BIND=%s: reading the topology: %v; running unbound", getenv(jobenv.Bind), err)
		return nil
	}
	cpus, err := topo.CPUSetFor(c.localRank, c.localSize, mode)
	if err != nil {
		return fmt.Errorf("GORUN_BIND: %w", err)
	}
	if err := numa.BindProcess(cpus); err != nil {
		c.debugf(debugWarn, "GORUN_BIND=%s: %v; running unbound", getenv(jobenv.Bind), err)
		return nil
	}
	c.debugf(debugInfo, "bound to CPUs %s (%s)", numa.FormatCPUList(cpus), getenv(jobenv.Bind))
	return nil
}
