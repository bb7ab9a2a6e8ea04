package comm

import (
	"context"
	"sync/atomic"

	"github.com/gorun-hpc/gorun/collectives"
	"github.com/gorun-hpc/gorun/internal/engine"
)

// Request is a pending non-blocking operation. Its place in the
// communicator's operation order is fixed when it is started.
type Request struct {
	done chan struct{}
	err  error
	c    atomic.Pointer[Comm] // an ISend or IRecv not yet run: Wait and Test run it (p2p.go)
}

// Wait blocks until the operation completes or ctx ends (the operation
// itself is bounded by the context given when it started).
func (r *Request) Wait(ctx context.Context) error {
	r.flush()
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Test reports whether the operation has completed, and its error.
func (r *Request) Test() (done bool, err error) {
	r.flush()
	select {
	case <-r.done:
		return true, r.err
	default:
		return false, nil
	}
}

// flush runs r's group if r is a point-to-point message still waiting.
func (r *Request) flush() {
	select {
	case <-r.done:
		return
	default:
	}
	if c := r.c.Load(); c != nil {
		c.flushP2P()
	}
}

func start(f func() error) *Request {
	r := &Request{done: make(chan struct{})}
	engine.Go(func() {
		r.err = f()
		close(r.done)
	})
	return r
}

// IAllReduce starts AllReduce; the buffers must not be touched until the
// request completes.
func IAllReduce[T Number](ctx context.Context, c *Comm, send, recv []T, op Op) *Request {
	t := c.ticket()
	return start(func() error { return allReduce(ctx, c, t, send, recv, op) })
}

// IBroadcast starts Broadcast.
func IBroadcast[T Number](ctx context.Context, c *Comm, buf []T, root int) *Request {
	t := c.ticket()
	return start(func() error { return broadcast(ctx, c, t, buf, root) })
}

// IAllGather starts AllGather.
func IAllGather[T Number](ctx context.Context, c *Comm, send, recv []T) *Request {
	t := c.ticket()
	return start(func() error { return allGather(ctx, c, t, send, recv) })
}

// IReduceScatter starts ReduceScatter.
func IReduceScatter[T Number](ctx context.Context, c *Comm, send, recv []T, op Op) *Request {
	t := c.ticket()
	return start(func() error { return reduceScatter(ctx, c, t, send, recv, op) })
}

// IReduce starts Reduce.
func IReduce[T Number](ctx context.Context, c *Comm, send, recv []T, op Op, root int) *Request {
	t := c.ticket()
	return start(func() error { return reduce(ctx, c, t, send, recv, op, root) })
}

// IGather starts Gather.
func IGather[T Number](ctx context.Context, c *Comm, send, recv []T, root int) *Request {
	t := c.ticket()
	return start(func() error { return gather(ctx, c, t, send, recv, root) })
}

// IScatter starts Scatter.
func IScatter[T Number](ctx context.Context, c *Comm, send, recv []T, root int) *Request {
	t := c.ticket()
	return start(func() error { return scatter(ctx, c, t, send, recv, root) })
}

// IAllToAll starts AllToAll.
func IAllToAll[T Number](ctx context.Context, c *Comm, send, recv []T) *Request {
	t := c.ticket()
	return start(func() error { return allToAll(ctx, c, t, send, recv) })
}

// IBarrier starts Barrier.
func (c *Comm) IBarrier(ctx context.Context) *Request {
	t := c.ticket()
	return start(func() error { return c.barrier(ctx, t) })
}

// IAllGatherV starts AllGatherV.
func IAllGatherV[T Number](ctx context.Context, c *Comm, send, recv []T, counts, displs []int) *Request {
	t := c.ticket()
	return start(func() error { return allGatherV(ctx, c, t, send, recv, counts, displs) })
}

// IGatherV starts GatherV.
func IGatherV[T Number](ctx context.Context, c *Comm, send, recv []T, counts, displs []int, root int) *Request {
	t := c.ticket()
	return start(func() error { return gatherV(ctx, c, t, send, recv, counts, displs, root) })
}

// IScatterV starts ScatterV.
func IScatterV[T Number](ctx context.Context, c *Comm, send []T, counts, displs []int, recv []T, root int) *Request {
	t := c.ticket()
	return start(func() error { return scatterV(ctx, c, t, send, counts, displs, recv, root) })
}

// IAllToAllV starts AllToAllV.
func IAllToAllV[T Number](ctx context.Context, c *Comm, send []T, sendCounts, sendDispls []int, recv []T, recvCounts, recvDispls []int) *Request {
	t := c.ticket()
	return start(func() error {
		return allToAllV(ctx, c, t, send, sendCounts, sendDispls, recv, recvCounts, recvDispls)
	})
}

// IScan starts Scan.
func IScan[T Number](ctx context.Context, c *Comm, send, recv []T, op Op) *Request {
	t := c.ticket()
	return start(func() error { return scan(ctx, c, t, collectives.Scan, send, recv, op) })
}

// IExScan starts ExScan.
func IExScan[T Number](ctx context.Context, c *Comm, send, recv []T, op Op) *Request {
	t := c.ticket()
	return start(func() error { return scan(ctx, c, t, collectives.ExScan, send, recv, op) })
}

// ISend starts Send. Started point-to-point messages run together, as
// one group, when something needs them: a Wait or Test on any request, a
// blocking Send or Recv, or any other operation on c (which runs after
// them, in the order the calls were made). So two ranks may each ISend the
// other a message of any size before their IRecv, with any number
// outstanding, as in MPI; the messages between two ranks are still matched
// in order (see Send). A message to this rank itself is copied into the
// IRecv from itself that runs in the same group, matched in order with the
// same rules; one with no counterpart in its group could never complete and
// fails with ErrInvalid. tag is in the int32 range, as for Send; one outside
// it fails the request with ErrInvalid when it runs. The buffer must not be
// touched until the request completes.
func ISend[T Number](ctx context.Context, c *Comm, buf []T, dst, tag int) *Request {
	return c.deferP2P(p2pMsg{ctx: ctx, send: true, peer: dst, tag: tag, dt: DTypeOf[T](), count: len(buf), buf: bytesOf(buf)})
}

// IRecv starts Recv; see ISend for when it runs and for its tag.
func IRecv[T Number](ctx context.Context, c *Comm, buf []T, src, tag int) *Request {
	return c.deferP2P(p2pMsg{ctx: ctx, peer: src, tag: tag, dt: DTypeOf[T](), count: len(buf), buf: bytesOf(buf)})
}

// WaitAll waits for every request and returns the first error.
func WaitAll(ctx context.Context, reqs ...*Request) error {
	var first error
	for _, r := range reqs {
		if err := r.Wait(ctx); err != nil && first == nil {
			first = err
		}
	}
	return first
}
