package launcher

import (
	"fmt"

	"github.com/gorun-hpc/gorun/internal/jobenv"
)

// EnvRestart tells a restarted rank how many times it was restarted
// (--max-restarts): it joins a running job, whose ranks admit it with
// Comm.Grow, and takes the application's state from them.
const EnvRestart = jobenv.Restart

// EnvMaxRestarts is --max-restarts, for every rank: the survivors check
// for ranks to admit (Comm.Joiners) only when restarts can happen.
const EnvMaxRestarts = jobenv.MaxRestarts

// restart starts failed rank p again if --max-restarts allows; it reports
// whether it did. The new process has p's command and environment but
// GORUN_FAULT (faults are injected once) and rank 0's stdin, and
// GORUN_RESTART=n, on this machine or through the launch agent (rankCmd).
func (r *runner) restart(p *proc, why *RankError) bool {
	if r.stopping || p.rank < 0 || p.remake == nil || p.restarts >= r.cfg.MaxRestarts {
		return false
	}
	p.restarts++
	p.cmd, p.done = p.remake(p.restarts), false
	if err := r.start(p, r.exits); err != nil {
		p.done = true
		r.con.message(fmt.Sprintf("gorun: %v; restarting it failed: %v", why, err))
		return false
	}
	r.con.message(fmt.Sprintf("gorun: %v; restarted it (%d of %d, --max-restarts)", why, p.restarts, r.cfg.MaxRestarts))
	return true
}
