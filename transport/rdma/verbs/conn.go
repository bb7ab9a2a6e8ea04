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
	"github.com/gorun-hpc/gorun/transport/rdma/internal/soft"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// maxInlineWanted is the inline size asked of the QP; the device may grant
// less (Conn.MaxInline reports what it granted).
const maxInlineWanted = 256

// disconnectWait bounds how long Close waits for the peer's DREP before it
// destroys the id (destroying it is safe earlier; the wait lets the peer see
// a clean disconnect).
const disconnectWait = 200 * time.Millisecond

var errPeerClosed = fmt.Errorf("peer disconnected: %w", rdma.ErrClosed)

// conn is one RC queue pair on its own rdma_cm id and event channel.
type conn struct {
	d         *device
	id        *C.struct_rdma_cm_id
	ch        *cmChannel
	send      *queue
	recv      *queue
	maxInline int
	maxSGE    int // entries of a request's list
	maxRdSGE  int // entries of a read's local list (max_sge_rd)

	local, remote string
	port          int    // the device port of the QP
	asyncTok      uint64 // qp_context: names the QP in asynchronous events (async.go)

	cmMu         sync.Mutex // rdma_disconnect from Close, the event loop and asyncFail
	live         bool       // under cmMu: between start and Close, the id may be disconnected
	peerGone     atomic.Bool
	hwErr        atomic.Pointer[error] // an asynchronous event failed the QP (async.go)
	disconnected chan struct{}         // closed on RDMA_CM_EVENT_DISCONNECTED
	discOnce     sync.Once
	loopDone     chan struct{}
	closeOnce    sync.Once
	isFailed     atomic.Bool // err is set
	errMu        sync.Mutex
	err          error
}

// newConn creates the QP of id with the CQs of init; a nil CQ gets a
// private one. The queues bind to their CQs before the QP exists, so no
// completion can come for an unbound queue; until they learn the QP's
// number, a stale completion for their binding index is ignored.
func (d *device) newConn(id *C.struct_rdma_cm_id, ch *cmChannel, init rdma.QPInit) (*conn, error) {
	sdepth := min(d.cfg.SendQueueDepth, d.maxWR, d.maxCQE)
	rdepth := min(d.cfg.RecvQueueDepth, d.maxWR, d.maxCQE)
	c := &conn{d: d, id: id, ch: ch, maxSGE: d.maxSGE, maxRdSGE: d.maxRdSGE,
		disconnected: make(chan struct{}), loopDone: make(chan struct{})}
	var err error
	if c.send, err = d.bindQueue(c, false, init.SendCQ, sdepth); err == nil {
		c.recv, err = d.bindQueue(c, true, init.RecvCQ, rdepth)
	}
	if err != nil {
		c.destroy()
		return nil, err
	}
	var qp C.struct_gorun_qp
	c.asyncTok = addAsyncTarget(c)
	if r, err := C.gorun_create_qp(id, d.pd, c.send.cq.hw, c.recv.cq.hw, C.int(sdepth), C.int(rdepth),
		C.int(d.maxSGE), maxInlineWanted, C.uint64_t(c.asyncTok), &qp); r != 0 {
		c.destroy()
		return nil, errnoErr(err)
	}
	c.port = int(C.gorun_id_port(id))
	for _, q := range []*queue{c.send, c.recv} {
		q.mu.Lock()
		q.qpNum = uint32(qp.qp_num)
		q.mu.Unlock()
	}
	c.maxInline = min(int(qp.max_inline), C.GORUN_INLINE_BUF)
	return c, nil
}

// bindQueue makes one side of c on shared (nil: a private CQ of depth).
func (d *device) bindQueue(c *conn, recv bool, shared rdma.CQ, depth int) (*queue, error) {
	var q *cq
	if shared != nil {
		var err error
		if q, err = d.sharedCQ(shared); err != nil {
			return nil, err
		}
	} else {
		var err error
		if q, err = d.newCQ(depth, false); err != nil {
			return nil, err
		}
	}
	qu, err := newQueue(c, recv, q, depth)
	if err != nil && shared == nil {
		q.mu.Lock()
		q.destroyLocked()
		q.mu.Unlock()
	}
	return qu, err
}

