package launcher

import (
	"fmt"
	"syscall"
	"time"

	"github.com/gorun-hpc/gorun/internal/jobctl"
)

// silentFor is how long a rank's job control reports may stop before,
// under --elastic, gorun counts it as frozen or cut off. A live rank
// reports at least every 5 s, and jobctl's server drops a connection
// silent for 30 s.
var silentFor = 30 * time.Second

// stopSilent ends a job of which only silent ranks are left, under
// --elastic: every rank still running joined the job and then sent no
// report for silentFor (its job control connection silent, or closed)
// without its Close, and at least one other rank has ended. Such a rank
// is frozen (SIGSTOP, a hung host) or cut off, and the others shrank past
// it and finished; nothing else would end it, so gorun would wait for it
// for ever. gorun stops it (SIGTERM, then SIGKILL after --kill-grace) and
// the job fails naming it, as for any rank lost under --elastic. A rank
// that never reported (a program without comm), or restarted and not yet
// reporting, is not silent.
func (r *runner) stopSilent(snap jobctl.Snapshot, now time.Time) {
	if !r.cfg.Elastic || r.stopping || r.running == 0 {
		return
	}
	states := make(map[int]jobctl.RankState, len(snap.Ranks))
	for _, s := range snap.Ranks {
		states[s.Rank] = s
	}
	var silent []*proc
	ended := false
	for _, p := range r.procs {
		if p.done {
			ended = true
			continue
		}
		if p.rank < 0 || p.tasks != nil {
			return // srun stands for its tasks
		}
		s, ok := states[p.rank]
		if !ok || s.Done || s.LastSeen.Before(p.started) || now.Sub(s.LastSeen) < silentFor {
			return
		}
		silent = append(silent, p)
	}
	if !ended || len(silent) == 0 {
		return
	}
	for _, p := range silent {
		s := states[p.rank]
		re := &RankError{Rank: p.rank, Host: p.host, ExitCode: -1,
			Err: fmt.Errorf("%w: no report from it for %v (frozen or cut off), and every other rank has ended", ErrRankFailed, now.Sub(s.LastSeen).Round(time.Second))}
		if r.first == nil {
			r.first = re
		}
		r.con.message("gorun: " + re.Error() + "; stopping it (--elastic)")
	}
	r.stop(syscall.SIGTERM)
}
