package comm

import (
	"context"
	"math"

	"github.com/gorun-hpc/gorun/collectives"
	"github.com/gorun-hpc/gorun/internal/kernels"
)

// Every operation below must be called by every rank of the communicator
// (Send and Recv: by the two ranks involved) in the same order with
// matching arguments. A disagreement fails with ErrMismatch, an invalid
// argument with ErrInvalid, both as a *RankError naming the rank at fault
// (for a disagreement, the rank outside the majority). The operation fails
// on every rank that exchanges data with the offender; a rank whose part
// completed without it (such as the sender of a mismatched Send) fails at
// its next operation. After any error the communicator is aborted (Err
// reports why): create a new one to continue. On a nil *Comm (Split's
// result for a negative color) every operation, and Split, Barrier and
// Close, returns a *RankError of Rank -1 wrapping ErrInvalid rather than
// panic; a non-blocking one returns a Request that completed with it.

// AllReduce reduces send across all ranks with op and leaves the result in
// recv on every rank. send and recv have the same length; they may be the
// same slice (in place).
func AllReduce[T Number](ctx context.Context, c *Comm, send, recv []T, op Op) error {
	if c == nil {
		return nilComm("allreduce")
	}
	return allReduce(ctx, c, c.ticket(), send, recv, op)
}

func allReduce[T Number](ctx context.Context, c *Comm, t uint64, send, recv []T, op Op) error {
	const name = "allreduce"
	if err := c.enter(ctx, t, name); err != nil {
		return err
	}
	defer c.release()
	if len(send) != len(recv) {
		return c.invalid(name, "len(send) = %d, len(recv) = %d", len(send), len(recv))
	}
	if op > Avg && !op.Valid(DTypeOf[T]()) {
		return c.badOp(name, op, DTypeOf[T]())
	}
	if c.hierFor(collectives.AllReduce, len(bytesOf(recv))) {
		if !sameSlice(send, recv) {
			copy(recv, send)
		}
		if err := hierAllReduce(ctx, c, recv, op); err != nil {
			return rankErr(name, c.hierErr(ctx, err))
		}
	} else {
		s := spec{coll: collectives.AllReduce, dt: DTypeOf[T](), op: op, count: len(recv), work: bytesOf(recv)}
		switch {
		case sameSlice(send, recv):
		case overlap(bytesOf(send), bytesOf(recv)):
			copy(recv, send)
		default:
			// The schedule reads send where recv is not written yet
			// (collectives.ReadInput): no copy first.
			s.input, s.outOfPlace, s.keep = bytesOf(send), true, collectives.Span{Len: len(recv)}
		}
		if err := c.exec(ctx, &s); err != nil {
			return rankErr(name, err)
		}
	}
	if op == Avg {
		kernels.Scale(recv, c.size)
	}
	return nil
}

// Reduce reduces send across all ranks into recv on root (len(recv) =
// len(send) there; recv is ignored elsewhere). At the root send and recv
// may be the same slice (in place) or overlap.
func Reduce[T Number](ctx context.Context, c *Comm, send, recv []T, op Op, root int) error {
	if c == nil {
		return nilComm("reduce")
	}
	return reduce(ctx, c, c.ticket(), send, recv, op, root)
}