// destroy flushes the queues, destroys the QP and leaves the CQs (not the
// id or event channel). The flushed requests the device held stay counted
// in their CQs until the QP is destroyed and its completions drained
// (queue.late).
func (c *conn) destroy() {
	if c.asyncTok != 0 {
		dropAsyncTarget(c.asyncTok)
	}
	for _, q := range []*queue{c.send, c.recv} {
		if q != nil {
			q.close()
		}
	}
	C.gorun_destroy_qp(c.id)
	for _, q := range []*queue{c.send, c.recv} {
		if q != nil {
			q.unbind()
		}
	}
}

// abort frees a connection that never reached the caller.
func (c *conn) abort() {
	C.rdma_disconnect(c.id)
	c.destroy()
	C.rdma_destroy_id(c.id)
	c.ch.destroy()
}

// kick wakes waiters on private CQs to re-check the connection's state.
func (c *conn) kick() {
	for _, q := range []*queue{c.send, c.recv} {
		if !q.cq.shared {
			q.cq.token()
		}
	}
}

// start runs the connection's event loop: a peer's disconnect moves the QP
// to the error state (rdma_disconnect, which also answers the DREQ), so
// outstanding requests flush and waiters learn that nothing more can come.
func (c *conn) start() {
	c.cmMu.Lock()
	c.live = true
	c.cmMu.Unlock()
	go func() {
		defer close(c.loopDone)
		for {
			ev, err := c.ch.next(context.Background())
			if errors.Is(err, errKicked) {
				continue
			}
			if err != nil {
				return
			}
			switch ev.typ {
			case C.RDMA_CM_EVENT_DISCONNECTED, C.RDMA_CM_EVENT_DEVICE_REMOVAL:
				c.peerGone.Store(true)
				c.fail(errPeerClosed)
				c.disconnect()
				c.discOnce.Do(func() { close(c.disconnected) })
				c.kick()
			}
		}
	}()
}

// disconnect moves the QP to the error state and tells the peer
// (rdma_disconnect), unless the connection is not started or is closing.
func (c *conn) disconnect() {
	c.cmMu.Lock()
	if c.live {
		C.rdma_disconnect(c.id)
	}
	c.cmMu.Unlock()
}

// goneErr is why nothing more can complete on a connection whose QP is
// in the error state with nothing outstanding: an asynchronous event, or
// the peer's disconnect.
func (c *conn) goneErr() error {
	if e := c.hwErr.Load(); e != nil {
		return *e
	}
	return errPeerClosed
}

func (c *conn) opErr(op string, err error) error {
	return rdma.NewOpError(provider, op+" "+c.remote, err)
}

// fail records the first reason the connection entered the error state,
// and schedules the flush of what the device may leave outstanding.
func (c *conn) fail(err error) {
	c.errMu.Lock()
	first := c.err == nil
	if first {
		c.err = err
		c.isFailed.Store(true)
	}
	c.errMu.Unlock()
	if first {
		c.send.startGrace()
		c.recv.startGrace()
	}
}

// failed reports whether the connection is in the error state.
func (c *conn) failed() bool { return c.isFailed.Load() }

func (c *conn) Err() error {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	if c.err == nil {
		return nil
	}
	return c.opErr("conn", c.err)
}

func (c *conn) MaxInline() int { return c.maxInline }

func (c *conn) RegMsgs(buf []byte) (*rdma.MR, error) {
	return c.d.register("reg_msgs", buf, rdma.AccessLocalWrite, nil)
}

func (c *conn) RegWrite(buf []byte) (*rdma.MR, error) {
	return c.d.register("reg_write", buf, rdma.AccessLocalWrite|rdma.AccessRemoteWrite, nil)
}

func (c *conn) RegRead(buf []byte) (*rdma.MR, error) {
	return c.d.register("reg_read", buf, rdma.AccessLocalWrite|rdma.AccessRemoteRead, nil)
}

