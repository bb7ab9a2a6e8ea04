package comm

import (
	"context"

	"github.com/gorun-hpc/gorun/collectives"
	"github.com/gorun-hpc/gorun/internal/kernels"
)

// Scan leaves in recv on rank r the reduction with op of send over ranks
// 0 … r (MPI_Scan). send and recv have the same length and may be the same
// slice. Avg divides by r+1. ceil(log2 Size) steps.
func Scan[T Number](ctx context.Context, c *Comm, send, recv []T, op Op) error {
	if c == nil {
		return nilComm("scan")
	}
	return scan(ctx, c, c.ticket(), collectives.Scan, send, recv, op)
}

// ExScan leaves in recv on rank r the reduction with op of send over ranks
// 0 … r−1 (MPI_Exscan); rank 0's recv is left as it is. Avg divides by r.
// send and recv have the same length and may be the same slice.
func ExScan[T Number](ctx context.Context, c *Comm, send, recv []T, op Op) error {
	if c == nil {
		return nilComm("exscan")
	}
	return scan(ctx, c, c.ticket(), collectives.ExScan, send, recv, op)
}

func scan[T Number](ctx context.Context, c *Comm, t uint64, coll collectives.Collective, send, recv []T, op Op) error {
	name := coll.String()
	if err := c.enter(ctx, t, name); err != nil {
		return err
	}
	defer c.release()
	if len(send) != len(recv) {
		return c.invalid(name, "len(send) = %d, len(recv) = %d", len(send), len(recv))
	}
	if !op.Valid(DTypeOf[T]()) {
		return c.badOp(name, op, DTypeOf[T]())
	}
	in := bytesOf(send)
	var input []byte
	if coll == collectives.Scan {
		if !sameSlice(send, recv) {
			copy(recv, send)
		}
	} else {
		input = in
		if sameSlice(send, recv) && len(in) > 0 {
			input = c.scratchFor(len(in))
			copy(input, in)
		}
	}
	s := spec{coll: coll, dt: DTypeOf[T](), op: op, count: len(recv), work: bytesOf(recv), input: input}
	if err := c.exec(ctx, &s); err != nil {
		return rankErr(name, err)
	}
	if op == Avg {
		if n := c.rank + 1; coll == collectives.Scan {
			kernels.Scale(recv, n)
		} else if c.rank > 0 {
			kernels.Scale(recv, c.rank)
		}
	}
	return nil
}
