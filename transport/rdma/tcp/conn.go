package tcp

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
	"github.com/gorun-hpc/gorun/transport/rdma/internal/soft"
)

// Conn states. Only the reader moves a live conn from stateOK to
// stateError (a remote access violation, RNR exhaustion or a NAK); the
// reaper moves it to stateDead once reader and writer have exited.
const (
	stateOK    = iota
	stateError // queues flushed, later posts complete StatusFlushed
	stateDead  // socket gone, completion queues closed after draining
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

// response is a frame the reader queues for the writer.
type response struct {
	h      header
	hdr    [maxHdr]byte
	data   []byte
	crc    uint32 // of data, with Config.Checksum
	pooled *[]byte
}

// sealing is a request the writer has taken whose header still needs its
// CRCs (Config.Checksum): iov[lo:hi] is its payload.
type sealing struct {
	hdr    *[maxHdr]byte
	lo, hi int
}

type conn struct {
	dev       *device
	nc        net.Conn  // nil in decoder tests
	r         io.Reader // what the reader reads frames from
	peer      string
	cfg       rdma.Config
	hlen      int // frame header bytes: hdrLen, or maxHdr with Config.Checksum
	ackEvery  uint64
	sendCQ    *soft.CQ
	recvCQ    *soft.CQ
	wake      chan struct{} // wakes the writer
	recvWake  chan struct{} // a receive was posted (RNR wait)
	done      chan struct{} // closed when the conn is going down
	failOnce  sync.Once
	readDone  chan struct{}
	writeDone chan struct{}
	dead      chan struct{} // closed after the reaper flushed everything

	mu     sync.Mutex
	state  int
	err    error // why the conn left stateOK
	closed bool  // Close was called
	// Send queue: seq numbers; head ≤ tx ≤ tail. [head, tx) is on the
	// wire awaiting a response, [tx, tail) awaits the writer.
	sq              []*wr
	head, tx, tail  uint64
	readsInFlight   int
	rq              []*recvWR
	rqHead, rqTail  uint64
	resp, respSpare []response // respSpare is the writer's

	// Writer-owned.
	iov   [][]byte
	wbufs net.Buffers
	seals []sealing

	// Reader-owned.
	rhdr     [maxHdr]byte
	expect   uint64 // seq of the peer's next request
	discard  bool   // the reader entered stateError: skip every frame
	scratch  []byte
	rnrTimer *time.Timer
}

func newConn(d *device, nc net.Conn, r io.Reader, peer string) *conn {
	cfg := d.cfg
	every := uint64(cfg.SendQueueDepth / 4)
	every = max(1, min(every, 64))
	t := time.NewTimer(time.Hour)
	t.Stop()
	hlen := hdrLen
	if cfg.Checksum {
		hlen = maxHdr
	}
	return &conn{
		dev: d, nc: nc, r: r, peer: peer, cfg: cfg, hlen: hlen, ackEvery: every,
		sendCQ: soft.NewCQ(), recvCQ: soft.NewCQ(),
		wake: make(chan struct{}, 1), recvWake: make(chan struct{}, 1),
		done: make(chan struct{}), readDone: make(chan struct{}),
		writeDone: make(chan struct{}), dead: make(chan struct{}),
		sq:       make([]*wr, ringSize(cfg.SendQueueDepth)),
		rq:       make([]*recvWR, ringSize(cfg.RecvQueueDepth)),
		rnrTimer: t,
	}
}

func (c *conn) start() {
	go c.writeLoop()
	go c.readLoop()
	go c.reap()
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
// positions. Slots are pointers, so goroutines holding one keep it.
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
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	c.fail(rdma.ErrClosed)
	<-c.dead
	c.dev.forget(c)
	return nil
}

// fail takes the socket down; the reaper flushes once reader and writer
// have exited. The first error is the one Err reports.
func (c *conn) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = c.describe(err)
	}
	c.mu.Unlock()
	c.failOnce.Do(func() {
		close(c.done)
		if c.nc != nil {
			c.nc.Close()
		}
	})
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

func (c *conn) reap() {
	<-c.readDone
	<-c.writeDone
	c.mu.Lock()
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
	c.mu.Unlock()
	c.sendCQ.Shut(cqErr)
	c.recvCQ.Shut(cqErr)
	close(c.dead)
}

// flushSQ completes every outstanding request with StatusFlushed.
// Called with c.mu held, when neither reader nor writer touches the slots.
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

func (c *conn) GetSendComp(ctx context.Context) (rdma.WC, error) { return c.sendCQ.Get(ctx) }
func (c *conn) GetRecvComp(ctx context.Context) (rdma.WC, error) { return c.recvCQ.Get(ctx) }
