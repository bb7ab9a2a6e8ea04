//go:build linux && cgo && rdma

package verbs

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// A request's wr_id is its queue's binding index in the CQ (bits 48-62)
// and its sequence number in that queue (bits 0-47).
const (
	wrIdxShift = 48
	wrSeqMask  = 1<<wrIdxShift - 1
	maxBound   = 1 << 15 // queues bound to one CQ
)

// cqDepthFactor sizes a shared CQ by default: room for the send and
// receive queues of this many connections (Device.CreateCQ(0)).
const cqDepthFactor = 4

// cq is one ibv_cq with its own completion channel: a connection's private
// queue (read by queue.get) or a shared rdma.CQ from Device.CreateCQ.
// Requests are accounted to the queue they were posted on: a polled
// completion finds its queue by the binding index in its wr_id, checked
// against the completion's qp_num.
type cq struct {
	d      *device
	shared bool
	depth  int // CQEs the ibv_cq holds
	ch     *C.struct_ibv_comp_channel
	w      *fdWaiter
	wcs    *C.struct_gorun_wc // poll buffer (C memory, GORUN_POLL_BATCH)

	// The waker goroutine sleeps on the completion channel in the netpoller
	// and sends a token on notify for each event; events come only after
	// an arm (ibv_req_notify_cq), so it runs only on the sleep path.
	notify    chan struct{}
	done      chan struct{} // closed by Close or a CQ error (shared CQs): waiters return
	doneOnce  sync.Once
	wakerDone chan struct{}
	asyncTok  uint64                // cq_context: names the CQ in asynchronous events (async.go)
	armed     atomic.Bool           // a token is owed for the next completion
	broken    atomic.Pointer[error] // the completion channel failed

	// mu guards the fields below and the state of every bound queue
	// (posts on a bound queue hold it).
	mu       sync.Mutex
	hw       *C.struct_ibv_cq // nil once destroyed
	queues   []*queue         // by binding index; nil: free
	nbound   int
	inflight int // requests outstanding on bound queues, and their late ones: CQEs to come, at most
	// ready is a ring (readyN from readyHead) of completions polled
	// from the device or made by the provider (flushes) and not yet
	// handed out. Each holds room in the CQ as a CQE in the device does:
	// post refuses when inflight+readyLen reaches depth, so the ring,
	// made with depth slots, never fills. (A flush of a request the
	// device held puts its WC here while its CQE stays counted in
	// inflight as late: such WCs are at most the late count, and the
	// other WCs here plus inflight stay within depth.) push grows the
	// ring rather than drop a completion, should that ever be wrong.
	ready     []rdma.WC
	readyHead int
	readyN    int
	closed    bool
	failErr   error // IBV_EVENT_CQ_ERR or a fatal device error (async.go)
	failShown bool  // failErr's flushes are in ready: Err reports it
}

func (d *device) newCQ(depth int, shared bool) (*cq, error) {
	q := &cq{d: d, shared: shared, depth: depth, notify: make(chan struct{}, 1),
		done: make(chan struct{}), wakerDone: make(chan struct{})}
	q.asyncTok = addAsyncTarget(q)
	if r, err := C.gorun_create_cq(d.ctx, C.int(depth), C.uint64_t(q.asyncTok), &q.hw, &q.ch); r != 0 {
		dropAsyncTarget(q.asyncTok)
		return nil, errnoErr(err)
	}
	w, err := newFDWaiter(int(q.ch.fd), "ibv_comp_channel")
	if err != nil {
		dropAsyncTarget(q.asyncTok)
		C.gorun_destroy_cq(q.hw, q.ch)
		return nil, err
	}
	q.w = w
	if n := int(q.hw.cqe); n < q.depth {
		q.depth = n
	}
	q.wcs = (*C.struct_gorun_wc)(C.calloc(C.GORUN_POLL_BATCH, C.size_t(unsafe.Sizeof(C.struct_gorun_wc{}))))
	q.ready = make([]rdma.WC, q.depth)
	go q.waker()
	return q, nil
}

