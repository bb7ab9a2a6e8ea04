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
// others for a newcomer is contested. It was expelled if it comes from
// another world than the one the job went on in: its Shrink or Grow fails
// with ErrExpelled (its state is stale: the application exits and gorun
// --max-restarts starts it afresh), and the others' new communicator
// fails naming it, so that they shrink without it.
//
// The job went on in the latest of the worlds the members come from. Two
// of one epoch are the two sides of a partition (bootstrap/expel.go): once
// the link is back, both sides may Grow into one world before either
// finds the other out, and every member is then contested, each side's
// taken for continuing by its own and for newcomers by the other's. Of
// the two the larger goes on, or of two of a size the one with the lower
// digest, as the bootstrap decides for a side that asks (measured on two
// namespace hosts: TestPartitionHealExpelsLoneRank). Before 2026-11-29
// every contested member was expelled: a healed partition whose sides
// grew into one world lost every rank.

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/gorun-hpc/gorun/bootstrap"
)

// ErrExpelled: the other ranks declared this rank dead and went on
// without it; its state is stale. Shrink and Grow return it on such a
// rank, whether it finds out from its new world's membership check or
// from the bootstrap (the others agreed on a later epoch without it), and
// so does an Init that joins a running job whose check finds this rank
// expelled.
var ErrExpelled = bootstrap.ErrExpelled

// checkMembership runs the check above on n, a communicator of world w;
// from is the world this rank comes from (nil: it joins the running job).
// It returns the ranks of w that were expelled, or the collectives'
// error.
func (n *Comm) checkMembership(ctx context.Context, w bootstrap.World, from *bootstrap.World) ([]int, error) {
	if h := membershipHook; h != nil {
		from = h(w, from)
	}
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
	if len(contested) == 0 {
		return nil, nil // every rank found none: none takes the second step
	}
	// Which world each rank comes from (originOf), and of those the one
	// the job went on in (bootstrap.WentOn, as the bootstrap decides it).
	all := make([]uint8, originLen*w.Size)
	if err := AllGather(ctx, n, originOf(from), all); err != nil {
		return nil, err
	}
	went := originAt(all, 0)
	for r := 1; r < w.Size; r++ {
		if o := originAt(all, r); bootstrap.WentOn(o, went) {
			went = o
		}
	}
	var out []int
	for _, r := range contested {
		if o := originAt(all, r); o.Epoch != went.Epoch || o.Size != went.Size || o.Digest != went.Digest {
			out = append(out, r)
		}
	}
	return out, nil
}

// membershipHook, when set (by tests only), replaces the world a member of
// w comes from (nil for a rank that joins through Init) before
// checkMembership uses it: a test makes the members take a joiner for
// one of theirs, as members whose Grow committed a world with it, and
// whose coordinator then died before the joiner had the commit, do when
// they shrink from that world into the one the joiner first forms on.
var membershipHook func(w bootstrap.World, from *bootstrap.World) *bootstrap.World

// originLen is the length of originOf's record.
const originLen = 8 + len(bootstrap.World{}.Digest)

// originOf is the record of the world a rank comes from for
// checkMembership: its epoch, its size and its digest; zero for a rank
// that joins (nil).
func originOf(from *bootstrap.World) []uint8 {
	o := make([]uint8, originLen)
	if from != nil {
		binary.BigEndian.PutUint32(o, from.Epoch)
		binary.BigEndian.PutUint32(o[4:], uint32(from.Size))
		copy(o[8:], from.Digest[:])
	}
	return o
}

// originAt decodes rank r's record of all (originOf) into the world's
// epoch, size and digest.
func originAt(all []uint8, r int) bootstrap.World {
	o := all[r*originLen : (r+1)*originLen]
	w := bootstrap.World{Epoch: binary.BigEndian.Uint32(o), Size: int(binary.BigEndian.Uint32(o[4:]))}
	copy(w.Digest[:], o[8:])
	return w
}

// expelled fails n after checkMembership found expelled members: on an
// expelled rank it returns ErrExpelled; on the others n's operations fail
// naming the first expelled rank, and n is returned.
func (n *Comm) expelled(out []int, op string) error {
	for _, r := range out {
		if r == n.rank {
			return &RankError{Rank: n.rank, Op: op, Err: ErrExpelled}
		}
	}
	err := fmt.Errorf("%w: rank %d came back from a world the others had left it out of: %w", ErrPeerFailed, out[0], ErrExpelled)
	// Every member found the same expelled ranks in the same check: each
	// fails itself, and no notice overtakes another rank's own finding
	// with a plain ErrPeerFailed (CI, TestCheckMembership).
	n.eng.Expel(out[0], err)
	if node := n.shrink.node; node != nil {
		// The next Shrink leaves them out even if they take part: one
		// whose own check failed (a slower rank whose collective a
		// faster one's Shrink aborted) returned the grown communicator
		// and calls Shrink with the others. After Expel: the report this
		// makes fails the engine no further and sends no notice.
		for _, r := range out {
			node.Expel(r)
		}
	}
	return nil
}
