package comm

import (
	"context"
	"unsafe"

	"github.com/gorun-hpc/gorun/collectives"
	"github.com/gorun-hpc/gorun/internal/kernels"
)

// ValueIndex is an element of MinLoc and MaxLoc reductions (MPI's
// MPI_DOUBLE_INT and friends): a value and the index it came from, often a
// rank or a position. Its layout is the C struct { T value; int64_t index; }
// (16 bytes for every T on 64-bit platforms), so it crosses the C ABI as is.
type ValueIndex[T Number] = kernels.Pair[T]

// AllReduceLoc reduces value-index pairs with MinLoc or MaxLoc across all
// ranks: element i of recv is the pair with the smallest (largest) value
// among the ranks' send[i], and of equal values the smallest index. send
// and recv have the same length and may be the same slice.
func AllReduceLoc[T Number](ctx context.Context, c *Comm, send, recv []ValueIndex[T], op Op) error {
	if c == nil {
		return nilComm("allreduce")
	}
	return allReduceLoc(ctx, c, c.ticket(), send, recv, op)
}

func allReduceLoc[T Number](ctx context.Context, c *Comm, t uint64, send, recv []ValueIndex[T], op Op) error {
	const name = "allreduce"
	if err := c.enter(ctx, t, name); err != nil {
		return err
	}
	defer c.release()
	dt := kernels.PairOf(DTypeOf[T]())
	if len(send) != len(recv) {
		return c.invalid(name, "len(send) = %d, len(recv) = %d", len(send), len(recv))
	}
	if !op.Valid(dt) {
		return c.badPairOp(name, op)
	}
	w, in := pairBytes(recv), pairBytes(send)
	if len(w) > 0 && &w[0] != &in[0] {
		copy(w, in)
	}
	s := spec{coll: collectives.AllReduce, dt: dt, op: op, count: len(recv), work: w}
	return rankErr(name, c.exec(ctx, &s))
}

// ReduceLoc is AllReduceLoc with the result on root only (recv is ignored
// elsewhere).
func ReduceLoc[T Number](ctx context.Context, c *Comm, send, recv []ValueIndex[T], op Op, root int) error {
	if c == nil {
		return nilComm("reduce")
	}
	return reduceLoc(ctx, c, c.ticket(), send, recv, op, root)
}

func reduceLoc[T Number](ctx context.Context, c *Comm, t uint64, send, recv []ValueIndex[T], op Op, root int) error {
	const name = "reduce"
	if err := c.enter(ctx, t, name); err != nil {
		return err
	}
	defer c.release()
	dt := kernels.PairOf(DTypeOf[T]())
	if root < 0 || root >= c.size {
		return c.invalid(name, "root %d out of range [0,%d)", root, c.size)
	}
	if c.rank == root && len(recv) != len(send) {
		return c.invalid(name, "len(send) = %d, len(recv) = %d at the root", len(send), len(recv))
	}
	if !op.Valid(dt) {
		return c.badPairOp(name, op)
	}
	in := pairBytes(send)
	var work []byte
	if c.rank == root {
		work = pairBytes(recv)
	} else {
		work = c.scratchFor(len(in))
	}
	if len(work) > 0 && &work[0] != &in[0] {
		copy(work, in)
	}
	s := spec{coll: collectives.Reduce, dt: dt, op: op, root: root, count: len(send), work: work}
	return rankErr(name, c.exec(ctx, &s))
}

// IAllReduceLoc starts AllReduceLoc.
func IAllReduceLoc[T Number](ctx context.Context, c *Comm, send, recv []ValueIndex[T], op Op) *Request {
	if c == nil {
		return nilRequest("allreduce")
	}
	t := c.ticket()
	return start(c, "allreduce", func() error { return allReduceLoc(ctx, c, t, send, recv, op) })
}

// IReduceLoc starts ReduceLoc.
func IReduceLoc[T Number](ctx context.Context, c *Comm, send, recv []ValueIndex[T], op Op, root int) *Request {
	if c == nil {
		return nilRequest("reduce")
	}
	t := c.ticket()
	return start(c, "reduce", func() error { return reduceLoc(ctx, c, t, send, recv, op, root) })
}

func pairBytes[T Number](s []ValueIndex[T]) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(s[0])))
}