// CreateCQ implements rdma.Device: an ibv_cq of depth CQEs (default: the
// queues of cqDepthFactor connections), at most the device's max_cqe.
func (d *device) CreateCQ(depth int) (rdma.CQ, error) {
	if depth < 0 {
		return nil, opErr("create_cq", rdma.ErrInvalid)
	}
	if depth == 0 {
		depth = cqDepthFactor * (d.cfg.SendQueueDepth + d.cfg.RecvQueueDepth)
	}
	depth = min(depth, d.maxCQE)
	if err := d.refuse("create_cq"); err != nil {
		return nil, err
	}
	// ibv_create_cq runs outside d.mu, counted in d.pending as a
	// registration is (register).
	if !d.begin() {
		return nil, opErr("create_cq", rdma.ErrClosed)
	}
	defer d.pending.Done()
	if testHookCreateCQ != nil {
		testHookCreateCQ(depth)
	}
	q, err := d.newCQ(depth, true)
	if err != nil {
		return nil, opErr("create_cq", err)
	}
	if testHookCQCreated != nil {
		testHookCQCreated(depth)
	}
	d.mu.Lock()
	if p := d.fatal.Load(); d.closed || p != nil {
		// Close began during ibv_create_cq and did not see this CQ (it
		// waits, pending, for it to be destroyed here), or the device
		// died and did not fail it.
		d.mu.Unlock()
		q.mu.Lock()
		q.closed = true
		q.destroyLocked()
		q.mu.Unlock()
		err := rdma.ErrClosed
		if p != nil {
			err = *p
		}
		return nil, opErr("create_cq", err)
	}
	d.cqs[q] = struct{}{}
	d.mu.Unlock()
	return q, nil
}

// checkInit checks that init names only open CQs of d.
func (d *device) checkInit(init rdma.QPInit) error {
	for _, c := range []rdma.CQ{init.SendCQ, init.RecvCQ} {
		if c == nil {
			continue
		}
		q, err := d.sharedCQ(c)
		if err != nil {
			return err
		}
		q.mu.Lock()
		closed, failed := q.closed, q.failErr
		q.mu.Unlock()
		if closed {
			return rdma.ErrClosed
		}
		if failed != nil {
			return failed // its connections are failed, and a new one would not be
		}
	}
	return nil
}

// sharedCQ returns c as one of d's shared CQs, or an error.
func (d *device) sharedCQ(c rdma.CQ) (*cq, error) {
	q, ok := c.(*cq)
	if !ok || q.d != d || !q.shared {
		return nil, fmt.Errorf("%w: the CQ is not from this device", rdma.ErrInvalid)
	}
	return q, nil
}

// waker reads completion events (ibv_get_cq_event, acked at once) as the
// netpoller reports the channel readable, and sends a token.
func (q *cq) waker() {
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
			// Sleepers can no longer be woken by the device: Arm sends a
			// token at once from now on, so pollers keep polling.
			err := errnoErr(cerr)
			q.broken.Store(&err)
			q.token()
			return
		}
		q.armed.Store(false)
		q.token()
	}
}

