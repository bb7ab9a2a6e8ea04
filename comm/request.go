package comm

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/gorun-hpc/gorun/collectives"
	"github.com/gorun-hpc/gorun/internal/engine"
)

// Request is a pending non-blocking operation. Its place in the
// communicator's operation order is fixed when it is started. A Request
// may be waited for and tested any number of times, from any goroutine.
// A nil *Request is complete, as MPI_REQUEST_NULL: Wait and Test return
// at once without error, and WaitAll skips it, so a slice of requests
// may have gaps.
type Request struct {
	// done is closed when the operation completes. A point-to-point
	// request's is made when it starts (p2p.go); a collective's (lazy) by
	// the first Wait that has to sleep, under mu, so that one that
	// completes before anyone sleeps on it costs no channel.
	done chan struct{}
	lazy bool
	mu   sync.Mutex
	fin  atomic.Bool // a lazy request has completed: err is set
	err  error
	c    atomic.Pointer[Comm] // an ISend or IRecv not yet run: Wait and Test run it (p2p.go)
	// comm and name name the rank and the operation in Wait's error when
	// its own context ends.
	comm *Comm
	name string
}

// Wait blocks until the operation completes, and returns its error, or
// until ctx ends. An ended ctx does not end the operation, which is
// bounded by the context given when it started and goes on; Wait then
// returns a *RankError naming this rank and the operation, which wraps
// ctx's error (errors.Is(err, context.DeadlineExceeded) or
// context.Canceled).
func (r *Request) Wait(ctx context.Context) error {
	if r == nil {
		return nil
	}
	r.flush()
	ch := r.sleepOn()
	if ch == nil {
		return r.err
	}
	select {
	case <-ch:
		return r.err
	default:
	}
	select {
	case <-ch:
		return r.err
	case <-ctx.Done():
		return r.gaveUp(ctx)
	}
}

// Test reports whether the operation has completed, and its error.
func (r *Request) Test() (done bool, err error) {
	if r == nil {
		return true, nil
	}
	r.flush()
	if r.lazy {
		if r.fin.Load() {
			return true, r.err
		}
		return false, nil
	}
	select {
	case <-r.done:
		return true, r.err
	default:
		return false, nil
	}
}

