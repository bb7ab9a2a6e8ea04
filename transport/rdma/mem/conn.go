package mem

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
	"github.com/gorun-hpc/gorun/transport/rdma/internal/soft"
)

var connIDs atomic.Uint64

// Connection states. A conn only moves forward through them.
const (
	stateActive   int32 = iota
	stateError          // a request failed: everything later is flushed
	statePeerGone       // the peer closed: flushed and drained, posts fail
	stateClosed         // closed locally
)

type opKind uint8

const (
	opSend opKind = iota
	opWrite
	opWriteImm
	opRead
)

var opcodes = [...]rdma.Opcode{opSend: rdma.OpSend, opWrite: rdma.OpWrite, opWriteImm: rdma.OpWrite, opRead: rdma.OpRead}
var opNames = [...]string{opSend: "send", opWrite: "write", opWriteImm: "write_imm", opRead: "read"}

// wr is a send-queue work request.
type wr struct {
	op     opKind
	inline bool
	flags  rdma.Flags
	wrid   uint64
	n      int
	raddr  uint64
	rkey   uint32
	imm    uint32
	one    [1]rdma.SGE     // the list of a single-buffer post
	sgl    []rdma.SGE      // the list of a vector post
	inl    [MaxInline]byte // the payload of an inline post
}

func (w *wr) list() []rdma.SGE {
	if w.sgl != nil {
		return w.sgl
	}
	if w.inline {
		return nil
	}
	return w.one[:]
}

// payload is the data a send or write carries.
func (w *wr) payload(tmp *[1]rdma.SGE) []rdma.SGE {
	if w.inline {
		tmp[0] = rdma.SGE{Buf: w.inl[:w.n]}
		return tmp[:]
	}
	return w.list()
}

// recvWR is a posted receive.
type recvWR struct {
	wrid uint64
	cap  int
	one  [1]rdma.SGE
	sgl  []rdma.SGE
}

func (r *recvWR) list() []rdma.SGE {
	if r.sgl != nil {
		return r.sgl
	}
	return r.one[:]
}

// conn is one end of an in-process reliable connection.
type conn struct {
	dev  *device
	name string
	peer *conn

	state atomic.Int32 // written under mu

	mu          sync.Mutex
	reason      error
	sq          []wr // posted, not yet taken by the engine
	spare       []wr
	inl         wr    // the request a poster runs inline (ownPoster's)
	owner       uint8 // who executes the send queue: ownNone, ownPoster, ownEngine
	started     bool  // the engine goroutine exists (from the first post to shutdown)
	idle        bool  // the engine waits on wake
	wake        chan struct{}
	wg          sync.WaitGroup // the engine, and a poster executing inline
	outstanding atomic.Int64   // send-queue requests not yet completed

	rqMu       sync.Mutex
	rq         []recvWR
	rqHead     int
	rqDead     bool          // error state or closed: receives are flushed
	recvPosted chan struct{} // PostRecv → the peer's engine waiting on RNR

	kick     chan struct{} // state change → this conn's engine
	done     chan struct{} // closed when the conn leaves service
	doneOnce sync.Once
	// flushed is closed once the shutdown that left service has put every
	// completion in the CQs. The peer's Close runs that shutdown on its own
	// goroutine; this end's Close, coming while it runs, waits for it.
	flushed chan struct{}
	timer   *time.Timer // the engine's RNR timer

	// The completion queues: private ones, or a shared CQ (see bind).
	// Set before the conn is handed out, under mu and rqMu.
	sendCQ, recvCQ         *soft.CQ
	sendShared, recvShared bool
}

func newConn(d *device, name string) *conn {
	return &conn{
		dev:        d,
		name:       name,
		recvPosted: make(chan struct{}, 1),
		kick:       make(chan struct{}, 1),
		wake:       make(chan struct{}, 1),
		done:       make(chan struct{}),
		flushed:    make(chan struct{}),
		sendCQ:     soft.NewCQ(),
		recvCQ:     soft.NewCQ(),
	}
}

