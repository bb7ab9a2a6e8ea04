package comm

// A rank the others declared dead while it was alive (starved of CPU, or
// cut off for a while) comes back with its old communicator and calls
// Shrink, as after any failure. Meanwhile the others shrank without it and
// may admit it again with Grow, as a newcomer: the bootstrap can then agree
// on one world for its Shrink and their Grow (the same members in the same
// order), and the application would run its after-Shrink steps against
// their after-Grow ones (reproduced by starving a rank of the chaos soak
// through a cgroup: the soak's step counter went back to 0).
//
// So every member of a world made by Shrink or Grow, and every rank that
// joins a running job through Init, says which members it takes for
// continuing ones (members of the world it comes from) and which for
// newcomers, in one allreduce. A member some take for continuing and
// others for a newcomer was expelled: its Shrink or Grow fails with
// ErrExpelled (its state is stale: the application exits and gorun
// --max-restarts starts it afresh), and the others' new communicator
// fails naming it, so that they shrink without it.

import (
	"context"
	"fmt"

	"github.com/gorun-hpc/gorun/bootstrap"
)

// ErrExpelled: the other ranks declared this rank dead and went on
// without it; its state is stale. Shrink and Grow return it on such a
// rank, whether it finds out from its new world's membership check or
// from the bootstrap (the others agreed on a later epoch without it).
var ErrExpelled = bootstrap.ErrExpelled

// checkMembership runs the check above on n, a communicator of world w;
// from is the world this rank comes from (nil: it joins the running job).
// It returns the ranks of w some took for continuing members and others
// for newcomers, or the allreduce's error.
func (n *Comm) checkMembership(ctx context.Context, w bootstrap.World, from *bootstrap.World) ([]int, error) {
	v := make([]uint8, 2*w.Size) // [r]: someone takes r for continuing; [Size+r]: for a newcomer
	if from == nil {
		v[w.Size+w.Rank] = 1
	} else {
		was := make(map[string]bool, len(from.Members))
		for _, m := range from.Members {
			was[m.Name] = true
		}
		for r, m := range w.Members {
			if was[m.Name] {
				v[r] = 1
			} else {
				v[w.Size+r] = 1
			}
		}
	}
	if err := AllReduce(ctx, n, v, v, Max); err != nil {
		return nil, err
	}
	var contested []int
	for r := range w.Size {
		if v[r] == 1 && v[w.Size+r] == 1 {
			contested = append(contested, r)
		}
	}
	return contested, nil
}

// expelled fails n after checkMembership found contested members: on a
// contested rank it returns ErrExpelled; on the others n's operations fail
// naming the first contested rank, and n is returned.
func (n *Comm) expelled(contested []int, op string) error {
	for _, r := range contested {
		if r == n.rank {
			return &RankError{Rank: n.rank, Op: op, Err: ErrExpelled}
		}
	}
	err := fmt.Errorf("%w: rank %d came back from a world the others had left it out of: %w", ErrPeerFailed, contested[0], ErrExpelled)
	// Every member found the same contested ranks in the same check:
	// each fails itself, and no notice overtakes another rank's own
	// finding with a plain ErrPeerFailed (CI, TestCheckMembership).
	n.eng.Expel(contested[0], err)
	return nil
}
