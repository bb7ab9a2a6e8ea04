package comm

import (
	"context"
	"encoding/binary"
	"fmt"
	"sort"
)

// Split partitions the communicator: the ranks that pass the same color
// form a new communicator, ranked by key (ties by rank here). It is
// collective over c. A negative color takes part but gets nil (MPI's
// MPI_UNDEFINED and MPI_COMM_NULL); Close and the operations on it
// return ErrInvalid.
func (c *Comm) Split(ctx context.Context, color, key int) (*Comm, error) {
	return c.split(ctx, color, key, "split")
}

// Dup returns a new communicator with the same ranks; it is collective.
func (c *Comm) Dup(ctx context.Context) (*Comm, error) {
	if c == nil {
		return nil, nilComm("dup")
	}
	return c.split(ctx, 0, c.rank, "dup")
}

// split is Split, its errors of operation name.
func (c *Comm) split(ctx context.Context, color, key int, name string) (*Comm, error) {
	if c == nil {
		return nil, nilComm(name)
	}
	mine := []int64{int64(color), int64(key)}
	all := make([]int64, 2*c.size)
	if err := AllGather(ctx, c, mine, all); err != nil {
		return nil, rankErr(name, err)
	}
	var members []int
	for r := range c.size {
		if all[2*r] == int64(color) {
			members = append(members, r)
		}
	}
	sort.SliceStable(members, func(i, j int) bool { return all[2*members[i]+1] < all[2*members[j]+1] })
	rv := &splitRendezvous{parent: c, members: members}
	if color < 0 {
		_, err := rv.exchange(ctx, nil)
		return nil, rankErr(name, err)
	}
	for i, m := range members {
		if m == c.rank {
			rv.r = i
		}
	}
	cfg := *c.cfg
	child, err := newComm(ctx, &cfg, rv)
	if err != nil {
		return nil, rankErr(name, err)
	}
	c.adopt(child, members)
	return child, nil
}

// splitRendezvous exchanges endpoints through the parent communicator.
type splitRendezvous struct {
	parent  *Comm
	members []int // parent ranks, in child rank order
	r       int
}

func (s *splitRendezvous) rank() int { return s.r }
func (s *splitRendezvous) size() int { return len(s.members) }

func (s *splitRendezvous) exchange(ctx context.Context, mine []byte) ([][]byte, error) {
	const slot = 2 + maxBlob
	if len(mine) > maxBlob {
		return nil, fmt.Errorf("gorun: endpoint blob of %d bytes exceeds %d", len(mine), maxBlob)
	}
	send := make([]uint8, slot)
	binary.LittleEndian.PutUint16(send, uint16(len(mine)))
	copy(send[2:], mine)
	all := make([]uint8, slot*s.parent.size)
	if err := AllGather(ctx, s.parent, send, all); err != nil {
		return nil, err
	}
	out := make([][]byte, len(s.members))
	for i, m := range s.members {
		b := all[m*slot : (m+1)*slot]
		n := int(binary.LittleEndian.Uint16(b))
		if n > maxBlob {
			return nil, fmt.Errorf("gorun: bad endpoint from rank %d", m)
		}
		out[i] = b[2 : 2+n]
	}
	return out, nil
}