func (c *conn) GetSendComp(ctx context.Context) (rdma.WC, error) {
	return c.send.get(ctx, "get_send_comp")
}

func (c *conn) GetRecvComp(ctx context.Context) (rdma.WC, error) {
	return c.recv.get(ctx, "get_recv_comp")
}

// Close disconnects (the peer sees RDMA_CM_EVENT_DISCONNECTED), waits
// briefly for the peer's reply, and frees the QP, CQs, id and channel.
// Outstanding requests are abandoned: their MRs are released and waiters get
// ErrClosed.
func (c *conn) Close() error {
	c.closeOnce.Do(func() {
		c.fail(rdma.ErrClosed)
		c.cmMu.Lock()
		C.rdma_disconnect(c.id) // asynchronous: this id has an event channel
		c.live = false
		c.cmMu.Unlock()
		select {
		case <-c.disconnected:
		case <-time.After(disconnectWait):
		}
		c.ch.w.close()
		<-c.loopDone
		c.destroy()
		C.rdma_destroy_id(c.id)
		C.rdma_destroy_event_channel(c.ch.ch)
		c.d.forget(c, nil)
	})
	return nil
}

// Post operations. need is the local access the request needs.
const (
	opSend     = C.GORUN_OP_SEND
	opWrite    = C.GORUN_OP_WRITE
	opWriteImm = C.GORUN_OP_WRITE_IMM
	opRead     = C.GORUN_OP_READ
	opRecv     = C.GORUN_OP_RECV
)

var postNames = map[int]string{opSend: "post_send", opWrite: "post_write",
	opWriteImm: "post_write_imm", opRead: "post_read", opRecv: "post_recv"}

func (c *conn) PostSend(wrid uint64, buf []byte, mr *rdma.MR, flags rdma.Flags) error {
	var one [1]rdma.SGE
	return c.post(opSend, wrid, soft.One(&one, buf, mr), flags, 0, 0, 0)
}

func (c *conn) PostSendv(wrid uint64, sgl []rdma.SGE, flags rdma.Flags) error {
	return c.post(opSend, wrid, sgl, flags, 0, 0, 0)
}

func (c *conn) PostRecv(wrid uint64, buf []byte, mr *rdma.MR) error {
	var one [1]rdma.SGE
	return c.post(opRecv, wrid, soft.One(&one, buf, mr), 0, 0, 0, 0)
}

func (c *conn) PostRecvv(wrid uint64, sgl []rdma.SGE) error {
	return c.post(opRecv, wrid, sgl, 0, 0, 0, 0)
}

func (c *conn) PostWrite(wrid uint64, buf []byte, mr *rdma.MR, flags rdma.Flags, raddr uint64, rkey uint32) error {
	var one [1]rdma.SGE
	return c.post(opWrite, wrid, soft.One(&one, buf, mr), flags, raddr, rkey, 0)
}

func (c *conn) PostWritev(wrid uint64, sgl []rdma.SGE, flags rdma.Flags, raddr uint64, rkey uint32) error {
	return c.post(opWrite, wrid, sgl, flags, raddr, rkey, 0)
}

func (c *conn) PostWriteImm(wrid uint64, buf []byte, mr *rdma.MR, flags rdma.Flags, raddr uint64, rkey uint32, imm uint32) error {
	var one [1]rdma.SGE
	return c.post(opWriteImm, wrid, soft.One(&one, buf, mr), flags, raddr, rkey, imm)
}

func (c *conn) PostRead(wrid uint64, buf []byte, mr *rdma.MR, flags rdma.Flags, raddr uint64, rkey uint32) error {
	var one [1]rdma.SGE
	return c.post(opRead, wrid, soft.One(&one, buf, mr), flags, raddr, rkey, 0)
}

func (c *conn) PostReadv(wrid uint64, sgl []rdma.SGE, flags rdma.Flags, raddr uint64, rkey uint32) error {
	return c.post(opRead, wrid, sgl, flags, raddr, rkey, 0)
}
