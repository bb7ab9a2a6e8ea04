//go:build linux

package shm

import (
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gorun-hpc/gorun/transport/rdma"
	"github.com/gorun-hpc/gorun/transport/rdma/internal/soft"
)

// maxInline is the largest FlagInline payload: one ring record.
const maxInline = 4096

const (
	stateActive int32 = iota
	stateError        // an RC queue pair's error state: everything flushes
	stateClosed       // Close was called
)

// conn is one connected queue pair. The send queue is executed by the
// posting goroutine when nothing is queued ahead and the request needs no
// wait (the common case), else by the sq goroutine; either way requests
// run one at a time, in post order, under the exec lock discipline below.
type conn struct {
	dev       *Device
	uc        *net.UnixConn
	peerPid   int
	local     *segment   // ours: our outgoing ring, our receives, our keys
	peer      *segment   // the peer's: its ring, receives, keys
	peerArena []byte     // arena.mem
	arena     *peerArena // the mapping, shared with this process's other connections to the peer
	cma       bool
	// plainRing: both processes fence their doorbell sleeps, so a ring's
	// condition is published with a release store (fence.go).
	plainRing bool
	segFd     int
	pidfd     int // the peer process (pidfd_open), -1 if unavailable
	// This side's eventfd and the peer's (bell.go), which the segments'
	// doorbells ring; closed with the mappings.
	bell, peerBell *bellFd

	// Private completion queues (GetSendComp, GetRecvComp), and the shared
	// ones the queues are bound to, if any (set before the conn is handed
	// out, read by whoever completes a request).
	sendCQ, recvCQ         *soft.CQ
	sendShared, recvShared atomic.Pointer[cq]
	// armKick wakes the progress goroutine when the shared receive CQ is
	// armed (it then sleeps on the peer's data doorbell).
	armKick chan struct{}

	state     atomic.Int32
	errMu     sync.Mutex
	err       error
	peerGone  atomic.Bool
	done      chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup

	// Send queue. pending and busy are guarded by sqMu; the exec fields
	// below belong to whoever executes (one at a time).
	sqMu    sync.Mutex
	pending []wr
	busy    bool
	sqWake  chan struct{}
	sqIdle  sync.Cond // broadcast when the queue runs empty
	exe     execState

	// Receive queue: a fixed ring of posted receives, guarded by rqMu.
	rqMu   sync.Mutex
	rq     []rwr
	rqHead int
	rqLen  int
	posted uint64 // receives posted so far (published in local)
	// holdMR is the region of the single-buffer receives in rq marked
	// held, holdN how many there are: the connection holds one reference
	// to it (MR.Acquire) for all of them, so a receive reposted into the
	// same region as the others costs no locked instruction, where an
	// Acquire and a Release are two. The region stays busy exactly while
	// a receive that uses it is posted, as with a reference each.
	holdMR *rdma.MR
	holdN  int
	minCap uint64     // the smallest receive ever posted (published in local)
	progMu sync.Mutex // held while draining the peer's ring
	// pollers counts receive pollers spinning on the ring; while there
	// are any, the progress goroutine stays off the doorbell, so that
	// senders skip the wake-up write.
	pollers  atomic.Int32
	pollIdle chan struct{}
	slept    atomic.Bool // the receive poller's last wait slept: spin longer next

	rxTail uint64        // ring consumer position (under progMu)
	rxPos  atomic.Uint64 // rxTail, for Poll's look without the lock

	wMu    sync.Mutex // serializes socket writes
	respCh chan fallbackResp
}

// wr is a queued send-queue work request.
type wr struct {
	op     rdma.Opcode
	wrid   uint64
	one    [1]rdma.SGE
	sgl    []rdma.SGE // nil: one
	flags  rdma.Flags
	raddr  uint64
	rkey   uint32
	imm    uint32
	hasImm bool
	held   bool // MRs acquired
	total  int
}

func (w *wr) list() []rdma.SGE {
	if w.sgl != nil {
		return w.sgl
	}
	return w.one[:]
}

// rwr is a posted receive.
type rwr struct {
	wrid  uint64
	one   [1]rdma.SGE
	sgl   []rdma.SGE
	total int
	// held: its region is counted in the connection's hold (holdMR), not
	// acquired on its own.
	held bool
}

func (r *rwr) list() []rdma.SGE {
	if r.sgl != nil {
		return r.sgl
	}
	return r.one[:]
}