func reduce[T Number](ctx context.Context, c *Comm, t uint64, send, recv []T, op Op, root int) error {
	const name = "reduce"
	if err := c.enter(ctx, t, name); err != nil {
		return err
	}
	defer c.release()
	if root < 0 || root >= c.size {
		return c.invalid(name, "root %d out of range [0,%d)", root, c.size)
	}
	if c.rank == root && len(recv) != len(send) {
		return c.invalid(name, "len(send) = %d, len(recv) = %d at the root", len(send), len(recv))
	}
	if op > Avg && !op.Valid(DTypeOf[T]()) {
		return c.badOp(name, op, DTypeOf[T]())
	}
	// The schedule reads send where work is not written yet
	// (collectives.ReadInput): no copy first. Only the root's work holds
	// a result.
	s := spec{coll: collectives.Reduce, dt: DTypeOf[T](), op: op, root: root, count: len(send),
		input: bytesOf(send), outOfPlace: true}
	switch {
	case c.rank != root:
		s.work = c.scratchFor(len(bytesOf(send)))
	case sameSlice(send, recv):
		s.work, s.input, s.outOfPlace = bytesOf(recv), nil, false
	case overlap(bytesOf(send), bytesOf(recv)):
		copy(recv, send)
		s.work, s.input, s.outOfPlace = bytesOf(recv), nil, false
	default:
		s.work, s.keep = bytesOf(recv), collectives.Span{Len: len(recv)}
	}
	if err := c.exec(ctx, &s); err != nil {
		return rankErr(name, err)
	}
	if op == Avg && c.rank == root {
		kernels.Scale(recv, c.size)
	}
	return nil
}

// Broadcast copies root's buf to every rank's buf (same length everywhere).
func Broadcast[T Number](ctx context.Context, c *Comm, buf []T, root int) error {
	if c == nil {
		return nilComm("broadcast")
	}
	return broadcast(ctx, c, c.ticket(), buf, root)
}

func broadcast[T Number](ctx context.Context, c *Comm, t uint64, buf []T, root int) error {
	const name = "broadcast"
	if err := c.enter(ctx, t, name); err != nil {
		return err
	}
	defer c.release()
	if root < 0 || root >= c.size {
		return c.invalid(name, "root %d out of range [0,%d)", root, c.size)
	}
	if c.hierFor(collectives.Broadcast, len(bytesOf(buf))) {
		return rankErr(name, c.hierErr(ctx, hierBroadcast(ctx, c, buf, root)))
	}
	s := spec{coll: collectives.Broadcast, dt: DTypeOf[T](), root: root, count: len(buf), work: bytesOf(buf)}
	return rankErr(name, c.exec(ctx, &s))
}

// AllGather concatenates every rank's send, in rank order, into recv
// (len(recv) = Size·len(send)). send may be recv's own block (in place).
func AllGather[T Number](ctx context.Context, c *Comm, send, recv []T) error {
	if c == nil {
		return nilComm("allgather")
	}
	return allGather(ctx, c, c.ticket(), send, recv, 0)
}

// allGather is AllGather with mark in its signature's root field, which
// an AllGather leaves 0: Split's exchanges pass splitRoot, so that they
// and a peer's AllGather of the same count and type disagree (ErrMismatch)
// rather than match. The phases of a hierarchical one carry it too.
func allGather[T Number](ctx context.Context, c *Comm, t uint64, send, recv []T, mark int) error {
	const name = "allgather"
	if err := c.enter(ctx, t, name); err != nil {
		return err
	}
	defer c.release()
	n := len(send)
	if len(recv) != c.size*n {
		return c.invalid(name, "len(recv) = %d, want Size·len(send) = %d", len(recv), c.size*n)
	}
	var err error
	if c.hierFor(collectives.AllGather, len(bytesOf(recv))) {
		err = c.hierErr(ctx, hierAllGather(ctx, c, send, recv, mark))
	} else {
		if mine := recv[c.rank*n : (c.rank+1)*n]; !sameSlice(send, mine) {
			copy(mine, send)
		}
		s := spec{coll: collectives.AllGather, dt: DTypeOf[T](), root: mark, count: n, work: bytesOf(recv)}
		err = c.exec(ctx, &s)
	}
	if err = rankErr(name, err); mark == 0 && metSplit(err) {
		err = noteSplit(err) // the peer was in Split: say so here too
	}
	return err
}