func (q *cq) token() {
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

// bind gives a queue an index (under mu).
func (q *cq) bindLocked(qu *queue) (uint64, error) {
	if q.closed {
		return 0, rdma.ErrClosed
	}
	for i, b := range q.queues {
		if b == nil {
			q.queues[i] = qu
			q.nbound++
			return uint64(i), nil
		}
	}
	if len(q.queues) == maxBound {
		return 0, fmt.Errorf("%w: %d queues share the CQ", rdma.ErrQueueFull, maxBound)
	}
	q.queues = append(q.queues, qu)
	q.nbound++
	return uint64(len(q.queues) - 1), nil
}

// unbindLocked forgets a queue whose QP is destroyed and drained; a closed
// CQ is destroyed with its last queue.
func (q *cq) unbindLocked(idx uint64) {
	q.queues[idx] = nil
	q.nbound--
	if q.nbound == 0 && (q.closed || !q.shared) {
		q.destroyLocked()
	}
}

// destroyLocked stops the waker and frees the ibv_cq and its channel.
// Completions already moved to ready stay readable.
func (q *cq) destroyLocked() {
	if q.hw == nil {
		return
	}
	dropAsyncTarget(q.asyncTok)
	q.w.close() // returns once the waker is out of C
	<-q.wakerDone
	C.gorun_destroy_cq(q.hw, q.ch)
	C.free(unsafe.Pointer(q.wcs))
	q.hw, q.ch, q.wcs = nil, nil, nil
}

// push queues a completion made by the provider (a flush) behind those
// already polled, and sends the token an arm asked for.
func (q *cq) push(wc rdma.WC) {
	if q.readyN == len(q.ready) { // not while post keeps the room (see ready)
		grown := make([]rdma.WC, max(2*len(q.ready), 1))
		n := copy(grown, q.ready[q.readyHead:])
		copy(grown[n:], q.ready[:q.readyHead])
		q.ready, q.readyHead = grown, 0
	}
	q.ready[(q.readyHead+q.readyN)%len(q.ready)] = wc
	q.readyN++
	if q.armed.CompareAndSwap(true, false) {
		q.token()
	}
}

func (q *cq) readyLen() int { return q.readyN }

// popInto moves ready completions into dst, oldest first.
func (q *cq) popInto(dst []rdma.WC) int {
	n := 0
	for n < len(dst) && q.readyN > 0 {
		k := copy(dst[n:], q.ready[q.readyHead:min(len(q.ready), q.readyHead+q.readyN)])
		n += k
		q.readyN -= k
		q.readyHead = (q.readyHead + k) % len(q.ready)
	}
	if q.readyN == 0 {
		q.readyHead = 0
	}
	return n
}

// pollInto polls the ibv_cq once for up to len(dst) completions and
// returns how many of them the callers asked for (written to dst) and how
// many the device gave.
func (q *cq) pollInto(dst []rdma.WC) (user, hw int) {
	if q.hw == nil || len(dst) == 0 {
		return 0, 0
	}
	hw = int(C.gorun_poll(q.hw, q.wcs, C.int(min(len(dst), C.GORUN_POLL_BATCH))))
	if hw <= 0 {
		return 0, 0
	}
	wcs := unsafe.Slice(q.wcs, hw)
	for i := range wcs {
		w := &wcs[i]
		idx := uint64(w.wr_id) >> wrIdxShift
		if idx >= uint64(len(q.queues)) {
			continue
		}
		qu := q.queues[idx]
		if qu == nil || qu.qpNum != uint32(w.qp_num) {
			continue // a late completion of a destroyed QP
		}
		if qu.complete(w, &dst[user]) {
			user++
		}
	}
	return user, hw
}

// pollLocked moves everything the device has completed into ready.
func (q *cq) pollLocked() {
	var buf [C.GORUN_POLL_BATCH]rdma.WC
	for {
		n, hw := q.pollInto(buf[:])
		for _, wc := range buf[:n] {
			q.push(wc)
		}
		if hw < len(buf) {
			return
		}
	}
}

// Poll implements rdma.CQ: provider flushes first, then ibv_poll_cq in
// batches into C memory, demultiplexed to the queues without allocating.
func (q *cq) Poll(wcs []rdma.WC) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return 0
	}
	n := q.popInto(wcs)
	if q.readyLen() > 0 {
		return n
	}
	for n < len(wcs) {
		want := min(len(wcs)-n, C.GORUN_POLL_BATCH)
		u, hw := q.pollInto(wcs[n:])
		n += u
		if hw < want {
			break
		}
	}
	return n
}

// Arm implements rdma.CQ (ibv_req_notify_cq for the next completion).
func (q *cq) Arm() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.armLocked()
}

func (q *cq) armLocked() {
	if q.closed || q.hw == nil || q.broken.Load() != nil || q.failErr != nil || q.readyLen() > 0 {
		q.token()
		return
	}
	q.armed.Store(true)
	C.ibv_req_notify_cq(q.hw, 0)
}

// Notify implements rdma.CQ.
func (q *cq) Notify() <-chan struct{} { return q.notify }

// Close implements rdma.CQ. The ibv_cq is destroyed now, or when the last
// connection bound to it is closed: ibv_destroy_cq fails while QPs use it.
// Until then those connections' completions are dropped.
func (q *cq) Close() error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil
	}
	q.closed = true
	if q.nbound == 0 {
		q.destroyLocked()
	}
	q.mu.Unlock()
	q.stop()
	q.token()
	q.d.forgetCQ(q)
	return nil
}

// stop ends the waits on the CQ (Close, or a CQ error).
func (q *cq) stop() { q.doneOnce.Do(func() { close(q.done) }) }

// Err implements rdma.CQ: why the CQ failed (an IBV_EVENT_CQ_ERR or a
// fatal device error), or nil. Once it is set, Arm sends its token at
// once, and the CQ gives no completions but those already in it: the
// flushes of its connections' requests, and their later posts, flushed
// too.
func (q *cq) Err() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.failShown {
		return nil
	}
	return opErr("cq", q.failErr)
}

// wait is rdma.WaitComp on a shared CQ, for GetSendComp and GetRecvComp:
// after a CQ error, the flushed completions, then the error (as the
// event gave it, not Err's: the caller names its connection).
func (q *cq) wait(ctx context.Context) (rdma.WC, error) {
	wc, err := rdma.WaitComp(ctx, q, q.done)
	if errors.Is(err, rdma.ErrCQClosed) || errors.Is(err, ErrAsyncEvent) {
		q.mu.Lock()
		ferr, closed := q.failErr, q.closed
		q.mu.Unlock()
		if ferr != nil && !closed {
			return wc, ferr
		}
	}
	return wc, err
}

var _ rdma.CQ = (*cq)(nil)
