package launcher

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"

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
// GORUN_FAULT (faults are injected once) and stdin (rank 0's was
// consumed), and GORUN_RESTART=n.
func (r *runner) restart(p *proc, why *RankError) bool {
	if r.stopping || p.rank < 0 || p.restarts >= r.cfg.MaxRestarts {
		return false
	}
	old := p.cmd
	cmd := exec.Command(old.Path, old.Args[1:]...)
	cmd.Dir = old.Dir
	for _, kv := range old.Env {
		if !strings.HasPrefix(kv, EnvFault+"=") && !strings.HasPrefix(kv, EnvRestart+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	p.restarts++
	cmd.Env = append(cmd.Env, EnvRestart+"="+strconv.Itoa(p.restarts))
	p.cmd, p.done = cmd, false
	if err := r.start(p, r.exits); err != nil {
		p.done = true
		r.con.message(fmt.Sprintf("gorun: %v; restarting it failed: %v", why, err))
		return false
	}
	r.con.message(fmt.Sprintf("gorun: %v; restarted it (%d of %d, --max-restarts)", why, p.restarts, r.cfg.MaxRestarts))
	return true
}
