package tcp

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
	"github.com/gorun-hpc/gorun/transport/rdma/internal/soft"
)

// Conn states. Only the reader (whoever holds the read token) moves a live
// conn from stateOK to stateError (a remote access violation, RNR
// exhaustion or a NAK); the reap moves it to stateDead once reading and
// writing have both stopped for good.
const (
	stateOK    = iota
	stateError // queues flushed, later posts complete StatusFlushed
	stateDead  // socket gone, queues flushed, private queues shut
)

// wr is a send-queue slot: one posted request, from post to completion.
type wr struct {
	wrid     uint64
	op       uint8 // opWrite, opWriteImm, opSend, opReadReq
	opcode   rdma.Opcode
	signaled bool
	fence    bool
	inline   bool
	length   int
	raddr    uint64
	rkey     uint32
	imm      uint32
	sgl      []rdma.SGE // aliases one or many
	one      [1]rdma.SGE
	many     []rdma.SGE // reused storage for longer lists
	ibuf     []byte     // inline payload, allocated on first use
	hdr      [maxHdr]byte
}

// recvWR is a receive-queue slot.
type recvWR struct {
	wrid   uint64
	length int
	sgl    []rdma.SGE
	one    [1]rdma.SGE
	many   []rdma.SGE
}

// response is a frame the reader queues for whoever writes next.
type response struct {
	h      header
	hdr    [maxHdr]byte
	data   []byte
	crc    uint32 // of data, with Config.Checksum
	pooled *[]byte
}

// sealing is a request taken for writing whose header still needs its
// CRCs (Config.Checksum): iov[lo:hi] is its payload.
type sealing struct {
	hdr    *[maxHdr]byte
	lo, hi int
}

type conn struct {
	dev      *device
	nc       net.Conn        // nil in decoder tests
	rc       syscall.RawConn // nc's descriptor; nil in decoder tests
	fd       int32           // rc's descriptor number when made; -1 without rc
	r        io.Reader       // decoder tests: where frames come from
	peer     string
	cfg      rdma.Config
	hlen     int // frame header bytes: maxHdr (header and its CRCs)
	ackEvery uint64
	sendCQ   *cq
	recvCQ   *cq

	rtok      token         // the read token: who reads and serves (progress.go)
	rnrWait   atomic.Bool   // the parser waits for a receive
	wake      chan struct{} // hands a full socket to the writer goroutine
	handing   atomic.Bool   // handed, read without mu by pollers (resume)
	done      chan struct{} // closed when the conn is going down
	failing   atomic.Bool   // set before done is closed
	started   bool
	watchDone chan struct{}
	writeDone chan struct{}
	fdClosed  chan struct{} // the socket is closed
	dead      chan struct{} // closed after the reap flushed everything
	rnrTimer  *time.Timer   // runs progress when an RNR retry is due
	hbTimer   *time.Timer   // the heartbeat's next tick (heartbeat.go), under mu; nil without one

	mu     sync.Mutex
	state  int
	err    error // why the conn left stateOK
	closed bool  // Close was called
	// Send queue: seq numbers; head ≤ tx ≤ tail. [head, tx) is on the
	// wire awaiting a response, [tx, tail) awaits writing.
	sq              []*wr
	head, tx, tail  uint64
	readsInFlight   int
	rq              []*recvWR
	rqHead, rqTail  uint64
	resp, respSpare []response
	writing         bool // the write token is taken (writer.go)
	handed          bool // ... and handed to the writer goroutine (also handing)
	wactive         bool // the writer goroutine is writing what it was handed
	readExited      bool // the read side stopped for good
	writeExited     bool // the write side stopped for good

	// Write-token owned (writer.go).
	iov     [][]byte
	out     [][]byte // what of iov is still to be written
	respOut []response
	seals   []sealing
	iovecs  []syscall.Iovec
	wn      int
	werr    error
	tryW    func(fd uintptr)
	handW   func(fd uintptr) bool
	wdone   bool // the writer goroutine wrote (or failed) what it was handed

	// Read-token owned (reader.go).
	ps        parser
	rhdr      [maxHdr]byte
	in        []byte // staging: bytes read but not yet parsed are in[inLo:inHi]
	inLo      int
	inHi      int
	expect    uint64 // seq of the peer's next request
	discard   bool   // the reader entered stateError: skip every frame
	wantFlush bool   // the pass queued responses or unblocked requests
	drained   bool   // a read of this pass came back short
	scratch   []byte
	rbuf      []byte
	rn        int
	rerr      error
	readFn    func(fd uintptr)
	watchFn   func(fd uintptr) bool
	goneFn    func(fd uintptr)
	gone      bool
}

