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
	"unsafe"

	"github.com/gorun-hpc/gorun/comm"
)

// The rest of the MPI set: rooted collectives, all-to-all, scans,
// point-to-point, the v-collectives and value-index reductions.

// op is one call ready to run blocking or to start.
type op struct {
	run   func() error
	start func() *comm.Request
}

// more builds the calls of the kinds in this file (nil for others) on
// send and recv, the views of k's buffers.
func more[T comm.Number](ctx context.Context, c *comm.Comm, k call, s, r []T) *op {
	switch k.kind {
	case kReduce:
		return &op{func() error { return comm.Reduce(ctx, c, s, r, k.op, k.root) },
			func() *comm.Request { return comm.IReduce(ctx, c, s, r, k.op, k.root) }}
	case kGather:
		return &op{func() error { return comm.Gather(ctx, c, s, r, k.root) },
			func() *comm.Request { return comm.IGather(ctx, c, s, r, k.root) }}
	case kScatter:
		return &op{func() error { return comm.Scatter(ctx, c, s, r, k.root) },
			func() *comm.Request { return comm.IScatter(ctx, c, s, r, k.root) }}
	case kAllToAll:
		return &op{func() error { return comm.AllToAll(ctx, c, s, r) },
			func() *comm.Request { return comm.IAllToAll(ctx, c, s, r) }}
	case kScan:
		return &op{func() error { return comm.Scan(ctx, c, s, r, k.op) },
			func() *comm.Request { return comm.IScan(ctx, c, s, r, k.op) }}
	case kExScan:
		return &op{func() error { return comm.ExScan(ctx, c, s, r, k.op) },
			func() *comm.Request { return comm.IExScan(ctx, c, s, r, k.op) }}
	case kSend:
		return &op{func() error { return comm.Send(ctx, c, s, k.root, k.tag) },
			func() *comm.Request { return comm.ISend(ctx, c, s, k.root, k.tag) }}
	case kRecv:
		return &op{func() error { return comm.Recv(ctx, c, r, k.root, k.tag) },
			func() *comm.Request { return comm.IRecv(ctx, c, r, k.root, k.tag) }}
	case kAllGatherV:
		return &op{func() error { return comm.AllGatherV(ctx, c, s, r, k.counts, k.displs) },
			func() *comm.Request { return comm.IAllGatherV(ctx, c, s, r, k.counts, k.displs) }}
	case kGatherV:
		return &op{func() error { return comm.GatherV(ctx, c, s, r, k.counts, k.displs, k.root) },
			func() *comm.Request { return comm.IGatherV(ctx, c, s, r, k.counts, k.displs, k.root) }}
	case kScatterV:
		return &op{func() error { return comm.ScatterV(ctx, c, s, k.counts, k.displs, r, k.root) },
			func() *comm.Request { return comm.IScatterV(ctx, c, s, k.counts, k.displs, r, k.root) }}
	case kAllToAllV:
		return &op{func() error { return comm.AllToAllV(ctx, c, s, k.counts, k.displs, r, k.rcounts, k.rdispls) },
			func() *comm.Request { return comm.IAllToAllV(ctx, c, s, k.counts, k.displs, r, k.rcounts, k.rdispls) }}
	case kAllReduceLoc, kReduceLoc:
		sp, rp := pairs[T](k.send, k.sendLen), pairs[T](k.recv, k.recvLen)
		if k.kind == kAllReduceLoc {
			return &op{func() error { return comm.AllReduceLoc(ctx, c, sp, rp, k.op) },
				func() *comm.Request { return comm.IAllReduceLoc(ctx, c, sp, rp, k.op) }}
		}
		return &op{func() error { return comm.ReduceLoc(ctx, c, sp, rp, k.op, k.root) },
			func() *comm.Request { return comm.IReduceLoc(ctx, c, sp, rp, k.op, k.root) }}
	}
	return nil
}

func pairs[T comm.Number](p unsafe.Pointer, n int) []comm.ValueIndex[T] {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*comm.ValueIndex[T])(p), n)
}

// ints copies n size_t values from C (nil for NULL).
func ints(p *C.size_t, n int) []int {
	if p == nil {
		return nil
	}
	out := make([]int, n)
	for i, v := range unsafe.Slice(p, n) {
		out[i] = int(v)
	}
	return out
}