func newConn(d *Device, uc *net.UnixConn, pid int) (*conn, error) {
	seg, fd, err := newSegment(d.cfg.RecvQueueDepth)
	if err != nil {
		return nil, err
	}
	bell, err := newBellFd()
	if err != nil {
		unix.Close(fd)
		seg.unmap()
		return nil, err
	}
	seg.owner = bell
	c := &conn{
		dev: d, uc: uc, peerPid: pid, local: seg, segFd: fd, pidfd: -1, bell: bell,
		sendCQ: soft.NewCQ(), recvCQ: soft.NewCQ(),
		done: make(chan struct{}), sqWake: make(chan struct{}, 1),
		rq:     make([]rwr, d.cfg.RecvQueueDepth),
		respCh: make(chan fallbackResp, 1), pollIdle: make(chan struct{}, 1),
		armKick: make(chan struct{}, 1),
	}
	touch(c.rq)
	c.exe.keys = make(map[uint32]int)
	c.minCap = ^uint64(0)
	c.sqIdle.L = &c.sqMu
	if err := d.addConn(c); err != nil {
		unix.Close(fd)
		seg.unmap()
		bell.close()
		return nil, err
	}
	return c, nil
}

// touch writes one element per page of s so that its pages are mapped now.
// Fresh heap memory is mapped at first touch, and the receive queue is
// walked in posting order through all its RecvQueueDepth entries (72
// bytes each): its first lap took a page fault every 57 receives, which
// on the VMs measured cost 20 µs each and slowed a 2-rank barrier from
// 0.7-0.8 µs to 1.1-1.2 µs over a connection's first 4096 messages.
func touch[T any](s []T) {
	var zero T
	step := max(1, 4096/int(unsafe.Sizeof(zero)))
	for i := 0; i < len(s); i += step {
		s[i] = zero
	}
}

func (c *conn) takeSegFd() (int, error) {
	fd := c.segFd
	c.segFd = -1
	return fd, nil
}

// abandon undoes newConn after a failed handshake.
func (c *conn) abandon() {
	c.dev.removeConn(c)
	if c.segFd >= 0 {
		unix.Close(c.segFd)
	}
	c.local.unmap()
	c.peer.unmap()
	c.bell.close()
	c.peerBell.close()
	if c.arena != nil {
		c.arena.release()
	}
	if c.pidfd >= 0 {
		unix.Close(c.pidfd)
	}
	c.uc.Close()
}

func (c *conn) start() {
	c.wg.Add(3)
	go c.progressLoop()
	go c.sqLoop()
	go c.socketLoop()
}

func (c *conn) opErr(op string, err error) error {
	return &rdma.OpError{Op: op, Provider: provider, Err: err}
}

// peerDead reports whether the peer can no longer touch our memory: its
// socket ended, or its process exited. (After our own Close the socket
// tells nothing, and a peer killed in the middle of a copy leaves an
// in-flight counter up forever: the process is what counts.)
func (c *conn) peerDead() bool {
	if c.peerGone.Load() {
		return true
	}
	if c.pidfd >= 0 {
		return exited(c.pidfd)
	}
	return unix.Kill(c.peerPid, 0) == unix.ESRCH
}

// waitZero waits until *users is zero or the peer is dead: a peer copy in
// flight takes at most a memcpy's time, unless the peer is frozen in it
// (SIGSTOP, a debugger). It reports false when it gave up on a frozen
// peer: one whose process has been stopped for frozenPeerAfter with the
// count still up. The connection is then in the error state, and the
// caller must not reuse memory the peer maps (a resumed peer would finish
// its copy); memory it reaches through CMA is safe, since a stop takes
// effect only after process_vm_writev returns. The count lives in shared
// memory and the peer does not signal its decrement (that would cost every
// copy a wake-up), so the wait polls: a short yielding spin, then sleeps
// growing to 1 ms, the peer's state read at each.
func (c *conn) waitZero(users *atomic.Uint32) bool {
	var stoppedAt time.Time
	nap := 20 * time.Microsecond
	for i := 0; users.Load() != 0; i++ {
		if i < 100 {
			runtime.Gosched()
			continue
		}
		if c.peerDead() {
			return true
		}
		if peerStopped(c.peerPid) {
			if stoppedAt.IsZero() {
				stoppedAt = time.Now()
			} else if time.Since(stoppedAt) >= frozenPeerAfter {
				c.markError(c.opErr("wait", fmt.Errorf("peer pid %d is frozen (stopped) with a copy in flight: %w", c.peerPid, rdma.ErrClosed)), false)
				return false
			}
		} else {
			stoppedAt = time.Time{}
		}
		time.Sleep(nap)
		nap = min(2*nap, time.Millisecond)
	}
	return true
}

// frozenPeerAfter is how long waitZero waits on a stopped peer.
const frozenPeerAfter = time.Second

func (c *conn) MaxInline() int { return maxInline }