// ReduceScatter reduces send across all ranks and leaves block Rank of the
// result in recv (len(send) = Size·len(recv)). recv may be send's own
// block (in place) or overlap send.
func ReduceScatter[T Number](ctx context.Context, c *Comm, send, recv []T, op Op) error {
	if c == nil {
		return nilComm("reducescatter")
	}
	return reduceScatter(ctx, c, c.ticket(), send, recv, op)
}

func reduceScatter[T Number](ctx context.Context, c *Comm, t uint64, send, recv []T, op Op) error {
	const name = "reducescatter"
	if err := c.enter(ctx, t, name); err != nil {
		return err
	}
	defer c.release()
	n := len(recv)
	if len(send) != c.size*n {
		return c.invalid(name, "len(send) = %d, want Size·len(recv) = %d", len(send), c.size*n)
	}
	if op > Avg && !op.Valid(DTypeOf[T]()) {
		return c.badOp(name, op, DTypeOf[T]())
	}
	in := bytesOf(send)
	if c.hierFor(collectives.ReduceScatter, len(in)) {
		if err := hierReduceScatter(ctx, c, send, recv, op); err != nil {
			return rankErr(name, c.hierErr(ctx, err))
		}
		if op == Avg {
			kernels.Scale(recv, c.size)
		}
		return nil
	}
	// The schedule reads send where work is not written yet
	// (collectives.ReadInput): no copy first; work's block of this rank
	// holds the result.
	work := c.scratchFor(len(in))
	s := spec{coll: collectives.ReduceScatter, dt: DTypeOf[T](), op: op, count: n, work: work,
		input: in, outOfPlace: true, keep: collectives.Span{Off: c.rank * n, Len: n}}
	if err := c.exec(ctx, &s); err != nil {
		return rankErr(name, err)
	}
	es := len(in) / max(1, len(send))
	copy(bytesOf(recv), work[c.rank*n*es:(c.rank+1)*n*es])
	if op == Avg {
		kernels.Scale(recv, c.size)
	}
	return nil
}

// Gather concatenates every rank's send, in rank order, into root's recv
// (len(recv) = Size·len(send) there; ignored elsewhere). At the root send
// may be recv's own block (in place).
func Gather[T Number](ctx context.Context, c *Comm, send, recv []T, root int) error {
	if c == nil {
		return nilComm("gather")
	}
	return gather(ctx, c, c.ticket(), send, recv, root)
}

func gather[T Number](ctx context.Context, c *Comm, t uint64, send, recv []T, root int) error {
	const name = "gather"
	if err := c.enter(ctx, t, name); err != nil {
		return err
	}
	defer c.release()
	n := len(send)
	if root < 0 || root >= c.size {
		return c.invalid(name, "root %d out of range [0,%d)", root, c.size)
	}
	var work []byte
	if c.rank == root {
		if len(recv) != c.size*n {
			return c.invalid(name, "len(recv) = %d at the root, want Size·len(send) = %d", len(recv), c.size*n)
		}
		copy(recv[root*n:(root+1)*n], send)
		work = bytesOf(recv)
	}
	s := spec{coll: collectives.Gather, dt: DTypeOf[T](), root: root, count: n, work: work, input: bytesOf(send)}
	return rankErr(name, c.exec(ctx, &s))
}

// Scatter sends block r of root's send (len(send) = Size·len(recv) there;
// ignored elsewhere) to rank r's recv. At the root recv may be send's own
// block (in place) or overlap send.
func Scatter[T Number](ctx context.Context, c *Comm, send, recv []T, root int) error {
	if c == nil {
		return nilComm("scatter")
	}
	return scatter(ctx, c, c.ticket(), send, recv, root)
}

