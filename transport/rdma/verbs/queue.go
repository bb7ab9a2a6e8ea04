//go:build linux && cgo && rdma

package verbs

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// flushGrace is how long a connection in the error state may keep requests
// outstanding without a completion before the provider flushes them itself.
// Spec-conforming devices flush at once; rxe before Linux 6.3 drops posted
// receives of a QP in error without completing them.
const flushGrace = 100 * time.Millisecond

// spinPolls is how many empty polls a waiter on a private CQ makes
// (yielding in between) before it arms the CQ and sleeps.
const spinPolls = 32

// slot is an outstanding work request. Requests complete in post order, so
// the completion of request seq also completes every earlier unsignaled one.
type slot struct {
	wrid   uint64
	op     rdma.Opcode
	user   bool // the caller asked for a completion (always, for receives)
	hw     bool // given to the device (not posted in the error state)
	mr0    *rdma.MR
	mrMore []*rdma.MR
}

// queue is one side of a connection (send or receive) bound to a CQ, its
// own or a shared one: its outstanding requests, in post order. Its state
// is guarded by its CQ's mutex (mu), which posts and polls hold.
type queue struct {
	c    *conn
	recv bool
	cq   *cq
	mu   *sync.Mutex // &cq.mu
	idx  uint64      // binding index in cq, shifted into place for wr_id
	// qpNum is the QP's number once it exists (0 before: no RC QP has it);
	// a completion for this binding index with another number is stale.
	qpNum uint32
	wr    *C.struct_gorun_wr // scratch work request (C memory)

	// grace flushes the queue flushGrace after its connection failed, if
	// the device has not (see flushGrace); gracePending is set while it
	// is scheduled.
	grace        *time.Timer
	gracePending atomic.Bool

	slots      []slot
	head, tail uint64 // oldest outstanding seq, next seq
	// late counts requests the provider flushed (flushLocked) after giving
	// them to the device, which may still complete them: each keeps its
	// CQE counted in cq.inflight until the device's completion comes, or
	// until the QP is destroyed and the CQ drained of it (unbind). Freed
	// at the flush, the room was promised to other queues of a shared CQ
	// while the CQEs could still come, and an ibv_cq that overruns fails.
	late        int
	sinceSignal int
	signalEvery int
	closed      bool
	lastErr     time.Time // last error completion from the device
}

func newQueue(c *conn, recv bool, q *cq, depth int) (*queue, error) {
	qu := &queue{c: c, recv: recv, cq: q, mu: &q.mu, slots: make([]slot, depth),
		signalEvery: max(depth/4, 1)}
	q.mu.Lock()
	idx, err := q.bindLocked(qu)
	q.mu.Unlock()
	if err != nil {
		return nil, err
	}
	qu.idx = idx << wrIdxShift
	qu.grace = time.AfterFunc(time.Hour, qu.graceFire)
	qu.grace.Stop()
	qu.wr = (*C.struct_gorun_wr)(C.calloc(1, C.size_t(unsafe.Sizeof(C.struct_gorun_wr{}))))
	return qu, nil
}

func (q *queue) outstanding() int { return int(q.tail - q.head) }

func releaseSlot(s *slot) {
	if s.mr0 != nil {
		s.mr0.Release()
	}
	for _, m := range s.mrMore {
		m.Release()
	}
	*s = slot{mrMore: s.mrMore[:0]}
}

// retire takes the slot at head (under mu); the caller settles its CQE in
// cq.inflight.
func (q *queue) retire() *slot {
	s := &q.slots[q.head%uint64(len(q.slots))]
	q.head++
	return s
}

// complete accounts a device completion to its requests and reports
// whether the caller gets a WC for it (written to out). Under mu.
func (q *queue) complete(w *C.struct_gorun_wc, out *rdma.WC) bool {
	seq := q.head + (uint64(w.wr_id)-q.head)&wrSeqMask
	if seq >= q.tail {
		// Already flushed by the provider: the CQE it was counted for
		// has come.
		if q.late > 0 {
			q.late--
			q.cq.inflight--
		}
		return false
	}
	for q.head < seq { // earlier unsignaled requests: done, successfully
		releaseSlot(q.retire())
		q.cq.inflight--
	}
	s := q.retire()
	q.cq.inflight--
	defer releaseSlot(s)
	st := mapStatus(uint32(w.status))
	if q.recv && w.status == C.IBV_WC_LOC_QP_OP_ERR {
		// rxe reports a receive too small for the incoming message this
		// way (mlx5 says IBV_WC_LOC_LEN_ERR).
		st = rdma.StatusLocalLengthError
	}
	if st != rdma.StatusSuccess {
		q.lastErr = time.Now()
		if st == rdma.StatusRemoteAccessError {
			q.c.d.counts.access.Add(1) // counters.go
		}
		if st != rdma.StatusFlushed || !q.c.failed() {
			q.c.fail(fmt.Errorf("%w (ibv_wc_status %d %s, vendor_err %#x)",
				&rdma.WCError{WC: rdma.WC{WRID: s.wrid, Status: st, Opcode: s.op}},
				int(w.status), C.GoString(C.ibv_wc_status_str(uint32(w.status))), uint32(w.vendor_err)))
		}
	} else if !s.user {
		return false
	}
	*out = rdma.WC{WRID: s.wrid, Status: st, Opcode: s.op}
	if q.recv && st == rdma.StatusSuccess {
		out.ByteLen = int(w.byte_len)
		if w.opcode == C.IBV_WC_RECV_RDMA_WITH_IMM {
			out.Opcode = rdma.OpRecvWriteImm
		}
		if w.has_imm != 0 {
			out.HasImm, out.Imm = true, uint32(w.imm)
		}
	}
	return true
}