func (c *conn) Err() error {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	return c.err
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

// setError moves the connection to the error state (once) with reason, wakes
// every waiter and flushes the posted receives. The peer is told unless it
// told us.
func (c *conn) setError(reason error, tellPeer bool) {
	if c.markError(reason, tellPeer) {
		c.flushRecvs()
	}
}

// markError is setError without the flush; it reports whether it changed
// the state. Err is set before any completion of the failure is pushed.
func (c *conn) markError(reason error, tellPeer bool) bool {
	if !c.state.CompareAndSwap(stateActive, stateError) {
		return false
	}
	c.errMu.Lock()
	c.err = reason
	c.errMu.Unlock()
	if tellPeer {
		c.sendCtl(msgError, []byte(reason.Error()))
	}
	c.wakeAll()
	return true
}

func (c *conn) wakeAll() {
	select {
	case c.sqWake <- struct{}{}:
	default:
	}
	c.peer.dataBell().wake()
	c.peer.recvBell().wake()
	c.local.spaceBell().wake()
}

func (c *conn) flushRecvs() {
	c.rqMu.Lock()
	defer c.rqMu.Unlock()
	c.flushRecvsLocked()
}

func (c *conn) flushRecvsLocked() {
	if c.rqLen > 0 {
		defer c.kickRecv()
		c.fenceRecvs()
	}
	for c.rqLen > 0 {
		wc := rdma.WC{WRID: c.rq[c.rqHead].wrid, Status: rdma.StatusFlushed, Opcode: rdma.OpRecv}
		c.popRecv()
		c.pushRecv(wc)
	}
}

// acquireRecv takes r's regions for as long as it is posted; rqMu is held.
func (c *conn) acquireRecv(r *rwr) bool {
	mr := r.one[0].MR
	if r.sgl != nil || mr == nil || len(r.one[0].Buf) == 0 {
		return soft.AcquireAll(r.list()) // an empty buffer takes no reference
	}
	switch {
	case mr == c.holdMR && mr.Valid():
		// Valid: a DeregisterWait begun since the hold was taken refuses
		// new requests, as Acquire would.
	case c.holdN == 0:
		if !mr.Acquire() {
			return false
		}
		c.holdMR = mr
	default:
		return soft.AcquireAll(r.list())
	}
	c.holdN++
	r.held = true
	return true
}

// popRecv retires the head of the receive queue and releases its
// regions; rqMu is held.
func (c *conn) popRecv() {
	r := &c.rq[c.rqHead]
	if !r.held {
		soft.ReleaseAll(r.list())
	} else if c.holdN--; c.holdN == 0 {
		c.holdMR.Release()
		c.holdMR = nil
	}
	*r = rwr{}
	c.rqHead = (c.rqHead + 1) % len(c.rq)
	c.rqLen--
}

func (c *conn) PostRecv(wrid uint64, buf []byte, mr *rdma.MR) error {
	r := rwr{wrid: wrid}
	r.one[0] = rdma.SGE{Buf: buf, MR: mr}
	return c.postRecv(&r)
}

func (c *conn) PostRecvv(wrid uint64, sgl []rdma.SGE) error {
	r := rwr{wrid: wrid, sgl: append([]rdma.SGE(nil), sgl...)}
	return c.postRecv(&r)
}

func (c *conn) postRecv(r *rwr) error {
	total, err := soft.CheckLocal(c.dev.pd, r.list(), rdma.AccessLocalWrite, 0, 0)
	if err != nil {
		return c.opErr("post_recv", err)
	}
	r.total = total
	// The regions are taken under rqMu, after the state is read: a post
	// racing Close either lands before Close's flush (which releases it)
	// or sees the conn closed, so no reference outlives Close (taken
	// before the lock, one did: TestDirectSendVersusClose's Deregister
	// after Close found its region busy, under load).
	c.rqMu.Lock()
	defer c.rqMu.Unlock()
	switch c.state.Load() {
	case stateClosed:
		return c.opErr("post_recv", rdma.ErrClosed)
	case stateError:
		c.pushRecv(rdma.WC{WRID: r.wrid, Status: rdma.StatusFlushed, Opcode: rdma.OpRecv})
		c.kickRecv()
		return nil
	}
	if c.rqLen == len(c.rq) {
		return c.opErr("post_recv", rdma.ErrQueueFull)
	}
	if !c.acquireRecv(r) {
		return c.opErr("post_recv", rdma.ErrNotRegistered)
	}
	c.rq[(c.rqHead+c.rqLen)%len(c.rq)] = *r
	c.rqLen++
	// Plain stores: the atomic store of the count publishes them.
	off, addr := directTarget(r)
	c.local.putRecv(c.posted, uint64(total), off, addr)
	if uint64(total) < c.minCap {
		// Before the count: a sender that sees this receive sees the bound.
		c.minCap = uint64(total)
		c.local.u64(offRecvMinCap).Store(c.minCap)
	}
	c.posted++
	c.ringStore(c.local.u64(offRecvPosted), c.posted)
	c.local.recvBell().ring()
	return nil
}

// Close flushes outstanding work, tells the peer (it sees the socket
// close), stops the goroutines and unmaps the shared memory.
func (c *conn) Close() error {
	c.closeOnce.Do(func() {
		c.dev.retire(c)
		c.state.Store(stateClosed)
		if q := c.recvShared.Load(); q != nil {
			q.unbind(c) // no Poll looks at our segments after this
		}
		c.errMu.Lock()
		if c.err == nil {
			c.err = c.opErr("close", rdma.ErrClosed)
		}
		c.errMu.Unlock()
		close(c.done)
		c.wakeAll()
		c.sqMu.Lock()
		c.sqIdle.Broadcast() // a peer-death flush waiting for the queue
		c.sqMu.Unlock()
		c.uc.Close()
		c.wg.Wait()
		// Wait for a post executing inline, then flush the queue.
		c.sqMu.Lock()
		for i := range c.pending {
			c.complete(&c.pending[i], rdma.StatusFlushed)
		}
		c.pending = nil
		c.sqMu.Unlock()
		c.flushRecvs()
		closed := c.opErr("get_comp", rdma.ErrClosed)
		c.sendCQ.Shut(closed)
		c.recvCQ.Shut(closed)
		// Lock order: progMu, then rqMu (drain delivers under both).
		c.progMu.Lock()
		c.rqMu.Lock()
		c.local.unmap()
		c.peer.unmap()
		c.bell.close()
		c.peerBell.close()
		c.rqMu.Unlock()
		c.progMu.Unlock()
		c.arena.release()
		if c.pidfd >= 0 {
			unix.Close(c.pidfd)
		}
	})
	return nil
}

// pushSend reports a send-queue completion to the queue's CQ.
func (c *conn) pushSend(wc rdma.WC) {
	if q := c.sendShared.Load(); q != nil {
		q.push(wc)
		return
	}
	c.sendCQ.Push(wc)
}

// completeRecv reports a receive completion found by a drain on behalf of
// out's Poll: straight into out, skipping the queue, when nothing is
// queued ahead of it (so this connection's completions stay in order) and
// the CQ is not armed (else it must reach the queue, which sends the
// token); otherwise into the receive queue's CQ. rqMu is held.
func (c *conn) completeRecv(out *wcBuf, wc rdma.WC) {
	if out != nil && out.n < len(out.wcs) {
		if q := c.recvShared.Load(); q != nil && q.queued.Load() == 0 && !q.armed() {
			out.wcs[out.n] = wc
			out.n++
			return
		}
	}
	c.pushRecv(wc)
}

// pushRecv reports a receive completion to the queue's CQ.
func (c *conn) pushRecv(wc rdma.WC) {
	if q := c.recvShared.Load(); q != nil {
		q.push(wc)
		return
	}
	c.recvCQ.Push(wc)
}

func (c *conn) String() string { return fmt.Sprintf("shm conn to pid %d", c.peerPid) }

// directTarget says where a sender may copy straight into r: its arena
// offset if r is one buffer of Alloc'd memory, else noArena and, if r is
// one buffer of registered memory, its address (for cross-memory attach).
func directTarget(r *rwr) (off, addr uint64) {
	if r.sgl != nil || len(r.one[0].Buf) == 0 {
		return noArena, 0
	}
	mr := r.one[0].MR
	info, ok := mr.Handle.(*mrInfo)
	if !ok {
		return noArena, 0
	}
	if info.mem == nil {
		return noArena, rdma.AddrOf(r.one[0].Buf)
	}
	return info.off + (rdma.AddrOf(r.one[0].Buf) - mr.Addr()), 0
}

// fenceRecvs stops direct sends into our receive buffers and waits for
// those in flight, before the buffers are released (flush, close): after
// it, the peer copies into the ring instead, where nothing lands. The
// segment must be mapped.
func (c *conn) fenceRecvs() {
	if c.local == nil || c.local.mem == nil {
		return
	}
	c.local.u32(offRecvFenced).Store(1)
	if c.waitZero(c.local.u32(offDirectUsers)) {
		return
	}
	// The peer is frozen in a copy into one of the posted receives (a
	// single buffer of Alloc'd memory, directTarget): keep their memory
	// out of reuse. rqMu is held.
	for i, j := 0, c.rqHead; i < c.rqLen; i, j = i+1, (j+1)%len(c.rq) {
		if r := &c.rq[j]; r.sgl == nil && r.one[0].MR != nil {
			info, _ := r.one[0].MR.Handle.(*mrInfo)
			c.dev.taint(info, c)
		}
	}
}