// vcall fills k's counts from C arrays of the communicator's size.
func vcall(h C.gorun_comm, k call, counts, displs, rcounts, rdispls *C.size_t) (call, C.int) {
	c, rc := lookup(h)
	if c == nil {
		return k, rc
	}
	n := c.Size()
	k.counts, k.displs = ints(counts, n), ints(displs, n)
	k.rcounts, k.rdispls = ints(rcounts, n), ints(rdispls, n)
	return k, statusOK
}

//export gorun_reduce
func gorun_reduce(h C.gorun_comm, send, recv unsafe.Pointer, n C.size_t, dt C.gorun_dtype, o C.gorun_op, root C.int) C.int {
	return run("gorun_reduce", h, dt, o, call{kind: kReduce, send: send, recv: recv, count: uint64(n), root: int(root)}, nil, false)
}

//export gorun_ireduce
func gorun_ireduce(h C.gorun_comm, send, recv unsafe.Pointer, n C.size_t, dt C.gorun_dtype, o C.gorun_op, root C.int, req *C.gorun_request) C.int {
	return run("gorun_ireduce", h, dt, o, call{kind: kReduce, send: send, recv: recv, count: uint64(n), root: int(root)}, req, true)
}

//export gorun_gather
func gorun_gather(h C.gorun_comm, send, recv unsafe.Pointer, n C.size_t, dt C.gorun_dtype, root C.int) C.int {
	return run("gorun_gather", h, dt, 0, call{kind: kGather, send: send, recv: recv, count: uint64(n), root: int(root)}, nil, false)
}

//export gorun_igather
func gorun_igather(h C.gorun_comm, send, recv unsafe.Pointer, n C.size_t, dt C.gorun_dtype, root C.int, req *C.gorun_request) C.int {
	return run("gorun_igather", h, dt, 0, call{kind: kGather, send: send, recv: recv, count: uint64(n), root: int(root)}, req, true)
}

//export gorun_scatter
func gorun_scatter(h C.gorun_comm, send, recv unsafe.Pointer, n C.size_t, dt C.gorun_dtype, root C.int) C.int {
	return run("gorun_scatter", h, dt, 0, call{kind: kScatter, send: send, recv: recv, count: uint64(n), root: int(root)}, nil, false)
}

//export gorun_iscatter
func gorun_iscatter(h C.gorun_comm, send, recv unsafe.Pointer, n C.size_t, dt C.gorun_dtype, root C.int, req *C.gorun_request) C.int {
	return run("gorun_iscatter", h, dt, 0, call{kind: kScatter, send: send, recv: recv, count: uint64(n), root: int(root)}, req, true)
}

//export gorun_alltoall
func gorun_alltoall(h C.gorun_comm, send, recv unsafe.Pointer, n C.size_t, dt C.gorun_dtype) C.int {
	return run("gorun_alltoall", h, dt, 0, call{kind: kAllToAll, send: send, recv: recv, count: uint64(n)}, nil, false)
}

//export gorun_ialltoall
func gorun_ialltoall(h C.gorun_comm, send, recv unsafe.Pointer, n C.size_t, dt C.gorun_dtype, req *C.gorun_request) C.int {
	return run("gorun_ialltoall", h, dt, 0, call{kind: kAllToAll, send: send, recv: recv, count: uint64(n)}, req, true)
}

//export gorun_scan
func gorun_scan(h C.gorun_comm, send, recv unsafe.Pointer, n C.size_t, dt C.gorun_dtype, o C.gorun_op) C.int {
	return run("gorun_scan", h, dt, o, call{kind: kScan, send: send, recv: recv, count: uint64(n)}, nil, false)
}

//export gorun_iscan
func gorun_iscan(h C.gorun_comm, send, recv unsafe.Pointer, n C.size_t, dt C.gorun_dtype, o C.gorun_op, req *C.gorun_request) C.int {
	return run("gorun_iscan", h, dt, o, call{kind: kScan, send: send, recv: recv, count: uint64(n)}, req, true)
}

//export gorun_exscan
func gorun_exscan(h C.gorun_comm, send, recv unsafe.Pointer, n C.size_t, dt C.gorun_dtype, o C.gorun_op) C.int {
	return run("gorun_exscan", h, dt, o, call{kind: kExScan, send: send, recv: recv, count: uint64(n)}, nil, false)
}

