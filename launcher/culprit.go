package launcher

// Which rank failed first. When a rank fails, its peers' operations fail
// too ("rank 1: peer closed the communicator") and they exit, often before
// the failed rank's own process has finished exiting (a clean Close, a
// Python interpreter's teardown). gorun does not blame the first process
// to exit non-zero, as mpirun does: a rank whose operation failed because
// of another says so over the job-control channel before it exits
// (comm → jobctl.Client.Blame), and gorun, at a failure blamed on a rank
// still running, waits up to culpritGrace for that rank's own exit and
// names it. The wait is bounded, and taken only when such a report
// exists, so gorun stays prompt.

import (
	"fmt"
	"slices"
	"time"
)

// culpritGrace bounds the wait, after a failure blamed on a rank that
// still runs, for that rank to exit: a clean Close and an interpreter's
// exit take well under a second.
const culpritGrace = 2 * time.Second

// settle ends the job with the culprit among the failures held so far,
// unless one of them is blamed on a rank that still runs and the grace
// has not passed (expired: it has).
func (r *runner) settle(expired bool) {
	blame := r.blames()
	if !expired {
		for _, re := range r.held {
			if x := rootCause(blame, re.Rank); x != re.Rank && r.runningRank(x) {
				if r.graceAt == nil {
					r.graceAt = time.After(culpritGrace)
				}
				return
			}
		}
	}
	r.graceAt = nil
	held := r.held
	r.held = nil
	r.fail(culprit(held, blame, r.runningRank))
}

// blames are the ranks' reports of whose failure ended their operations
// (rank → cause).
func (r *runner) blames() map[int]int {
	m := map[int]int{}
	if r.mon == nil || r.mon.srv == nil {
		return m
	}
	for _, s := range r.mon.srv.Snapshot().Ranks {
		if s.Blamed && s.Cause != s.Rank {
			m[s.Rank] = s.Cause
		}
	}
	return m
}

func (r *runner) runningRank(rank int) bool {
	for _, p := range r.procs {
		if p.rank == rank && !p.done {
			return true
		}
	}
	return false
}

// rootCause follows rank's blame to a rank that blames no other (rank 2
// blames 0, which aborted because of 1: 1); rank itself for a cycle.
func rootCause(blame map[int]int, rank int) int {
	seen := map[int]bool{rank: true}
	for r := rank; ; {
		next, ok := blame[r]
		switch {
		case !ok:
			return r
		case seen[next]:
			return rank
		}
		seen[next] = true
		r = next
	}
}

// culprit picks the failure to name among held (in exit order): the rank
// the first failure's blame leads to, if it failed; else the first that
// blames no other rank; else the first. The error says which of the
// others failed because of it, and when the ranks blame one that still
// runs (frozen, or hung in its teardown after the grace), which.
func culprit(held []*RankError, blame map[int]int, running func(rank int) bool) error {
	pick := held[0]
	root := rootCause(blame, held[0].Rank)
	found := false
	for _, re := range held {
		if re.Rank == root {
			pick, found = re, true
			break
		}
	}
	if !found {
		for _, re := range held {
			if _, blamed := blame[re.Rank]; !blamed {
				pick = re
				break
			}
		}
	}
	blamed := rootCause(blame, pick.Rank)
	if blamed == pick.Rank || !running(blamed) {
		blamed = -1
	}
	var because, also, blamers []int
	for _, re := range held {
		root := rootCause(blame, re.Rank)
		switch {
		case blamed >= 0 && root == blamed:
			blamers = append(blamers, re.Rank)
		case re == pick:
		case root == pick.Rank:
			because = append(because, re.Rank)
		default:
			also = append(also, re.Rank)
		}
	}
	slices.Sort(because)
	slices.Sort(also)
	slices.Sort(blamers)
	if len(because) == 0 && len(also) == 0 && len(blamers) == 0 {
		return pick
	}
	return &culpritError{RankError: pick, because: because, also: also, blamers: blamers, blamed: blamed}
}

// culpritError is the failed rank's *RankError (errors.As finds it) and
// the ranks that failed after it.
type culpritError struct {
	*RankError
	because []int // failed because of it (their reports say so)
	also    []int // failed too, for reasons of their own
	blamers []int // failed because of rank blamed (it among them)
	blamed  int   // a rank that still runs, blamed by blamers
}

func (e *culpritError) Error() string {
	s := e.RankError.Error()
	if len(e.blamers) > 0 {
		s += fmt.Sprintf("; %s failed because of rank %d, which has not exited", rankWord(e.blamers), e.blamed)
	}
	if len(e.because) > 0 {
		s += fmt.Sprintf("; %s failed because of it", rankWord(e.because))
	}
	if len(e.also) > 0 {
		s += fmt.Sprintf("; %s failed too", rankWord(e.also))
	}
	return s
}

func (e *culpritError) Unwrap() error { return e.RankError }
