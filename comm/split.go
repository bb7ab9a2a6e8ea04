package comm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Split partitions the communicator: the ranks that pass the same color
// form a new communicator, ranked by key (ties by rank here). It is
// collective over c: where a rank calls another collective instead, an
// AllGather of any shape included, both fail with ErrMismatch. A negative
// color takes part but gets nil (MPI's MPI_UNDEFINED and MPI_COMM_NULL);
// Close and the operations on it return ErrInvalid.
func (c *Comm) Split(ctx context.Context, color, key int) (*Comm, error) {
	return c.split(ctx, color, key, "split", false)
}

// subComm is Split for a hierarchical sub-communicator of c: the texts of
// its errors (engine.NameRanks), and the ranks that subErr gives its
// errors, are c's ranks, those of the communicator the user called on.
func (c *Comm) subComm(ctx context.Context, color, key int) (*Comm, error) {
	return c.split(ctx, color, key, "split", true)
}

// Dup returns a new communicator with the same ranks; it is collective.
func (c *Comm) Dup(ctx context.Context) (*Comm, error) {
	if c == nil {
		return nil, nilComm("dup")
	}
	return c.split(ctx, 0, c.rank, "dup", false)
}

// split is Split, its errors of operation name; inParent: the child's
// texts name c's ranks (subComm).
func (c *Comm) split(ctx context.Context, color, key int, name string, inParent bool) (*Comm, error) {
	if c == nil {
		return nil, nilComm(name)
	}
	mine := []int64{int64(color), int64(key)}
	all := make([]int64, 2*c.size)
	if err := allGather(ctx, c, c.ticket(), mine, all, splitRoot); err != nil {
		return nil, rankErr(name, noteSplit(err))
	}
	var members []int
	for r := range c.size {
		if all[2*r] == int64(color) {
			members = append(members, r)
		}
	}
	sort.SliceStable(members, func(i, j int) bool { return all[2*members[i]+1] < all[2*members[j]+1] })
	rv := &splitRendezvous{parent: c, members: members, inParent: inParent}
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

// splitRoot marks Split's and Dup's two exchanges (colors and keys, then
// endpoints), allgathers both, in their signature's root field, which
// AllGather leaves 0 (allGather): a rank in Split and a rank in an
// AllGather of the same count and type disagree there, and fail with
// ErrMismatch, where they matched and went on with each other's data.
const splitRoot = -1

// splitNote says what the root in a mismatch of a Split exchange means.
const splitNote = "Split and Dup exchange colors, keys and endpoints by allgathers of root -1: every rank must call them at the same point"

// metSplit says whether err is a mismatch between an AllGather and a
// Split exchange that says so: they differ in the root alone
// (checkHeader's words, in internal/engine).
func metSplit(err error) bool {
	if err == nil || !errors.Is(err, ErrMismatch) {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, fmt.Sprintf("root %d, this rank 0", splitRoot)) ||
		strings.Contains(msg, fmt.Sprintf("root 0, this rank %d", splitRoot))
}

// noteSplit adds splitNote to err if it is a *RankError for a mismatch
// (once: a hierarchical allgather's phase may have added it).
func noteSplit(err error) error {
	var re *RankError
	if !errors.As(err, &re) || !errors.Is(err, ErrMismatch) || strings.Contains(re.Err.Error(), splitNote) {
		return err
	}
	return &RankError{Rank: re.Rank, Op: re.Op, Err: fmt.Errorf("%w (%s)", re.Err, splitNote)}
}

// splitRendezvous exchanges endpoints through the parent communicator.
type splitRendezvous struct {
	parent  *Comm
	members []int // parent ranks, in child rank order
	r       int
	// inParent: the child's engine names its ranks by members for its
	// whole life, not only while it connects (names).
	inParent bool
}

// names is what the child's texts call its ranks (newComm): the parent's
// ranks while it connects, since a Split that fails there returns no
// child, only the parent the caller knows; then, connected, the parent's
// ranks still for a hierarchical sub-communicator (connected: true), else
// nil, its own, as MPI names a new communicator's.
func (s *splitRendezvous) names(connected bool) []int {
	if connected && !s.inParent {
		return nil
	}
	return s.members
}

// exchangedHook, when set (by tests only), is called with the parent
// rank and the operation once a Split's or CreateGroup's endpoints are
// exchanged, before the child connects: a test makes that rank's call
// fail there with the error it returns, so that the others meet its
// absence while they connect.
var exchangedHook func(parentRank int, op string) error

// exchanged runs exchangedHook, if set, for rank of op; its error is
// rank's.
func exchanged(rank int, op string) error {
	if h := exchangedHook; h != nil {
		if err := h(rank, op); err != nil {
			return &RankError{Rank: rank, Op: op, Err: err}
		}
	}
	return nil
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
	if err := allGather(ctx, s.parent, s.parent.ticket(), send, all, splitRoot); err != nil {
		return nil, noteSplit(err)
	}
	if err := exchanged(s.parent.rank, "split"); err != nil {
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