// newConn makes a conn with private completion queues; start binds it to
// its queues and starts it. nc is nil in decoder tests, which feed r.
func newConn(d *device, nc net.Conn, r io.Reader, peer string) *conn {
	cfg := d.cfg
	every := uint64(cfg.SendQueueDepth / 4)
	every = max(1, min(every, 64))
	hlen := maxHdr // the header's CRC is always on (checksum.go)
	c := &conn{
		dev: d, nc: nc, r: r, peer: peer, cfg: cfg, hlen: hlen, ackEvery: every,
		wake: make(chan struct{}, 1), done: make(chan struct{}),
		watchDone: make(chan struct{}), writeDone: make(chan struct{}),
		fdClosed: make(chan struct{}), dead: make(chan struct{}),
		sq: make([]*wr, ringSize(cfg.SendQueueDepth)),
		rq: make([]*recvWR, ringSize(cfg.RecvQueueDepth)),
		in: make([]byte, stagingLen),
	}
	c.sendCQ, c.recvCQ = newPrivateCQ(d, c), newPrivateCQ(d, c)
	if tc, ok := nc.(*net.TCPConn); ok {
		if rc, err := tc.SyscallConn(); err == nil {
			c.rc = rc
		}
	}
	c.fd = -1
	if c.rc != nil {
		_ = c.rc.Control(func(fd uintptr) { c.fd = int32(fd) })
	}
	c.readFn = c.readFd
	c.watchFn = c.watchFd
	c.goneFn = func(fd uintptr) { c.gone = hungUp(fd) }
	c.tryW = c.tryWriteFd
	c.handW = c.handedWriteFd
	c.rnrTimer = time.AfterFunc(time.Hour, c.progress)
	c.rnrTimer.Stop()
	return c
}

// start binds the conn to the completion queues of init (nil: its private
// ones) and starts the watcher and the writer goroutines.
func (c *conn) start(init rdma.QPInit) {
	if init.SendCQ != nil {
		c.sendCQ = init.SendCQ.(*cq)
		c.sendCQ.bind(c)
	}
	if init.RecvCQ != nil {
		c.recvCQ = init.RecvCQ.(*cq)
		if c.recvCQ != c.sendCQ {
			c.recvCQ.bind(c)
		}
	}
	c.mu.Lock()
	c.started = true
	c.mu.Unlock()
	go c.watch()
	go c.writeLoop()
	c.startHeartbeat() // heartbeat.go
}

func kick(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// The queues are rings indexed by seq modulo a power of two. They start
// small and double when full, up to the configured depth, so an idle conn
// is cheap; slots are allocated on first use and then reused.
const initialRing = 64

func (c *conn) slot(seq uint64) *wr {
	i := seq & uint64(len(c.sq)-1)
	if c.sq[i] == nil {
		c.sq[i] = new(wr)
	}
	return c.sq[i]
}

func (c *conn) rslot(seq uint64) *recvWR {
	i := seq & uint64(len(c.rq)-1)
	if c.rq[i] == nil {
		c.rq[i] = new(recvWR)
	}
	return c.rq[i]
}

// growRing doubles ring, keeping the slots of [head, tail) at their new
// positions. Slots are pointers, so holders of one keep it.
func growRing[T any](ring []*T, head, tail uint64) []*T {
	bigger := make([]*T, 2*len(ring))
	for s := head; s < tail; s++ {
		bigger[s&uint64(len(bigger)-1)] = ring[s&uint64(len(ring)-1)]
	}
	return bigger
}

func ringSize(depth int) int {
	n := initialRing
	for n > 1 && n/2 >= depth {
		n /= 2
	}
	return n
}

// MaxInline is the largest FlagInline payload.
func (c *conn) MaxInline() int { return MaxInline }

func (c *conn) RegMsgs(buf []byte) (*rdma.MR, error) {
	return c.dev.Register(buf, rdma.AccessLocalWrite)
}

func (c *conn) RegWrite(buf []byte) (*rdma.MR, error) {
	return c.dev.Register(buf, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
}

func (c *conn) RegRead(buf []byte) (*rdma.MR, error) {
	return c.dev.Register(buf, rdma.AccessLocalWrite|rdma.AccessRemoteRead)
}

// Err reports why the connection left the working state, or nil.
func (c *conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close flushes every outstanding request and receive, closes the socket
// (the peer sees the connection end) and waits for the goroutines to exit.
func (c *conn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		<-c.dead
		return nil
	}
	c.closed = true
	started := c.started
	c.mu.Unlock()
	c.fail(rdma.ErrClosed)
	<-c.dead
	if started {
		<-c.watchDone
		<-c.writeDone
	}
	if c.nc != nil {
		<-c.fdClosed
	}
	c.dev.forget(c)
	return nil
}

// fail takes the conn down: the socket closes, and the queues are flushed
// once neither side reads or writes (the reap). The first error is the one
// Err reports. It may be called from anywhere but with c.mu held.
func (c *conn) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = c.describe(err)
	}
	first := !c.failing.Load()
	if !first {
		c.mu.Unlock()
		return
	}
	c.failing.Store(true)
	if !c.writing {
		c.exitWriteLocked()
	}
	c.mu.Unlock()
	close(c.done)
	c.rnrTimer.Stop()
	if c.nc != nil {
		// Close waits for every use of the descriptor to end, and fail may
		// run inside one (a read pass, a write): close from elsewhere.
		go func() {
			c.nc.Close()
			close(c.fdClosed)
		}()
	}
	c.progress() // the read side exits now, or at its holder's next pass
}