func mapStatus(s uint32) rdma.Status {
	switch s {
	case C.IBV_WC_SUCCESS:
		return rdma.StatusSuccess
	case C.IBV_WC_LOC_LEN_ERR:
		return rdma.StatusLocalLengthError
	case C.IBV_WC_LOC_PROT_ERR:
		return rdma.StatusLocalProtectionError
	case C.IBV_WC_REM_ACCESS_ERR:
		return rdma.StatusRemoteAccessError
	case C.IBV_WC_REM_INV_REQ_ERR, C.IBV_WC_REM_OP_ERR:
		return rdma.StatusRemoteInvalidRequest
	case C.IBV_WC_RNR_RETRY_EXC_ERR:
		return rdma.StatusRNRRetryExceeded
	case C.IBV_WC_RETRY_EXC_ERR:
		return rdma.StatusRetryExceeded
	case C.IBV_WC_WR_FLUSH_ERR:
		return rdma.StatusFlushed
	}
	return rdma.StatusFatal
}

// flushLocked completes every outstanding request as flushed, in order,
// as the QP's error state promises; a late device flush of the same
// request is then ignored by complete.
func (q *queue) flushLocked() {
	for q.head < q.tail {
		s := q.retire()
		if s.hw {
			q.late++ // the device may complete it yet
		} else {
			q.cq.inflight--
		}
		q.cq.push(rdma.WC{WRID: s.wrid, Status: rdma.StatusFlushed, Opcode: s.op})
		releaseSlot(s)
	}
}

// startGrace schedules graceFire unless it is already scheduled. It takes
// no lock: fail calls it from inside a poll.
func (q *queue) startGrace() {
	if q.gracePending.CompareAndSwap(false, true) {
		q.grace.Reset(flushGrace)
	}
}

// graceFire flushes what the device left outstanding flushGrace after the
// connection failed: first it collects what the device did complete, and
// it waits longer while the device is still flushing.
func (q *queue) graceFire() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.gracePending.Store(false)
	if q.closed || q.outstanding() == 0 {
		return
	}
	q.cq.pollLocked()
	if q.outstanding() == 0 {
		return
	}
	if d := time.Since(q.lastErr); d < flushGrace {
		q.gracePending.Store(true)
		q.grace.Reset(flushGrace - d)
		return
	}
	q.flushLocked()
}

// get returns the next completion of a private CQ: polled for a while,
// then (armed) waited for through the waker. A queue bound to a shared CQ
// waits for that CQ's next completion instead (rdma.WaitComp).
func (q *queue) get(ctx context.Context, op string) (rdma.WC, error) {
	if q.cq.shared {
		wc, err := q.cq.wait(ctx)
		if err != nil {
			return wc, q.c.opErr(op, err)
		}
		return wc, nil
	}
	var wc [1]rdma.WC
	spins := 0
	for {
		q.mu.Lock()
		n := q.cq.popInto(wc[:])
		if n == 0 {
			q.cq.pollLocked() // a batch, so the next calls need no cgo call
			n = q.cq.popInto(wc[:])
		}
		if n == 0 && spins >= spinPolls && !q.closed {
			// Arm, then poll once more: a completion that arrived
			// before the arm raises no event.
			q.cq.armLocked()
			q.cq.pollLocked()
			n = q.cq.popInto(wc[:])
		}
		closed, gone := q.closed, q.outstanding() == 0 && (q.c.peerGone.Load() || q.c.hwErr.Load() != nil)
		q.mu.Unlock()
		switch {
		case n == 1:
			return wc[0], nil
		case closed:
			return rdma.WC{}, q.c.opErr(op, rdma.ErrClosed)
		case gone: // the QP is in the error state with nothing left to flush
			return rdma.WC{}, q.c.opErr(op, q.c.goneErr())
		}
		if err := ctx.Err(); err != nil {
			return rdma.WC{}, q.c.opErr(op, err)
		}
		if spins < spinPolls {
			spins++
			runtime.Gosched()
			continue
		}
		if e := q.cq.broken.Load(); e != nil {
			return rdma.WC{}, q.c.opErr(op, *e)
		}
		select {
		case <-q.cq.notify:
		case <-ctx.Done():
			return rdma.WC{}, q.c.opErr(op, ctx.Err())
		}
		spins = spinPolls / 2
	}
}

// close flushes the outstanding requests after collecting what the device
// completed (a private queue's get returns them, then ErrClosed).
func (q *queue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	q.cq.pollLocked()
	q.closed = true
	q.flushLocked()
	q.grace.Stop()
	if !q.cq.shared {
		q.cq.token() // wake get
	}
}

// unbind leaves the CQ once the QP is destroyed: the device's last
// completions for it are drained first (and dropped), so none can be taken
// for another QP's later, and only then is the room of the requests it
// never completed (late) given back. A private CQ is destroyed with it.
func (q *queue) unbind() {
	q.mu.Lock()
	q.cq.pollLocked()
	q.cq.inflight -= q.late
	q.late = 0
	q.cq.unbindLocked(q.idx >> wrIdxShift)
	q.mu.Unlock()
	C.free(unsafe.Pointer(q.wr))
	q.wr = nil
}
