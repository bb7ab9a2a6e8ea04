package comm

import (
	"runtime"
	"strconv"

	"github.com/gorun-hpc/gorun/internal/jobenv"
)

// shareProcs lowers GOMAXPROCS to this rank's share of the CPUs it shares
// with other ranks of the job (cpus / sharers, at least 1: one thread per
// rank and core, as the launcher gives the ranks it counts on one host)
// where GOMAXPROCS is still Go's default (no GOMAXPROCS variable, one P
// per CPU) or the launcher's choice (jobenv.Procs, unchanged). The
// launcher counts only the ranks it starts on one host; ranks on other
// hosts of one kernel (namespaces, containers) share the CPUs too, and so
// do ranks started over ssh or by another launcher, which get Go's
// default. A rank with Ps to spare has a thread blocked in the netpoller,
// which every arriving tcp frame wakes, on the CPUs the other ranks need:
// 4 namespace hosts x 1 rank on 2 CPUs, 8 B allreduce over tcp, 3
// interleaved pairs (2026-11-27, another engineer's tests running at nice
// 19), GOMAXPROCS 2 against 1: 98-127 us against 59-74 (Open MPI 70).
// A GOMAXPROCS the user set (the variable, or a runtime.GOMAXPROCS other
// than the default before Init) is left alone; so is one under GORUN_BIND,
// which gives each rank its own CPUs.
func shareProcs(c *Comm, getenv func(string) string) {
	cfg := c.cfg
	if cfg.cpus == 0 || cfg.cpuSharers <= 1 {
		return
	}
	want, cur := max(1, cfg.cpus/cfg.cpuSharers), runtime.GOMAXPROCS(0)
	auto := getenv("GOMAXPROCS") == "" && cur == runtime.NumCPU() || getenv(jobenv.Procs) == strconv.Itoa(cur)
	if !auto || cur <= want {
		return
	}
	runtime.GOMAXPROCS(want)
	// Every engine notes GOMAXPROCS (internal/engine, wait.go): c's, and
	// its hierarchical sub-communicators', which newComm made before this
	// (a rank started without gorun's GOMAXPROCS, across hosts). With a
	// stale count above 1, their Runs handed the one P to the process's
	// other goroutines (a device's watcher, an operation's) once per
	// shareAfter instead of at every 16th idle look.
	c.eng.SetWait(cfg.waitPolicy())
	if c.hier != nil {
		for _, x := range c.hier.subs() {
			x.eng.SetWait(x.cfg.waitPolicy())
		}
	}
	c.debugf(debugInfo, "GOMAXPROCS %d -> %d: %d ranks share this rank's %d CPUs", cur, want, cfg.cpuSharers, cfg.cpus)
}