// describe turns the error that ended the socket into Err's value. Every
// such error unwraps to rdma.ErrClosed and, but for a clean end, to its
// cause (a reset, a protocol violation).
func (c *conn) describe(err error) error {
	switch {
	case err == rdma.ErrClosed:
		return opErr("conn", err)
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		err = errPeerClosed
	default:
		err = fmt.Errorf("connection lost: %w: %w", err, rdma.ErrClosed)
	}
	return opErr("conn", &peerError{peer: c.peer, err: err})
}

// exitWriteLocked and exitReadLocked record that a side stopped for good;
// the second one reaps. Called with c.mu held.
func (c *conn) exitWriteLocked() {
	c.writeExited = true
	if c.readExited {
		c.reapLocked()
	}
}

func (c *conn) exitReadLocked() {
	c.readExited = true
	if c.writeExited {
		c.reapLocked()
	}
}

// reapLocked flushes both queues into their completion queues, shuts the
// private ones and unbinds the conn from shared ones. Nothing reads or
// writes the socket any more. Called with c.mu held.
func (c *conn) reapLocked() {
	c.flushSQ()
	c.flushRQ()
	for i := range c.resp {
		putBuf(c.resp[i].pooled)
	}
	c.resp = nil
	c.state = stateDead
	cqErr := c.err
	if c.closed {
		cqErr = opErr("get_comp", rdma.ErrClosed)
	}
	for _, q := range []*cq{c.sendCQ, c.recvCQ} {
		if q.private {
			q.Shut(cqErr)
			q.CQ.Close() // wakes a waiter in GetSendComp or GetRecvComp
		} else {
			q.unbind(c)
		}
	}
	close(c.dead)
}

// flushSQ completes every outstanding request with StatusFlushed.
// Called with c.mu held, when nothing of the send queue is being written
// or read into.
func (c *conn) flushSQ() {
	for s := c.head; s < c.tail; s++ {
		w := c.slot(s)
		c.finish(w, rdma.StatusFlushed)
	}
	c.head, c.tx = c.tail, c.tail
	c.readsInFlight = 0
}

// flushRQ completes every posted receive with StatusFlushed.
func (c *conn) flushRQ() {
	for s := c.rqHead; s < c.rqTail; s++ {
		rw := c.rslot(s)
		soft.ReleaseAll(rw.sgl)
		clear(rw.sgl)
		c.recvCQ.Push(rdma.WC{WRID: rw.wrid, Status: rdma.StatusFlushed, Opcode: rdma.OpRecv})
	}
	c.rqHead = c.rqTail
}

// finish releases a request's regions, then reports it if it was signaled
// or failed: a completion's MRs can be deregistered once it is seen.
func (c *conn) finish(w *wr, st rdma.Status) {
	if !w.inline {
		soft.ReleaseAll(w.sgl)
	}
	clear(w.sgl)
	if w.signaled || st != rdma.StatusSuccess {
		c.sendCQ.Push(rdma.WC{WRID: w.wrid, Status: st, Opcode: w.opcode})
	}
}

func (c *conn) GetSendComp(ctx context.Context) (rdma.WC, error) { return c.getComp(ctx, c.sendCQ) }
func (c *conn) GetRecvComp(ctx context.Context) (rdma.WC, error) { return c.getComp(ctx, c.recvCQ) }