func scatter[T Number](ctx context.Context, c *Comm, t uint64, send, recv []T, root int) error {
	const name = "scatter"
	if err := c.enter(ctx, t, name); err != nil {
		return err
	}
	defer c.release()
	n := len(recv)
	if root < 0 || root >= c.size {
		return c.invalid(name, "root %d out of range [0,%d)", root, c.size)
	}
	var input []byte
	if c.rank == root {
		if len(send) != c.size*n {
			return c.invalid(name, "len(send) = %d at the root, want Size·len(recv) = %d", len(send), c.size*n)
		}
		input = bytesOf(send)
	}
	s := spec{coll: collectives.Scatter, dt: DTypeOf[T](), root: root, count: n, work: bytesOf(recv), input: input}
	if err := c.exec(ctx, &s); err != nil {
		return rankErr(name, err)
	}
	if c.rank == root {
		// After the sends: recv may overlap another rank's block.
		copy(recv, send[root*n:(root+1)*n])
	}
	return nil
}

// AllToAll sends block b of every rank's send to rank b, where it lands as
// block Rank of recv. len(send) = len(recv) = Size·block; they may be the
// same slice or overlap.
func AllToAll[T Number](ctx context.Context, c *Comm, send, recv []T) error {
	if c == nil {
		return nilComm("alltoall")
	}
	return allToAll(ctx, c, c.ticket(), send, recv)
}

func allToAll[T Number](ctx context.Context, c *Comm, t uint64, send, recv []T) error {
	const name = "alltoall"
	if err := c.enter(ctx, t, name); err != nil {
		return err
	}
	defer c.release()
	if len(send) != len(recv) || len(send)%c.size != 0 {
		return c.invalid(name, "len(send) = %d, len(recv) = %d: want equal multiples of Size %d", len(send), len(recv), c.size)
	}
	n := len(send) / c.size
	input, out := bytesOf(send), bytesOf(recv)
	if overlap(input, out) {
		// In place, or overlapping in part: blocks arriving in recv
		// would overwrite send before it is read.
		tmp := c.scratchFor(len(input))
		copy(tmp, input)
		input = tmp
	}
	if !sameSlice(send, recv) { // this rank's own block
		es := DTypeOf[T]().Size()
		copy(out[c.rank*n*es:(c.rank+1)*n*es], input[c.rank*n*es:])
	}
	s := spec{coll: collectives.AllToAll, dt: DTypeOf[T](), count: n, work: bytesOf(recv), input: input}
	return rankErr(name, c.exec(ctx, &s))
}

// Barrier returns once every rank has entered it.
func (c *Comm) Barrier(ctx context.Context) error {
	if c == nil {
		return nilComm("barrier")
	}
	return c.barrier(ctx, c.ticket())
}

func (c *Comm) barrier(ctx context.Context, t uint64) error {
	if err := c.enter(ctx, t, "barrier"); err != nil {
		return err
	}
	defer c.release()
	if c.hierFor(collectives.Barrier, 0) {
		return rankErr("barrier", c.hierErr(ctx, c.hierBarrier(ctx)))
	}
	s := spec{coll: collectives.Barrier, dt: kernels.Uint8}
	return rankErr("barrier", c.exec(ctx, &s))
}

// Send sends buf to rank dst with tag. Messages between two ranks are
// matched in order, with collectives included (as in NCCL): the matching
// Recv must be the next message dst receives from this rank, with the same
// tag and length, else the Recv fails with ErrMismatch; this Send may have
// returned nil by then (its message was sent), and this rank's next
// operation fails instead. tag is in the int32 range
// [math.MinInt32, math.MaxInt32] (it travels in 32 bits); one outside it is
// ErrInvalid. dst may be this rank when an IRecv from it was started before
// (Send joins it; see ISend); without one, a Send to this rank could never
// complete and is ErrInvalid. Send returns once buf may be reused.
func Send[T Number](ctx context.Context, c *Comm, buf []T, dst, tag int) error {
	if c == nil {
		return nilComm("send")
	}
	t, r := c.p2pTurn(p2pMsg{ctx: ctx, send: true, peer: dst, tag: tag, dt: DTypeOf[T](), count: len(buf), buf: bytesOf(buf)})
	if r != nil { // joined the started ISends and IRecvs (p2p.go)
		<-r.done
		return r.err
	}
	return sendMsg(ctx, c, t, buf, dst, tag)
}