//export gorun_iexscan
func gorun_iexscan(h C.gorun_comm, send, recv unsafe.Pointer, n C.size_t, dt C.gorun_dtype, o C.gorun_op, req *C.gorun_request) C.int {
	return run("gorun_iexscan", h, dt, o, call{kind: kExScan, send: send, recv: recv, count: uint64(n)}, req, true)
}

//export gorun_send
func gorun_send(h C.gorun_comm, buf unsafe.Pointer, n C.size_t, dt C.gorun_dtype, dst, tag C.int) C.int {
	return run("gorun_send", h, dt, 0, call{kind: kSend, send: buf, count: uint64(n), root: int(dst), tag: int(tag)}, nil, false)
}

//export gorun_isend
func gorun_isend(h C.gorun_comm, buf unsafe.Pointer, n C.size_t, dt C.gorun_dtype, dst, tag C.int, req *C.gorun_request) C.int {
	return run("gorun_isend", h, dt, 0, call{kind: kSend, send: buf, count: uint64(n), root: int(dst), tag: int(tag)}, req, true)
}

//export gorun_recv
func gorun_recv(h C.gorun_comm, buf unsafe.Pointer, n C.size_t, dt C.gorun_dtype, src, tag C.int) C.int {
	return run("gorun_recv", h, dt, 0, call{kind: kRecv, recv: buf, count: uint64(n), root: int(src), tag: int(tag)}, nil, false)
}

//export gorun_irecv
func gorun_irecv(h C.gorun_comm, buf unsafe.Pointer, n C.size_t, dt C.gorun_dtype, src, tag C.int, req *C.gorun_request) C.int {
	return run("gorun_irecv", h, dt, 0, call{kind: kRecv, recv: buf, count: uint64(n), root: int(src), tag: int(tag)}, req, true)
}

func allGatherV(name string, h C.gorun_comm, send unsafe.Pointer, sn C.size_t, recv unsafe.Pointer, counts, displs *C.size_t, dt C.gorun_dtype, req *C.gorun_request, async bool) C.int {
	k, rc := vcall(h, call{kind: kAllGatherV, send: send, recv: recv, count: uint64(sn)}, counts, displs, nil, nil)
	if rc != statusOK {
		return rc
	}
	return run(name, h, dt, 0, k, req, async)
}

//export gorun_allgatherv
func gorun_allgatherv(h C.gorun_comm, send unsafe.Pointer, sn C.size_t, recv unsafe.Pointer, counts, displs *C.size_t, dt C.gorun_dtype) C.int {
	return allGatherV("gorun_allgatherv", h, send, sn, recv, counts, displs, dt, nil, false)
}

//export gorun_iallgatherv
func gorun_iallgatherv(h C.gorun_comm, send unsafe.Pointer, sn C.size_t, recv unsafe.Pointer, counts, displs *C.size_t, dt C.gorun_dtype, req *C.gorun_request) C.int {
	return allGatherV("gorun_iallgatherv", h, send, sn, recv, counts, displs, dt, req, true)
}

func gatherV(name string, h C.gorun_comm, send unsafe.Pointer, sn C.size_t, recv unsafe.Pointer, counts, displs *C.size_t, dt C.gorun_dtype, root C.int, req *C.gorun_request, async bool) C.int {
	k, rc := vcall(h, call{kind: kGatherV, send: send, recv: recv, count: uint64(sn), root: int(root)}, counts, displs, nil, nil)
	if rc != statusOK {
		return rc
	}
	return run(name, h, dt, 0, k, req, async)
}

//export gorun_gatherv
func gorun_gatherv(h C.gorun_comm, send unsafe.Pointer, sn C.size_t, recv unsafe.Pointer, counts, displs *C.size_t, dt C.gorun_dtype, root C.int) C.int {
	return gatherV("gorun_gatherv", h, send, sn, recv, counts, displs, dt, root, nil, false)
}

//export gorun_igatherv
func gorun_igatherv(h C.gorun_comm, send unsafe.Pointer, sn C.size_t, recv unsafe.Pointer, counts, displs *C.size_t, dt C.gorun_dtype, root C.int, req *C.gorun_request) C.int {
	return gatherV("gorun_igatherv", h, send, sn, recv, counts, displs, dt, root, req, true)
}