// sleepOn returns the channel closed when r completes, or nil if a lazy
// r has completed already.
func (r *Request) sleepOn() <-chan struct{} {
	if !r.lazy {
		return r.done
	}
	if r.fin.Load() {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fin.Load() {
		return nil
	}
	if r.done == nil {
		r.done = make(chan struct{})
	}
	return r.done
}

// finish completes a lazy request with err.
func (r *Request) finish(err error) {
	r.err = err
	r.mu.Lock()
	r.fin.Store(true)
	if r.done != nil {
		close(r.done)
	}
	r.mu.Unlock()
}

// gaveUp is Wait's error when its ctx ended before the operation did.
func (r *Request) gaveUp(ctx context.Context) error {
	rank := -1
	if r.comm != nil {
		rank = r.comm.rank
	}
	return &RankError{Rank: rank, Op: r.name, Err: fmt.Errorf("Wait gave up, the operation goes on: %w", ctx.Err())}
}

// flush runs r's group if r is a point-to-point message still waiting.
func (r *Request) flush() {
	if r.lazy {
		return
	}
	select {
	case <-r.done:
		return
	default:
	}
	if c := r.c.Load(); c != nil {
		c.flushP2P()
	}
}

// opKind is the operation an iop runs.
type opKind uint8

const (
	kAllReduce opKind = iota
	kBroadcast
	kAllGather
	kReduceScatter
	kReduce
	kGather
	kScatter
	kAllToAll
	kBarrier
	kAllGatherV
	kGatherV
	kScatterV
	kAllToAllV
	kScan
	kExScan
)

var opNames = [...]string{
	kAllReduce: "allreduce", kBroadcast: "broadcast", kAllGather: "allgather",
	kReduceScatter: "reducescatter", kReduce: "reduce", kGather: "gather",
	kScatter: "scatter", kAllToAll: "alltoall", kBarrier: "barrier",
	kAllGatherV: "allgatherv", kGatherV: "gatherv", kScatterV: "scatterv",
	kAllToAllV: "alltoallv", kScan: collectives.Scan.String(), kExScan: collectives.ExScan.String(),
}

// iop is a started collective: its Request and its arguments, in one
// allocation, run by engine.Start on a goroutine of its own (a go
// statement would allocate a closure for them, and a closure per
// function as many again).
type iop[T Number] struct {
	Request
	kind       opKind
	op         Op
	root       int
	t          uint64
	ctx        context.Context
	send, recv []T
	// The v-collectives' counts and displacements (AllToAllV's send side
	// in counts and displs, its receive side in rcounts and rdispls).
	counts, displs, rcounts, rdispls []int
}

// startOp starts o, whose arguments are set, on c at a ticket taken now.
func startOp[T Number](c *Comm, o *iop[T]) *Request {
	if c == nil {
		return nilRequest(opNames[o.kind])
	}
	o.lazy, o.comm, o.name = true, c, opNames[o.kind]
	o.t = c.ticket()
	engine.Start(o)
	return &o.Request
}

// Run runs the operation and completes the request.
func (o *iop[T]) Run() {
	ctx, c, t := o.ctx, o.comm, o.t
	var err error
	switch o.kind {
	case kAllReduce:
		err = allReduce(ctx, c, t, o.send, o.recv, o.op)
	case kBroadcast:
		err = broadcast(ctx, c, t, o.recv, o.root)
	case kAllGather:
		err = allGather(ctx, c, t, o.send, o.recv, 0)
	case kReduceScatter:
		err = reduceScatter(ctx, c, t, o.send, o.recv, o.op)
	case kReduce:
		err = reduce(ctx, c, t, o.send, o.recv, o.op, o.root)
	case kGather:
		err = gather(ctx, c, t, o.send, o.recv, o.root)
	case kScatter:
		err = scatter(ctx, c, t, o.send, o.recv, o.root)
	case kAllToAll:
		err = allToAll(ctx, c, t, o.send, o.recv)
	case kBarrier:
		err = c.barrier(ctx, t)
	case kAllGatherV:
		err = allGatherV(ctx, c, t, o.send, o.recv, o.counts, o.displs)
	case kGatherV:
		err = gatherV(ctx, c, t, o.send, o.recv, o.counts, o.displs, o.root)
	case kScatterV:
		err = scatterV(ctx, c, t, o.send, o.counts, o.displs, o.recv, o.root)
	case kAllToAllV:
		err = allToAllV(ctx, c, t, o.send, o.counts, o.displs, o.recv, o.rcounts, o.rdispls)
	case kScan:
		err = scan(ctx, c, t, collectives.Scan, o.send, o.recv, o.op)
	case kExScan:
		err = scan(ctx, c, t, collectives.ExScan, o.send, o.recv, o.op)
	}
	// The request may outlive the operation: it holds on to none of the
	// arguments.
	o.ctx, o.send, o.recv, o.counts, o.displs, o.rcounts, o.rdispls = nil, nil, nil, nil, nil, nil, nil
	o.finish(err)
}

// funcOp is a started operation given as a function (the ...Loc ones).
type funcOp struct {
	Request
	f func() error
}

func (o *funcOp) Run() { o.finish(o.f()) }

// start starts f, which runs op on c at a ticket it took already.
func start(c *Comm, op string, f func() error) *Request {
	o := &funcOp{Request: Request{lazy: true, comm: c, name: op}, f: f}
	engine.Start(o)
	return &o.Request
}

// IAllReduce starts AllReduce; the buffers must not be touched until the
// request completes.
func IAllReduce[T Number](ctx context.Context, c *Comm, send, recv []T, op Op) *Request {
	return startOp(c, &iop[T]{kind: kAllReduce, ctx: ctx, send: send, recv: recv, op: op})
}

// IBroadcast starts Broadcast.
func IBroadcast[T Number](ctx context.Context, c *Comm, buf []T, root int) *Request {
	return startOp(c, &iop[T]{kind: kBroadcast, ctx: ctx, recv: buf, root: root})
}

// IAllGather starts AllGather.
func IAllGather[T Number](ctx context.Context, c *Comm, send, recv []T) *Request {
	return startOp(c, &iop[T]{kind: kAllGather, ctx: ctx, send: send, recv: recv})
}

// IReduceScatter starts ReduceScatter.
func IReduceScatter[T Number](ctx context.Context, c *Comm, send, recv []T, op Op) *Request {
	return startOp(c, &iop[T]{kind: kReduceScatter, ctx: ctx, send: send, recv: recv, op: op})
}

// IReduce starts Reduce.
func IReduce[T Number](ctx context.Context, c *Comm, send, recv []T, op Op, root int) *Request {
	return startOp(c, &iop[T]{kind: kReduce, ctx: ctx, send: send, recv: recv, op: op, root: root})
}

// IGather starts Gather.
func IGather[T Number](ctx context.Context, c *Comm, send, recv []T, root int) *Request {
	return startOp(c, &iop[T]{kind: kGather, ctx: ctx, send: send, recv: recv, root: root})
}

// IScatter starts Scatter.
func IScatter[T Number](ctx context.Context, c *Comm, send, recv []T, root int) *Request {
	return startOp(c, &iop[T]{kind: kScatter, ctx: ctx, send: send, recv: recv, root: root})
}

// IAllToAll starts AllToAll.
func IAllToAll[T Number](ctx context.Context, c *Comm, send, recv []T) *Request {
	return startOp(c, &iop[T]{kind: kAllToAll, ctx: ctx, send: send, recv: recv})
}

// IBarrier starts Barrier.
func (c *Comm) IBarrier(ctx context.Context) *Request {
	return startOp(c, &iop[uint8]{kind: kBarrier, ctx: ctx})
}

// IAllGatherV starts AllGatherV.
func IAllGatherV[T Number](ctx context.Context, c *Comm, send, recv []T, counts, displs []int) *Request {
	return startOp(c, &iop[T]{kind: kAllGatherV, ctx: ctx, send: send, recv: recv, counts: counts, displs: displs})
}

// IGatherV starts GatherV.
func IGatherV[T Number](ctx context.Context, c *Comm, send, recv []T, counts, displs []int, root int) *Request {
	return startOp(c, &iop[T]{kind: kGatherV, ctx: ctx, send: send, recv: recv, counts: counts, displs: displs, root: root})
}

// IScatterV starts ScatterV.
func IScatterV[T Number](ctx context.Context, c *Comm, send []T, counts, displs []int, recv []T, root int) *Request {
	return startOp(c, &iop[T]{kind: kScatterV, ctx: ctx, send: send, recv: recv, counts: counts, displs: displs, root: root})
}

// IAllToAllV starts AllToAllV.
func IAllToAllV[T Number](ctx context.Context, c *Comm, send []T, sendCounts, sendDispls []int, recv []T, recvCounts, recvDispls []int) *Request {
	return startOp(c, &iop[T]{kind: kAllToAllV, ctx: ctx, send: send, recv: recv,
		counts: sendCounts, displs: sendDispls, rcounts: recvCounts, rdispls: recvDispls})
}

// IScan starts Scan.
func IScan[T Number](ctx context.Context, c *Comm, send, recv []T, op Op) *Request {
	return startOp(c, &iop[T]{kind: kScan, ctx: ctx, send: send, recv: recv, op: op})
}

// IExScan starts ExScan.
func IExScan[T Number](ctx context.Context, c *Comm, send, recv []T, op Op) *Request {
	return startOp(c, &iop[T]{kind: kExScan, ctx: ctx, send: send, recv: recv, op: op})
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
// touched until the request completes. Unlike MPI, a started message does
// not progress on its own: one that nothing has run when c is closed was
// never sent, and its request fails with ErrClosed.
func ISend[T Number](ctx context.Context, c *Comm, buf []T, dst, tag int) *Request {
	if c == nil {
		return nilRequest("send")
	}
	r := c.deferP2P(p2pMsg{ctx: ctx, send: true, peer: dst, tag: tag, dt: DTypeOf[T](), count: len(buf), buf: bytesOf(buf)})
	r.comm, r.name = c, "send" // for Wait's error; the group that runs r reads neither
	return r
}

// IRecv starts Recv; see ISend for when it runs and for its tag.
func IRecv[T Number](ctx context.Context, c *Comm, buf []T, src, tag int) *Request {
	if c == nil {
		return nilRequest("recv")
	}
	r := c.deferP2P(p2pMsg{ctx: ctx, peer: src, tag: tag, dt: DTypeOf[T](), count: len(buf), buf: bytesOf(buf)})
	r.comm, r.name = c, "recv"
	return r
}

// WaitAll waits for every request (nil ones are complete) and returns the
// first error.
func WaitAll(ctx context.Context, reqs ...*Request) error {
	var first error
	for _, r := range reqs {
		if err := r.Wait(ctx); err != nil && first == nil {
			first = err
		}
	}
	return first
}