func sendMsg[T Number](ctx context.Context, c *Comm, t uint64, buf []T, dst, tag int) error {
	const name = "send"
	if err := c.enter(ctx, t, name); err != nil {
		return err
	}
	defer c.release()
	if dst < 0 || dst >= c.size {
		return c.invalid(name, "destination %d (rank %d of %d)", dst, c.rank, c.size)
	}
	if !tagValid(tag) {
		return c.badTag(name, tag)
	}
	if dst == c.rank { // no started IRecv to join (p2pTurn)
		return c.invalid(name, "send to this rank (%d) with tag %d could never complete: no IRecv from this rank was started before it", c.rank, tag)
	}
	s := spec{coll: collectives.SendRecv, dt: DTypeOf[T](), root: tag, count: len(buf), input: bytesOf(buf), peer: dst, send: true}
	return rankErr(name, c.exec(ctx, &s))
}

// Recv receives into buf the next message from rank src, which must carry
// tag and len(buf) elements. tag is in the int32 range, as for Send. src
// may be this rank when an ISend to it was started before; without one, a
// Recv from this rank could never complete and is ErrInvalid. There are no
// wildcards (MPI_ANY_SOURCE, MPI_ANY_TAG) and no shorter messages than buf
// (MPI_Get_count): src is one rank, a negative src is ErrInvalid, and
// every tag, negative ones included, matches only itself. A Recv (or a
// Send) and a call of src's that wait for each other, such as a Recv from
// src while src is in a Gather to this rank or a Broadcast from it, or in
// a Recv from this rank, fail both ranks with ErrMismatch within a few
// hundred milliseconds, as collectives that disagree do. A communicator's
// operations run one at a time in the order they were started, so an
// IRecv started before a collective takes its message only after the
// collective, not during it as MPI's may. Point-to-point calls that wait
// for each other around a cycle of three ranks or more (each rank in a
// Recv from the next) fail likewise, naming the highest rank in the cycle
// (or one of its ranks whose wait for a rank outside it ended while it
// waited). A cycle that goes through a collective (src waits in the
// collective for another rank, which waits for this one) is found only at
// the operation timeout (WithTimeout), which fails every rank.
func Recv[T Number](ctx context.Context, c *Comm, buf []T, src, tag int) error {
	if c == nil {
		return nilComm("recv")
	}
	t, r := c.p2pTurn(p2pMsg{ctx: ctx, peer: src, tag: tag, dt: DTypeOf[T](), count: len(buf), buf: bytesOf(buf)})
	if r != nil {
		<-r.done
		return r.err
	}
	return recvMsg(ctx, c, t, buf, src, tag)
}

func recvMsg[T Number](ctx context.Context, c *Comm, t uint64, buf []T, src, tag int) error {
	const name = "recv"
	if err := c.enter(ctx, t, name); err != nil {
		return err
	}
	defer c.release()
	if src < 0 || src >= c.size {
		return c.invalid(name, "source %d (rank %d of %d)", src, c.rank, c.size)
	}
	if !tagValid(tag) {
		return c.badTag(name, tag)
	}
	if src == c.rank {
		return c.invalid(name, "receive from this rank (%d) with tag %d could never complete: no ISend to this rank was started before it", c.rank, tag)
	}
	s := spec{coll: collectives.SendRecv, dt: DTypeOf[T](), root: tag, count: len(buf), work: bytesOf(buf), peer: src}
	return rankErr(name, c.exec(ctx, &s))
}

// tagValid says whether a message tag fits the 32 bits it travels in.
func tagValid(tag int) bool { return tag >= math.MinInt32 && tag <= math.MaxInt32 }

func (c *Comm) badTag(op string, tag int) error {
	return c.invalid(op, "tag %d outside the int32 range [%d, %d]", tag, math.MinInt32, math.MaxInt32)
}
