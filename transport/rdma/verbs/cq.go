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
	"syscall"
	"time"
	"unsafe"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// flushGrace is how long a connection in the error state may keep requests
// outstanding without a completion before the provider flushes them itself.
// Spec-conforming devices flush at once; rxe before Linux 6.3 drops posted
// receives of a QP in error without completing them.
const flushGrace = 100 * time.Millisecond

// spinPolls is how many empty polls a waiter makes (yielding in between)
// before it arms the CQ and sleeps in the netpoller.
const spinPolls = 32

// slot is an outstanding work request. Requests complete in post order, so
// the completion of request seq also completes every earlier unsignaled one.
type slot struct {
	wrid   uint64
	op     rdma.Opcode
	user   bool // the caller asked for a completion (always, for receives)
	mr0    *rdma.MR
	mrMore []*rdma.MR
}

// queue is one side of a connection (send or receive): its CQ, completion
// channel, outstanding requests and completions not yet returned. Posting
// and polling are serialised by mu; waiting is not.
type queue struct {
	c    *conn
	recv bool
	cq   *C.struct_ibv_cq
	ch   *C.struct_ibv_comp_channel
	w    *fdWaiter
	wr   *C.struct_gorun_wr // scratch work request (C memory)

	// The waker goroutine sleeps on the completion channel in the
	// netpoller and signals wake; waiters select on wake, done and their
	// context, which allocates nothing.
	wake      chan struct{}
	done      chan struct{} // closed by close
	wakerDone chan struct{}
	chanErr   atomic.Pointer[error] // the completion channel failed
	wcs       *C.struct_gorun_wc    // poll buffer (C memory)

	mu          sync.Mutex
	slots       []slot
	head, tail  uint64 // oldest outstanding seq, next seq
	ready       []rdma.WC
	readyHead   int
	sinceSignal int
	signalEvery int
	closed      bool
	lastErr     time.Time // last error completion; see flushGrace
	errSeen     time.Time // when get first saw the connection in error with requests outstanding
}

func newQueue(c *conn, recv bool, cq *C.struct_ibv_cq, ch *C.struct_ibv_comp_channel, depth int) (*queue, error) {
	w, err := newFDWaiter(int(ch.fd), "ibv_comp_channel")
	if err != nil {
		return nil, err
	}
	q := &queue{c: c, recv: recv, cq: cq, ch: ch, w: w, slots: make([]slot, depth),
		signalEvery: max(depth/4, 1), wake: make(chan struct{}, 1), done: make(chan struct{}),
		wakerDone: make(chan struct{})}
	q.wr = (*C.struct_gorun_wr)(C.calloc(1, C.size_t(unsafe.Sizeof(C.struct_gorun_wr{}))))
	q.wcs = (*C.struct_gorun_wc)(C.calloc(C.GORUN_POLL_BATCH, C.size_t(unsafe.Sizeof(C.struct_gorun_wc{}))))
	go q.waker()
	return q, nil
}

// waker reads completion events (ibv_get_cq_event, acked at once) as the
// netpoller reports the channel readable, and wakes the waiter.
func (q *queue) waker() {
	defer close(q.wakerDone)
	var cerr error
	try := func(uintptr) bool {
		r, err := C.gorun_get_cq_event(q.ch)
		if r == 0 {
			return true
		}
		if err == syscall.EAGAIN || err == syscall.EINTR {
			return false
		}
		cerr = err
		return true
	}
	for {
		if err := q.w.raw.Read(try); err != nil {
			return // closed
		}
		if cerr != nil {
			err := errnoErr(cerr)
			q.chanErr.Store(&err)
			q.kick()
			return
		}
		q.kick()
	}
}

// kick wakes the waiter (or the next one) to re-check the queue.
func (q *queue) kick() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// free releases C memory; the CQ itself belongs to the conn's gorun_qp.
func (q *queue) free() {
	C.free(unsafe.Pointer(q.wr))
	C.free(unsafe.Pointer(q.wcs))
	q.wr, q.wcs = nil, nil
}

func (q *queue) outstanding() int { return int(q.tail - q.head) }

func (q *queue) push(wc rdma.WC) { q.ready = append(q.ready, wc) }

func (q *queue) pop() (rdma.WC, bool) {
	if q.readyHead == len(q.ready) {
		return rdma.WC{}, false
	}
	wc := q.ready[q.readyHead]
	q.readyHead++
	if q.readyHead == len(q.ready) {
		q.ready, q.readyHead = q.ready[:0], 0
	}
	return wc, true
}

func releaseSlot(s *slot) {
	if s.mr0 != nil {
		s.mr0.Release()
	}
	for _, m := range s.mrMore {
		m.Release()
	}
	*s = slot{mrMore: s.mrMore[:0]}
}

// pollLocked moves the CQ's completions into ready and frees their slots.
func (q *queue) pollLocked() int {
	total := 0
	for {
		n := int(C.gorun_poll(q.cq, q.wcs))
		if n <= 0 {
			return total
		}
		total += n
		wcs := unsafe.Slice(q.wcs, n)
		for i := range wcs {
			q.complete(&wcs[i])
		}
		if n < C.GORUN_POLL_BATCH {
			return total
		}
	}
}

