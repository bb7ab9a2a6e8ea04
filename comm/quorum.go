package comm

// Quorum (GORUN_QUORUM=majority, WithQuorum). A job cut in two by the
// network finds each side's ranks dead from the other, and each side's
// Shrink agrees on a world of its own ranks: without a quorum both go on,
// as under ULFM's shrink, and after the link is back one of them is
// expelled (expel.go) with the work it did meanwhile. With a quorum, a
// Shrink or Grow goes on only where its world keeps a majority of the
// ranks of the world it was called from; where it keeps exactly half, the
// half with that world's rank 0 goes on. Each side decides alone, from
// the two worlds every one of its ranks holds alike, so no message is
// needed, and at most one side of any cut goes on, as in a majority
// quorum of Paxos or Raft. The cost is failures the job survives: a
// failure of more than half the ranks at once stops it, and a 2-rank job
// survives only the loss of rank 1.

import (
	"errors"
	"fmt"

	"github.com/gorun-hpc/gorun/bootstrap"
)

// ErrNoQuorum: with a quorum (WithQuorum), this rank's Shrink or Grow
// agreed on a world without a majority of the ranks of the last one (a
// partition, or more than half the ranks lost at once). The application
// stops: the other side goes on (gorun --max-restarts restarts the rank,
// which then joins the side that went on).
var ErrNoQuorum = errors.New("no quorum: this side of the job keeps no majority of the last world's ranks")

// quorum reports whether world w, agreed by a Shrink or Grow called from
// world from, keeps a quorum of from's ranks: more than half of them, or
// half with from's rank 0. kept is how many of from's ranks w holds (a
// rank restarted since has another name: it is not one of them).
func quorum(from, w bootstrap.World) (kept int, ok bool) {
	names := make(map[string]bool, len(w.Members))
	for _, m := range w.Members {
		names[m.Name] = true
	}
	for _, m := range from.Members {
		if names[m.Name] {
			kept++
		}
	}
	switch {
	case 2*kept > from.Size:
		return kept, true
	case 2*kept == from.Size && len(from.Members) > 0:
		return kept, names[from.Members[0].Name]
	}
	return kept, false
}

// noQuorum is the error of a Shrink or Grow whose world w keeps kept of
// from's ranks, no quorum.
func noQuorum(from, w bootstrap.World, kept int) error {
	half := ""
	if 2*kept == from.Size {
		half = ", half of them without its rank 0"
	}
	return fmt.Errorf("%w: %d of the %d ranks of epoch %d in the world of epoch %d%s (GORUN_QUORUM=majority)", ErrNoQuorum, kept, from.Size, from.Epoch, w.Epoch, half)
}
