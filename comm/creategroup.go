package comm

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"slices"
)

// CreateGroup returns a communicator of the ranks of c listed in ranks,
// in that order (its rank i is c's rank ranks[i]), as MPI's
// MPI_Comm_create_group: it is collective over those ranks only. Every
// listed rank calls it with the same ranks and tag; the other ranks of c
// do not call it, and go on with their own work (torch.distributed's
// new_group, where only the members make the group's communicator). The
// members exchange their endpoints by messages of c tagged tag. Messages
// between two ranks match in order, whatever their tags (Send), so two
// members must have no message of c between them started and not yet
// received, of any tag, when they call it: the exchange would take it
// for its own and fail with ErrMismatch. The tag only makes such a
// mistake an error rather than a wrong match. Ranks that
// are out of range, repeated, or leave out the caller are ErrInvalid.
// Members that pass different ranks or tags fail with ErrMismatch where
// they exchange messages, and at the timeout where one waits for a rank
// that does not list it. Any of these errors aborts c, as other errors do.
func (c *Comm) CreateGroup(ctx context.Context, ranks []int, tag int) (*Comm, error) {
	const name = "creategroup"
	if c == nil {
		return nil, nilComm(name)
	}
	me := -1
	for i, r := range ranks {
		switch {
		case r < 0 || r >= c.size:
			return nil, c.invalid(name, "rank %d out of range [0,%d)", r, c.size)
		case slices.Index(ranks[:i], r) >= 0:
			return nil, c.invalid(name, "rank %d listed twice", r)
		case r == c.rank:
			me = i
		}
	}
	if me < 0 {
		return nil, c.invalid(name, "ranks %v leave out this rank (%d): only the listed ranks call it", ranks, c.rank)
	}
	if !tagValid(tag) {
		return nil, c.badTag(name, tag)
	}
	rv := &groupRendezvous{parent: c, members: slices.Clone(ranks), r: me, tag: tag, sig: groupSig(ranks, tag)}
	cfg := *c.cfg
	child, err := newComm(ctx, &cfg, rv)
	if err != nil {
		return nil, rankErr(name, err)
	}
	c.adopt(child, rv.members)
	return child, nil
}

// groupSig identifies a CreateGroup call by its ranks and tag, so that
// members that disagree find it in the exchange.
func groupSig(ranks []int, tag int) uint64 {
	h := fnv.New64a()
	var b [8]byte
	for _, r := range append(slices.Clone(ranks), tag) {
		binary.LittleEndian.PutUint64(b[:], uint64(r))
		h.Write(b[:])
	}
	return h.Sum64()
}

// groupRendezvous exchanges endpoints among the members only, by
// messages of the parent communicator between each pair of them.
type groupRendezvous struct {
	parent  *Comm
	members []int // parent ranks, in child rank order
	r       int
	tag     int
	sig     uint64
}

// names is what the group's texts call its ranks (newComm): c's while it
// connects, since a CreateGroup that fails there returns no group, then
// its own (splitRendezvous.names).
func (g *groupRendezvous) names(connected bool) []int {
	if connected {
		return nil
	}
	return g.members
}

func (g *groupRendezvous) rank() int { return g.r }
func (g *groupRendezvous) size() int { return len(g.members) }

func (g *groupRendezvous) exchange(ctx context.Context, mine []byte) ([][]byte, error) {
	const slot = 8 + 2 + maxBlob // signature, length, endpoint
	if len(mine) > maxBlob {
		return nil, fmt.Errorf("gorun: endpoint blob of %d bytes exceeds %d", len(mine), maxBlob)
	}
	send := make([]uint8, slot)
	binary.LittleEndian.PutUint64(send, g.sig)
	binary.LittleEndian.PutUint16(send[8:], uint16(len(mine)))
	copy(send[10:], mine)
	all := make([]uint8, slot*len(g.members))
	var reqs []*Request
	for i, m := range g.members {
		if i == g.r {
			copy(all[i*slot:], send)
			continue
		}
		reqs = append(reqs, ISend(ctx, g.parent, send, m, g.tag), IRecv(ctx, g.parent, all[i*slot:(i+1)*slot], m, g.tag))
	}
	if err := WaitAll(ctx, reqs...); err != nil {
		return nil, err
	}
	out := make([][]byte, len(g.members))
	for i, m := range g.members {
		b := all[i*slot : (i+1)*slot]
		if binary.LittleEndian.Uint64(b) != g.sig {
			err := fmt.Errorf("%w: rank %d called CreateGroup with other ranks or another tag than this rank's (%v, tag %d)", ErrMismatch, m, g.members, g.tag)
			g.parent.eng.Abort(m, err)
			return nil, &RankError{Rank: m, Op: "creategroup", Err: err}
		}
		n := int(binary.LittleEndian.Uint16(b[8:]))
		if n > maxBlob {
			return nil, fmt.Errorf("gorun: bad endpoint from rank %d", m)
		}
		out[i] = b[10 : 10+n]
	}
	if err := exchanged(g.parent.rank, "creategroup"); err != nil {
		return nil, err
	}
	return out, nil
}