func (q *queue) complete(w *C.struct_gorun_wc) {
	seq := uint64(w.wr_id)
	if seq < q.head || seq >= q.tail {
		return // not ours (cannot happen) or already flushed
	}
	for q.head < seq { // earlier unsignaled requests: done, successfully
		releaseSlot(&q.slots[q.head%uint64(len(q.slots))])
		q.head++
	}
	s := &q.slots[seq%uint64(len(q.slots))]
	st := mapStatus(uint32(w.status))
	if q.recv && w.status == C.IBV_WC_LOC_QP_OP_ERR {
		// rxe reports a receive too small for the incoming message this
		// way (mlx5 says IBV_WC_LOC_LEN_ERR).
		st = rdma.StatusLocalLengthError
	}
	if s.user || st != rdma.StatusSuccess {
		wc := rdma.WC{WRID: s.wrid, Status: st, Opcode: s.op}
		if q.recv && st == rdma.StatusSuccess {
			wc.ByteLen = int(w.byte_len)
			if w.opcode == C.IBV_WC_RECV_RDMA_WITH_IMM {
				wc.Opcode = rdma.OpRecvWriteImm
			}
			if w.has_imm != 0 {
				wc.HasImm, wc.Imm = true, uint32(w.imm)
			}
		}
		q.push(wc)
	}
	if st != rdma.StatusSuccess {
		if st != rdma.StatusFlushed || q.c.Err() == nil {
			q.c.fail(fmt.Errorf("%w (ibv_wc_status %d %s, vendor_err %#x)",
				&rdma.WCError{WC: rdma.WC{WRID: s.wrid, Status: st, Opcode: s.op}},
				int(w.status), C.GoString(C.ibv_wc_status_str(uint32(w.status))), uint32(w.vendor_err)))
		}
		q.lastErr = time.Now()
	}
	releaseSlot(s)
	q.head++
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

// get returns the next completion: polled for a while, then (armed)
// waited for through the waker.
func (q *queue) get(ctx context.Context, op string) (rdma.WC, error) {
	spins := 0
	for {
		q.mu.Lock()
		if wc, ok := q.pop(); ok {
			q.mu.Unlock()
			return wc, nil
		}
		if q.closed {
			q.mu.Unlock()
			return rdma.WC{}, q.c.opErr(op, rdma.ErrClosed)
		}
		if q.outstanding() > 0 {
			q.pollLocked()
			if wc, ok := q.pop(); ok {
				q.mu.Unlock()
				return wc, nil
			}
		}
		if q.outstanding() > 0 && q.c.Err() != nil {
			now := time.Now()
			if q.errSeen.IsZero() || q.lastErr.After(q.errSeen) {
				q.errSeen = now
			} else if now.Sub(q.errSeen) > flushGrace {
				q.flushLocked()
				q.errSeen = time.Time{}
			}
		}
		if wc, ok := q.pop(); ok {
			q.mu.Unlock()
			return wc, nil
		}
		if q.outstanding() == 0 && q.c.peerGone.Load() {
			// the QP is in the error state with nothing left to flush
			q.mu.Unlock()
			return rdma.WC{}, q.c.opErr(op, errPeerClosed)
		}
		if spins < spinPolls {
			spins++
			q.mu.Unlock()
			if err := ctx.Err(); err != nil {
				return rdma.WC{}, q.c.opErr(op, err)
			}
			runtime.Gosched()
			continue
		}
		// Arm, then poll once more: a completion that arrived before the
		// arm raises no event.
		C.ibv_req_notify_cq(q.cq, 0)
		q.pollLocked()
		if wc, ok := q.pop(); ok {
			q.mu.Unlock()
			return wc, nil
		}
		inErr := q.outstanding() > 0 && q.c.Err() != nil
		q.mu.Unlock()
		if e := q.chanErr.Load(); e != nil {
			return rdma.WC{}, q.c.opErr(op, *e)
		}
		var grace <-chan time.Time
		var t *time.Timer
		if inErr {
			t = time.NewTimer(flushGrace / 2)
			grace = t.C
		}
		select {
		case <-q.wake:
		case <-q.done:
		case <-grace:
		case <-ctx.Done():
			if t != nil {
				t.Stop()
			}
			return rdma.WC{}, q.c.opErr(op, ctx.Err())
		}
		if t != nil {
			t.Stop()
		}
		spins = spinPolls / 2
	}
}

// flushLocked completes every outstanding request as flushed, as the QP's
// error state promises; a late hardware flush of the same request is then
// ignored by complete.
func (q *queue) flushLocked() {
	for q.head < q.tail {
		s := &q.slots[q.head%uint64(len(q.slots))]
		q.push(rdma.WC{WRID: s.wrid, Status: rdma.StatusFlushed, Opcode: s.op})
		releaseSlot(s)
		q.head++
	}
}

// close flushes the outstanding requests (get returns them, then
// ErrClosed) and waits until no waiter is inside C.
func (q *queue) close() {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	q.closed = true
	q.flushLocked()
	q.mu.Unlock()
	close(q.done)
	q.w.close() // returns once the waker is out of C
	<-q.wakerDone
}