// bind points the conn's queues at the shared CQs of q (nil keeps the
// private one). Completions then go straight into the shared CQ; closing
// the conn flushes into it and never shuts it.
func (c *conn) bind(q queues) {
	c.mu.Lock()
	c.rqMu.Lock()
	if q.send != nil {
		c.sendCQ, c.sendShared = q.send, true
	}
	if q.recv != nil {
		c.recvCQ, c.recvShared = q.recv, true
	}
	c.rqMu.Unlock()
	c.mu.Unlock()
}

func (c *conn) postErr(op string, err error) error {
	return opErr(op, fmt.Errorf("conn %s: %w", c.name, err))
}

func (c *conn) closedErr(op string) error {
	if c.state.Load() == statePeerGone {
		return opErr(op, fmt.Errorf("conn %s: peer %s closed the connection: %w", c.name, c.peer.name, rdma.ErrClosed))
	}
	return c.postErr(op, rdma.ErrClosed)
}

func (c *conn) RegMsgs(buf []byte) (*rdma.MR, error) {
	return c.dev.Register(buf, rdma.AccessLocalWrite)
}

func (c *conn) RegWrite(buf []byte) (*rdma.MR, error) {
	return c.dev.Register(buf, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
}

func (c *conn) RegRead(buf []byte) (*rdma.MR, error) {
	return c.dev.Register(buf, rdma.AccessLocalWrite|rdma.AccessRemoteRead)
}

func (c *conn) MaxInline() int { return MaxInline }

func (c *conn) PostSend(wrid uint64, buf []byte, mr *rdma.MR, flags rdma.Flags) error {
	var one [1]rdma.SGE
	return c.postSQ("post_send", opSend, wrid, soft.One(&one, buf, mr), false, flags, 0, 0, 0)
}

func (c *conn) PostSendv(wrid uint64, sgl []rdma.SGE, flags rdma.Flags) error {
	return c.postSQ("post_sendv", opSend, wrid, sgl, true, flags, 0, 0, 0)
}

func (c *conn) PostWrite(wrid uint64, buf []byte, mr *rdma.MR, flags rdma.Flags, remoteAddr uint64, rkey uint32) error {
	var one [1]rdma.SGE
	return c.postSQ("post_write", opWrite, wrid, soft.One(&one, buf, mr), false, flags, remoteAddr, rkey, 0)
}

func (c *conn) PostWritev(wrid uint64, sgl []rdma.SGE, flags rdma.Flags, remoteAddr uint64, rkey uint32) error {
	return c.postSQ("post_writev", opWrite, wrid, sgl, true, flags, remoteAddr, rkey, 0)
}

func (c *conn) PostWriteImm(wrid uint64, buf []byte, mr *rdma.MR, flags rdma.Flags, remoteAddr uint64, rkey uint32, imm uint32) error {
	var one [1]rdma.SGE
	return c.postSQ("post_write_imm", opWriteImm, wrid, soft.One(&one, buf, mr), false, flags, remoteAddr, rkey, imm)
}

func (c *conn) PostRead(wrid uint64, buf []byte, mr *rdma.MR, flags rdma.Flags, remoteAddr uint64, rkey uint32) error {
	var one [1]rdma.SGE
	return c.postSQ("post_read", opRead, wrid, soft.One(&one, buf, mr), false, flags, remoteAddr, rkey, 0)
}

func (c *conn) PostReadv(wrid uint64, sgl []rdma.SGE, flags rdma.Flags, remoteAddr uint64, rkey uint32) error {
	return c.postSQ("post_readv", opRead, wrid, sgl, true, flags, remoteAddr, rkey, 0)
}

// postSQ checks a send-queue request and queues it for the engine.
func (c *conn) postSQ(name string, op opKind, wrid uint64, sgl []rdma.SGE, vec bool, flags rdma.Flags, raddr uint64, rkey, imm uint32) error {
	if c.state.Load() >= statePeerGone {
		return c.closedErr(name)
	}
	need := rdma.Access(0)
	if op == opRead {
		need = rdma.AccessLocalWrite
	}
	n, err := soft.CheckLocal(c.dev.pd, sgl, need, flags, MaxInline)
	if err != nil {
		return c.postErr(name, err)
	}
	w := wr{op: op, flags: flags, wrid: wrid, n: n, raddr: raddr, rkey: rkey, imm: imm}
	if flags&rdma.FlagInline != 0 && op != opRead {
		w.inline = true
		off := 0
		for _, s := range sgl {
			off += copy(w.inl[off:], s.Buf)
		}
	} else {
		if vec {
			w.sgl = append(make([]rdma.SGE, 0, len(sgl)), sgl...)
		} else {
			w.one[0] = sgl[0]
		}
	}
	// The regions are taken under mu, after the state is read, so that no
	// reference taken by a post racing Close outlives Close.
	c.mu.Lock()
	if c.state.Load() >= statePeerGone {
		c.mu.Unlock()
		return c.closedErr(name)
	}
	if c.outstanding.Add(1) > int64(c.dev.cfg.SendQueueDepth) {
		c.outstanding.Add(-1)
		c.mu.Unlock()
		return c.postErr(name, rdma.ErrQueueFull)
	}
	if !w.inline && !soft.AcquireAll(w.list()) {
		c.outstanding.Add(-1)
		c.mu.Unlock()
		return c.postErr(name, rdma.ErrNotRegistered)
	}
	if c.owner == ownNone && len(c.sq) == 0 {
		// Nothing ahead of it: run it here (see runInline).
		c.owner = ownPoster
		c.inl = w // not &w: that would move every post's request to the heap
		c.wg.Add(1)
		c.mu.Unlock()
		c.runInline(&c.inl)
		return nil
	}
	c.sq = append(c.sq, w)
	if c.owner == ownNone {
		c.toEngineLocked()
	}
	c.mu.Unlock()
	return nil
}

func (c *conn) PostRecv(wrid uint64, buf []byte, mr *rdma.MR) error {
	var one [1]rdma.SGE
	return c.postRQ("post_recv", wrid, soft.One(&one, buf, mr), false)
}

func (c *conn) PostRecvv(wrid uint64, sgl []rdma.SGE) error {
	return c.postRQ("post_recvv", wrid, sgl, true)
}

func (c *conn) postRQ(name string, wrid uint64, sgl []rdma.SGE, vec bool) error {
	if c.state.Load() >= statePeerGone {
		return c.closedErr(name)
	}
	n, err := soft.CheckLocal(c.dev.pd, sgl, rdma.AccessLocalWrite, 0, 0)
	if err != nil {
		return c.postErr(name, err)
	}
	r := recvWR{wrid: wrid, cap: n}
	if vec {
		r.sgl = append(make([]rdma.SGE, 0, len(sgl)), sgl...)
	} else {
		r.one[0] = sgl[0]
	}
	// The regions are taken under rqMu, after the state is read, so that
	// no reference taken by a post racing Close outlives Close.
	c.rqMu.Lock()
	switch {
	case c.state.Load() >= statePeerGone:
		c.rqMu.Unlock()
		return c.closedErr(name)
	case c.rqDead: // error state: the receive completes flushed at once
		c.recvCQ.Push(rdma.WC{WRID: wrid, Status: rdma.StatusFlushed, Opcode: rdma.OpRecv})
	case len(c.rq)-c.rqHead >= c.dev.cfg.RecvQueueDepth:
		c.rqMu.Unlock()
		return c.postErr(name, rdma.ErrQueueFull)
	case !soft.AcquireAll(r.list()):
		c.rqMu.Unlock()
		return c.postErr(name, rdma.ErrNotRegistered)
	default:
		c.rq = append(c.rq, r)
	}
	c.rqMu.Unlock()
	select {
	case c.recvPosted <- struct{}{}:
	default:
	}
	return nil
}

func (c *conn) GetSendComp(ctx context.Context) (rdma.WC, error) {
	return getComp(ctx, "get_send_comp", c.sendCQ, c.sendShared)
}

func (c *conn) GetRecvComp(ctx context.Context) (rdma.WC, error) {
	return getComp(ctx, "get_recv_comp", c.recvCQ, c.recvShared)
}

// getComp waits for q's next completion: a private queue's, or, shared,
// whatever the CQ hands out next (rdma.WaitComp).
func getComp(ctx context.Context, op string, q *soft.CQ, shared bool) (rdma.WC, error) {
	var wc rdma.WC
	var err error
	if shared {
		wc, err = rdma.WaitComp(ctx, q, q.Closed())
	} else {
		wc, err = q.Get(ctx)
	}
	if err != nil {
		return wc, opErr(op, err)
	}
	return wc, nil
}

// Err reports why the connection left service: the failed request that
// moved it to the error state, or its (or its peer's) Close.
func (c *conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reason
}

// Close flushes outstanding work and disconnects the peer.
func (c *conn) Close() error {
	if !c.shutdown(stateClosed, fmt.Errorf("conn %s closed: %w", c.name, rdma.ErrClosed)) {
		return c.postErr("close", rdma.ErrClosed)
	}
	p := c.peer
	p.shutdown(statePeerGone, fmt.Errorf("conn %s: peer %s closed the connection: %w", p.name, c.name, rdma.ErrClosed))
	c.dev.untrack(c)
	return nil
}

// markError moves an active conn to the error state. It reports whether
// this call did so. The caller flushes the receive queue.
func (c *conn) markError(reason error) bool {
	c.mu.Lock()
	if c.state.Load() != stateActive {
		c.mu.Unlock()
		return false
	}
	c.state.Store(stateError)
	c.reason = reason
	c.mu.Unlock()
	select {
	case c.kick <- struct{}{}:
	default:
	}
	return true
}

// fail moves the conn to the error state and flushes its receives.
func (c *conn) fail(reason error) {
	if c.markError(reason) {
		c.rqMu.Lock()
		c.flushRecvsLocked()
		c.rqMu.Unlock()
	}
}

// flushRecvsLocked completes every posted receive with StatusFlushed and
// makes later ones flush at once. The caller holds rqMu.
func (c *conn) flushRecvsLocked() {
	c.rqDead = true
	for i := c.rqHead; i < len(c.rq); i++ {
		r := &c.rq[i]
		soft.ReleaseAll(r.list())
		c.recvCQ.Push(rdma.WC{WRID: r.wrid, Status: rdma.StatusFlushed, Opcode: rdma.OpRecv})
		*r = recvWR{}
	}
	c.rq, c.rqHead = c.rq[:0], 0
}

// shutdown takes the conn out of service (to is statePeerGone or
// stateClosed): it flushes both queues, waits for the engine, and closes
// the completion queues with reason. It reports false if the conn was
// already in state to (or closed).
func (c *conn) shutdown(to int32, reason error) bool {
	c.mu.Lock()
	from := c.state.Load()
	if from >= to {
		c.mu.Unlock()
		return false
	}
	c.state.Store(to)
	if c.reason == nil {
		c.reason = reason
	}
	c.mu.Unlock()
	if from == statePeerGone {
		// Flushed and drained by the peer's Close, or being so now: wait
		// for it, for the caller may reuse the wrids of this conn once
		// Close returns (the engine gives its link id to the next link).
		<-c.flushed
		return true
	}
	c.doneOnce.Do(func() { close(c.done) })
	c.rqMu.Lock()
	c.flushRecvsLocked()
	// Read under rqMu: a conn whose dialer closes it may be being
	// accepted, and bound to its acceptor's CQs, right now.
	recvCQ, recvShared := c.recvCQ, c.recvShared
	sendCQ, sendShared := c.sendCQ, c.sendShared
	c.rqMu.Unlock()
	// A shared CQ outlives its conns: it gets the flushes, never Shut.
	if !recvShared {
		recvCQ.Shut(reason)
	}
	c.wg.Wait()
	if !sendShared {
		sendCQ.Shut(reason)
	}
	close(c.flushed)
	return true
}
