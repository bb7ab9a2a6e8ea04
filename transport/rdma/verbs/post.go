//go:build linux && cgo && rdma

package verbs

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// maxMsg is the longest message a request may carry: 2^31 - 1 bytes,
// within the InfiniBand limit (2^31) and what rxe takes (a receive of
// 2^31 bytes fails there with a length error). Longer lists overflow the
// 32-bit lengths of ibv_sge and of the work request, and the device moves
// fewer bytes (2^32: none) and completes with success; a longer receive
// is cut to maxMsg. A port's max_msg_sz may be smaller (mlx5: 1 GiB), and
// such a device fails a longer request in its completion; rxe reports
// 8 MiB but carries up to this.
const maxMsg = 1<<31 - 1

// checkLocal is soft.CheckLocal for NIC-issued keys: each non-empty buffer
// must lie inside a valid MR of this device with access need, unless the
// request is inline and fits MaxInline. The NIC would catch the same faults
// only at execution time, as a completion; the contract wants them at post
// time. It returns the total length. A read's list is held to the
// device's max_sge_rd, every other list to its max_sge.
func (c *conn) checkLocal(op int, sgl []rdma.SGE, need rdma.Access, inline bool) (int, error) {
	if op == opRead && len(sgl) > c.maxRdSGE {
		return 0, fmt.Errorf("%w: a read of %d entries; the device reads into at most %d (max_sge_rd)",
			rdma.ErrInvalid, len(sgl), c.maxRdSGE)
	}
	if len(sgl) > c.maxSGE {
		return 0, fmt.Errorf("%w: %d entries; the device takes at most %d (max_sge)", rdma.ErrInvalid, len(sgl), c.maxSGE)
	}
	total := 0
	for _, s := range sgl {
		total += len(s.Buf)
	}
	if inline {
		if total > c.maxInline {
			return 0, rdma.ErrInvalid
		}
		return total, nil
	}
	for _, s := range sgl {
		if len(s.Buf) == 0 {
			continue
		}
		if s.MR == nil || s.MR.Owner() != c.d || !s.MR.Valid() || !s.MR.Covers(s.Buf) {
			return 0, rdma.ErrNotRegistered
		}
		if s.MR.Access()&need != need {
			return 0, rdma.ErrAccess
		}
	}
	return total, nil
}

// post checks, records and posts one work request. The queue's lock makes
// the slot order the hardware order.
func (c *conn) post(op int, wrid uint64, sgl []rdma.SGE, flags rdma.Flags, raddr uint64, rkey uint32, imm uint32) error {
	q := c.send
	var need rdma.Access
	wcOp := rdma.OpSend
	switch op {
	case opRecv:
		q, need, wcOp = c.recv, rdma.AccessLocalWrite, rdma.OpRecv
		flags &^= rdma.FlagInline
	case opRead:
		need, wcOp = rdma.AccessLocalWrite, rdma.OpRead
		flags &^= rdma.FlagInline
	case opWrite, opWriteImm:
		wcOp = rdma.OpWrite
	}
	inline := flags&rdma.FlagInline != 0
	total, err := c.checkLocal(op, sgl, need, inline)
	if err == nil && op != opRecv && total > maxMsg {
		err = rdma.ErrInvalid
	}
	if err != nil {
		return c.opErr(postNames[op], err)
	}

	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return c.opErr(postNames[op], rdma.ErrClosed)
	}
	// Completions polled but not yet handed out hold room in the CQ as
	// CQEs the device holds do: so cq.ready is bounded (see there).
	cq := q.cq
	if q.outstanding() >= len(q.slots) || cq.inflight+cq.readyLen() >= cq.depth {
		cq.pollLocked() // reap completions (internal ones too) to make room
		if q.outstanding() >= len(q.slots) || cq.inflight+cq.readyLen() >= cq.depth {
			return c.opErr(postNames[op], rdma.ErrQueueFull)
		}
	}
	seq := q.tail
	s := &q.slots[seq%uint64(len(q.slots))]
	s.wrid, s.op, s.user = wrid, wcOp, op == opRecv || flags&rdma.FlagSignaled != 0
	w := q.wr
	w.wr_id = C.uint64_t(q.idx | seq&wrSeqMask)
	w.opcode = C.int(op)
	w.remote_addr = C.uint64_t(raddr)
	w.rkey = C.uint32_t(rkey)
	w.imm = C.uint32_t(imm)
	hw := C.int(0)
	if flags&rdma.FlagFence != 0 {
		hw |= C.IBV_SEND_FENCE
	}
	n := 0
	if inline {
		hw |= C.IBV_SEND_INLINE
		dst := unsafe.Slice((*byte)(unsafe.Pointer(&w.inline_buf[0])), C.GORUN_INLINE_BUF)
		off := 0
		for _, e := range sgl {
			off += copy(dst[off:], e.Buf)
		}
		if off > 0 {
			w.sge[0].addr = C.uint64_t(uintptr(unsafe.Pointer(&w.inline_buf[0])))
			w.sge[0].length = C.uint32_t(off)
			w.sge[0].lkey = 0
			n = 1
		}
	} else {
		// A receive longer than any message is given as one of maxMsg
		// bytes (its rest is never written); its lengths would wrap.
		// Requests of the send queue are no longer than that.
		left := maxMsg
		for _, e := range sgl {
			ln := min(len(e.Buf), left)
			if ln == 0 {
				continue
			}
			left -= ln
			if !e.MR.Acquire() {
				releaseSlot(s)
				return c.opErr(postNames[op], rdma.ErrNotRegistered)
			}
			if s.mr0 == nil {
				s.mr0 = e.MR
			} else {
				s.mrMore = append(s.mrMore, e.MR)
			}
			w.sge[n].addr = C.uint64_t(rdma.AddrOf(e.Buf))
			w.sge[n].length = C.uint32_t(ln)
			w.sge[n].lkey = C.uint32_t(e.MR.LKey())
			n++
		}
	}
	w.nsge = C.int(n)
	if op != opRecv {
		if s.user {
			hw |= C.IBV_SEND_SIGNALED
			q.sinceSignal = 0
		} else if q.sinceSignal++; q.sinceSignal >= q.signalEvery {
			hw |= C.IBV_SEND_SIGNALED // internal: drains the send queue
			q.sinceSignal = 0
		}
	}
	w.flags = hw
	// In the error state the request is not given to the device (which
	// would flush it, or, rxe before 6.3, drop a receive) but stays
	// outstanding, flushed in order: at once if nothing is outstanding
	// before it, else with the rest after flushGrace. Likewise if the
	// device refuses posts to a QP in error.
	if !c.failed() {
		if r, err := C.gorun_post(c.id, w); r == 0 {
			s.hw = true
			q.tail++
			cq.inflight++
			return nil
		} else if !c.failed() {
			releaseSlot(s)
			return c.opErr(postNames[op], postErrnoErr(err))
		}
	}
	q.tail++
	cq.inflight++
	if q.outstanding() == 1 {
		q.flushLocked()
	} else {
		q.startGrace()
	}
	return nil
}