func scatterV(name string, h C.gorun_comm, send unsafe.Pointer, counts, displs *C.size_t, recv unsafe.Pointer, rn C.size_t, dt C.gorun_dtype, root C.int, req *C.gorun_request, async bool) C.int {
	k, rc := vcall(h, call{kind: kScatterV, send: send, recv: recv, count: uint64(rn), root: int(root)}, counts, displs, nil, nil)
	if rc != statusOK {
		return rc
	}
	return run(name, h, dt, 0, k, req, async)
}

//export gorun_scatterv
func gorun_scatterv(h C.gorun_comm, send unsafe.Pointer, counts, displs *C.size_t, recv unsafe.Pointer, rn C.size_t, dt C.gorun_dtype, root C.int) C.int {
	return scatterV("gorun_scatterv", h, send, counts, displs, recv, rn, dt, root, nil, false)
}

//export gorun_iscatterv
func gorun_iscatterv(h C.gorun_comm, send unsafe.Pointer, counts, displs *C.size_t, recv unsafe.Pointer, rn C.size_t, dt C.gorun_dtype, root C.int, req *C.gorun_request) C.int {
	return scatterV("gorun_iscatterv", h, send, counts, displs, recv, rn, dt, root, req, true)
}

func allToAllV(name string, h C.gorun_comm, send unsafe.Pointer, sc, sd *C.size_t, recv unsafe.Pointer, rcs, rd *C.size_t, dt C.gorun_dtype, req *C.gorun_request, async bool) C.int {
	k, rc := vcall(h, call{kind: kAllToAllV, send: send, recv: recv}, sc, sd, rcs, rd)
	if rc != statusOK {
		return rc
	}
	return run(name, h, dt, 0, k, req, async)
}

//export gorun_alltoallv
func gorun_alltoallv(h C.gorun_comm, send unsafe.Pointer, sc, sd *C.size_t, recv unsafe.Pointer, rcs, rd *C.size_t, dt C.gorun_dtype) C.int {
	return allToAllV("gorun_alltoallv", h, send, sc, sd, recv, rcs, rd, dt, nil, false)
}

//export gorun_ialltoallv
func gorun_ialltoallv(h C.gorun_comm, send unsafe.Pointer, sc, sd *C.size_t, recv unsafe.Pointer, rcs, rd *C.size_t, dt C.gorun_dtype, req *C.gorun_request) C.int {
	return allToAllV("gorun_ialltoallv", h, send, sc, sd, recv, rcs, rd, dt, req, true)
}

//export gorun_allreduce_loc
func gorun_allreduce_loc(h C.gorun_comm, send, recv unsafe.Pointer, n C.size_t, dt C.gorun_dtype, o C.gorun_op) C.int {
	return run("gorun_allreduce_loc", h, dt, o, call{kind: kAllReduceLoc, send: send, recv: recv, count: uint64(n)}, nil, false)
}

//export gorun_reduce_loc
func gorun_reduce_loc(h C.gorun_comm, send, recv unsafe.Pointer, n C.size_t, dt C.gorun_dtype, o C.gorun_op, root C.int) C.int {
	return run("gorun_reduce_loc", h, dt, o, call{kind: kReduceLoc, send: send, recv: recv, count: uint64(n), root: int(root)}, nil, false)
}

//export gorun_ibarrier
func gorun_ibarrier(h C.gorun_comm, req *C.gorun_request) (rc C.int) {
	defer guard(&rc)
	c, rc := lookup(h)
	if c == nil {
		return rc
	}
	if req == nil {
		return refuse(c, "gorun_ibarrier", errors.New("req is NULL"))
	}
	ctx, cancel := opContext()
	*req = C.gorun_request(put(pendings, &pending{req: c.IBarrier(ctx), cancel: cancel, c: c}))
	return statusOK
}

//export gorun_iallreduce_loc
func gorun_iallreduce_loc(h C.gorun_comm, send, recv unsafe.Pointer, n C.size_t, dt C.gorun_dtype, o C.gorun_op, req *C.gorun_request) C.int {
	return run("gorun_iallreduce_loc", h, dt, o, call{kind: kAllReduceLoc, send: send, recv: recv, count: uint64(n)}, req, true)
}

//export gorun_ireduce_loc
func gorun_ireduce_loc(h C.gorun_comm, send, recv unsafe.Pointer, n C.size_t, dt C.gorun_dtype, o C.gorun_op, root C.int, req *C.gorun_request) C.int {
	return run("gorun_ireduce_loc", h, dt, o, call{kind: kReduceLoc, send: send, recv: recv, count: uint64(n), root: int(root)}, req, true)
}
