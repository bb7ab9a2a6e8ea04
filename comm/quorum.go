package comm

// Quorum (GORUN_QUORUM=majority, WithQuorum). A job cut in two by the
// network finds each side's ranks dead from the other, and each side's
// Shrink agrees on a world of its own ranks: without a quorum both go on,
// as under ULFM's shrink, and after the link is back one of them is
// expelled (expel.go) with the work it did meanwhile. With a quorum, a
// Shrink or Grow goes on only where its world keeps a majority of the
// ranks of the last whole world (quorumBase): where it keeps exactly
// half, the half with that world's rank 0 goes on. Each side decides
// alone, from its agreed world and the base, which its ranks hold alike
// where they come from one recovery, so no message is needed, and at most
// one side of a cut goes on, as in a majority quorum of Paxos or Raft. A failure during a recovery's membership check can
// leave the ranks of one side with different bases (some passed it, some
// did not), and a world's ranks may come from different worlds
// (expel.go): then they may decide differently, and unlike Raft's joint
// consensus nothing makes them agree. The cost is failures the job
// survives: a failure of more than half the ranks at once stops it, and a
// 2-rank job survives only the loss of rank 1.

import (
	"errors"
	"fmt"

	"github.com/gorun-hpc/gorun/bootstrap"
)

// ErrNoQuorum: with a quorum (WithQuorum), this rank's Shrink or Grow
// agreed on a world without a majority of the ranks of the last whole one
// (quorumBase): a partition, or more than half the ranks lost at once.
// The application stops: the other side goes on (gorun --max-restarts
// restarts the rank, which then joins the side that went on).
var ErrNoQuorum = errors.New("no quorum: this side of the job keeps no majority of its ranks")

// quorumBase is the ranks a Shrink or Grow counts for its quorum, by
// gossip name: the members of Init's first world, then of each world a
// Shrink agrees on, and of each a Grow makes once its membership check has
// passed (expel.go), on the members and on the joiners alike. A Grow that
// fails before its check leaves the members' base as it was, so that its
// newcomers are not counted against the ranks that hold the job's state,
// and a joiner whose check failed has an empty base: it never counts a
// quorum. first breaks a tie: of two halves, the one with it goes on.
type quorumBase struct {
	names map[string]bool
	first string
}

// baseOf is the base of w's members.
func baseOf(w bootstrap.World) quorumBase {
	b := quorumBase{names: make(map[string]bool, len(w.Members))}
	for _, m := range w.Members {
		b.names[m.Name] = true
	}
	if len(w.Members) > 0 {
		b.first = w.Members[0].Name
	}
	return b
}

// quorum reports whether world w, agreed by a Shrink or Grow, keeps a
// quorum of b: more than half of its ranks, or half with its first. kept
// is how many of them w holds (a rank restarted since has another name:
// it is not one of them).
func (b quorumBase) quorum(w bootstrap.World) (kept int, ok bool) {
	has := false
	for _, m := range w.Members {
		if b.names[m.Name] {
			kept++
			has = has || m.Name == b.first
		}
	}
	return kept, 2*kept > len(b.names) || 2*kept == len(b.names) && has
}

// noQuorum is the error of a Shrink or Grow whose world w keeps kept of
// b's ranks, no quorum.
func (b quorumBase) noQuorum(w bootstrap.World, kept int) error {
	half := ""
	if 2*kept == len(b.names) {
		half = ", half of them without its rank 0"
	}
	return fmt.Errorf("%w: the world of epoch %d keeps %d of the %d ranks of the last whole one%s (GORUN_QUORUM=majority)", ErrNoQuorum, w.Epoch, kept, len(b.names), half)
}

// sameQuorum fails Init where a rank of eps counts a quorum and this one
// (me) does not, or the reverse: their Shrinks would decide differently.
// Every rank finds such a rank, and names it.
func sameQuorum(eps []*endpoint, me *endpoint) error {
	for r, ep := range eps {
		if ep.quorum != me.quorum {
			setting := map[bool]string{true: "majority", false: "off"}
			return &RankError{Rank: r, Op: "init", Err: fmt.Errorf("%w: rank %d has GORUN_QUORUM=%s, this rank %s: every rank must use the same (WithQuorum)",
				ErrInvalid, r, setting[ep.quorum], setting[me.quorum])}
		}
	}
	return nil
}
