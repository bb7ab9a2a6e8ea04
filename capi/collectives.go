package main

/*
#include <stddef.h>
#include <stdint.h>
typedef int64_t gorun_comm;
typedef int64_t gorun_request;
typedef int gorun_dtype;
typedef int gorun_op;
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unsafe"

	"github.com/gorun-hpc/gorun/comm"
)

type kind int

const (
	kAllReduce kind = iota
	kBroadcast
	kAllGather
	kReduceScatter
	// more.go
	kReduce
	kGather
	kScatter
	kAllToAll
	kScan
	kExScan
	kSend
	kRecv
	kAllGatherV
	kGatherV
	kScatterV
	kAllToAllV
	kAllReduceLoc
	kReduceLoc
)

// loc is whether k's buffers hold value-index pairs rather than values.
func (k kind) loc() bool { return k == kAllReduceLoc || k == kReduceLoc }

// call is one collective as C described it.
type call struct {
	kind       kind
	send, recv unsafe.Pointer
	count      uint64 // elements: per rank for allgather's send and reduce-scatter's recv; the v-forms' send_count or recv_count
	op         comm.Op
	root       int // root; the peer of a send or receive
	tag        int
	// The v-collectives' counts and displacements (copied from C).
	counts, displs, rcounts, rdispls []int
	// The lengths of send and recv on this rank, in elements (lengths).
	sendLen, recvLen int
}

func view[T comm.Number](p unsafe.Pointer, n int) []T {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(p), n)
}

// start runs a call of element type T, blocking (async false) or returning
// a request.
func start[T comm.Number](ctx context.Context, c *comm.Comm, k call, async bool) (*comm.Request, error) {
	elem := unsafe.Sizeof(*new(T))
	if k.kind.loc() {
		elem = unsafe.Sizeof(comm.ValueIndex[T]{})
	}
	if err := k.lengths(c, int(elem)); err != nil {
		return nil, refusal{err}
	}
	var s, r []T
	if !k.kind.loc() { // those hold value-index pairs (more)
		s, r = view[T](k.send, k.sendLen), view[T](k.recv, k.recvLen)
	}
	switch k.kind {
	case kAllReduce:
		if async {
			return comm.IAllReduce(ctx, c, s, r, k.op), nil
		}
		return nil, comm.AllReduce(ctx, c, s, r, k.op)
	case kBroadcast:
		if async {
			return comm.IBroadcast(ctx, c, r, k.root), nil
		}
		return nil, comm.Broadcast(ctx, c, r, k.root)
	case kAllGather:
		if async {
			return comm.IAllGather(ctx, c, s, r), nil
		}
		return nil, comm.AllGather(ctx, c, s, r)
	case kReduceScatter:
		if async {
			return comm.IReduceScatter(ctx, c, s, r, k.op), nil
		}
		return nil, comm.ReduceScatter(ctx, c, s, r, k.op)
	}
	if f := more[T](ctx, c, k, s, r); f != nil {
		if async {
			return f.start(), nil
		}
		return nil, f.run()
	}
	return nil, fmt.Errorf("gorun: unknown collective %d", k.kind)
}

func startAny(ctx context.Context, c *comm.Comm, dt C.gorun_dtype, k call, async bool) (*comm.Request, error) {
	switch dt {
	case 0:
		return start[int8](ctx, c, k, async)
	case 1:
		return start[int16](ctx, c, k, async)
	case 2:
		return start[int32](ctx, c, k, async)
	case 3:
		return start[int64](ctx, c, k, async)
	case 4:
		return start[uint8](ctx, c, k, async)
	case 5:
		return start[uint16](ctx, c, k, async)
	case 6:
		return start[uint32](ctx, c, k, async)
	case 7:
		return start[uint64](ctx, c, k, async)
	case 8:
		return start[float32](ctx, c, k, async)
	case 9:
		return start[float64](ctx, c, k, async)
	case 10:
		return start[comm.Float16](ctx, c, k, async)
	case 11:
		return start[comm.BFloat16](ctx, c, k, async)
	}
	return nil, refusal{fmt.Errorf("unknown dtype %d", int(dt))}
}

// refusal is an argument of a call that this rank refuses before the call
// starts (refuse).
type refusal struct{ error }

// refuse fails the call name on every rank of c for err, an argument this
// rank refused before the call started: c.Refuse withdraws this rank, as
// comm's own checks do, so that the ranks whose arguments passed fail at
// once naming it rather than wait for it until their timeout. c is then
// aborted, as after any failed operation. The status is
// GORUN_ERR_INVALID.
func refuse(c *comm.Comm, name string, err error) C.int {
	return fail(statusInvalid, c.Refuse(strings.TrimPrefix(name, "gorun_"), err))
}

// classifyAt is classify, except that this rank's own bad argument is
// GORUN_ERR_INVALID rather than a peer's failure.
func classifyAt(c *comm.Comm, err error) C.int {
	var re *comm.RankError
	if errors.As(err, &re) && re.Rank == c.Rank() && errors.Is(err, comm.ErrInvalid) {
		return fail(statusInvalid, err)
	}
	return classify(err)
}

// pending keeps the context of a non-blocking call alive until its wait,
// and its communicator, to classify its error as the blocking call would.
type pending struct {
	req    *comm.Request
	cancel context.CancelFunc
	c      *comm.Comm
}

var pendings = map[int64]*pending{}

// run runs the call k, blocking (async false) or started, its request
// handle in *out. Once h names a communicator, any argument it refuses
// fails the call on every rank (refuse).
func run(name string, h C.gorun_comm, dt C.gorun_dtype, op C.gorun_op, k call, out *C.gorun_request, async bool) (rc C.int) {
	defer guard(&rc)
	c, rc := lookup(h)
	if c == nil {
		return rc
	}
	if async && out == nil {
		return refuse(c, name, errors.New("req is NULL"))
	}
	if op < 0 || op > C.gorun_op(comm.MaxLoc) {
		return refuse(c, name, fmt.Errorf("unknown op %d", int(op)))
	}
	k.op = comm.Op(op)
	ctx, cancel := opContext()
	req, err := startAny(ctx, c, dt, k, async)
	if !async || err != nil {
		cancel()
		var r refusal
		if errors.As(err, &r) {
			return refuse(c, name, r.error)
		}
		return classifyAt(c, err)
	}
	*out = C.gorun_request(put(pendings, &pending{req: req, cancel: cancel, c: c}))
	return statusOK
}

//export gorun_allreduce
func gorun_allreduce(h C.gorun_comm, send, recv unsafe.Pointer, n C.size_t, dt C.gorun_dtype, op C.gorun_op) C.int {
	return run("gorun_allreduce", h, dt, op, call{kind: kAllReduce, send: send, recv: recv, count: uint64(n)}, nil, false)
}

//export gorun_broadcast
func gorun_broadcast(h C.gorun_comm, buf unsafe.Pointer, n C.size_t, dt C.gorun_dtype, root C.int) C.int {
	return run("gorun_broadcast", h, dt, 0, call{kind: kBroadcast, recv: buf, count: uint64(n), root: int(root)}, nil, false)
}

//export gorun_allgather
func gorun_allgather(h C.gorun_comm, send, recv unsafe.Pointer, n C.size_t, dt C.gorun_dtype) C.int {
	return run("gorun_allgather", h, dt, 0, call{kind: kAllGather, send: send, recv: recv, count: uint64(n)}, nil, false)
}

//export gorun_reduce_scatter
func gorun_reduce_scatter(h C.gorun_comm, send, recv unsafe.Pointer, n C.size_t, dt C.gorun_dtype, op C.gorun_op) C.int {
	return run("gorun_reduce_scatter", h, dt, op, call{kind: kReduceScatter, send: send, recv: recv, count: uint64(n)}, nil, false)
}

//export gorun_iallreduce
func gorun_iallreduce(h C.gorun_comm, send, recv unsafe.Pointer, n C.size_t, dt C.gorun_dtype, op C.gorun_op, req *C.gorun_request) C.int {
	return run("gorun_iallreduce", h, dt, op, call{kind: kAllReduce, send: send, recv: recv, count: uint64(n)}, req, true)
}

//export gorun_ibroadcast
func gorun_ibroadcast(h C.gorun_comm, buf unsafe.Pointer, n C.size_t, dt C.gorun_dtype, root C.int, req *C.gorun_request) C.int {
	return run("gorun_ibroadcast", h, dt, 0, call{kind: kBroadcast, recv: buf, count: uint64(n), root: int(root)}, req, true)
}

//export gorun_iallgather
func gorun_iallgather(h C.gorun_comm, send, recv unsafe.Pointer, n C.size_t, dt C.gorun_dtype, req *C.gorun_request) C.int {
	return run("gorun_iallgather", h, dt, 0, call{kind: kAllGather, send: send, recv: recv, count: uint64(n)}, req, true)
}

//export gorun_ireduce_scatter
func gorun_ireduce_scatter(h C.gorun_comm, send, recv unsafe.Pointer, n C.size_t, dt C.gorun_dtype, op C.gorun_op, req *C.gorun_request) C.int {
	return run("gorun_ireduce_scatter", h, dt, op, call{kind: kReduceScatter, send: send, recv: recv, count: uint64(n)}, req, true)
}

//export gorun_wait
func gorun_wait(h C.gorun_request) (rc C.int) {
	defer guard(&rc)
	p, ok := get(pendings, int64(h))
	if !ok {
		return fail(statusInvalid, fmt.Errorf("gorun_wait: no request with handle %d", int64(h)))
	}
	del(pendings, int64(h))
	defer p.cancel()
	ctx, cancel := opContext()
	defer cancel()
	return classifyAt(p.c, p.req.Wait(ctx))
}

//export gorun_test
func gorun_test(h C.gorun_request, done *C.int) (rc C.int) {
	defer guard(&rc)
	if done == nil {
		return fail(statusInvalid, errors.New("gorun_test: done is NULL"))
	}
	p, ok := get(pendings, int64(h))
	if !ok {
		return fail(statusInvalid, fmt.Errorf("gorun_test: no request with handle %d", int64(h)))
	}
	fin, err := p.req.Test()
	if !fin {
		*done = 0
		return statusOK
	}
	*done = 1
	del(pendings, int64(h))
	p.cancel()
	return classifyAt(p.c, err)
}
