//go:build linux

package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gorun-hpc/gorun/transport/rdma"
	"github.com/gorun-hpc/gorun/transport/rdma/internal/soft"
)

// Ring records: a header, then the payload, padded to 64 bytes. The first
// word is the record's stamp, its ring position plus one, stored last: the
// receiver polls the word at its consumer position, not the producer's
// head, so that a record costs the receiver one cache miss, not two. Before
// it stamps a record the producer zeroes the stamp word of the next one (it
// keeps a line of space for it), so a word at the consumer position is
// either zero or the stamp of a record written in full, never stale bytes of
// an earlier lap.
//
//	0 stamp  8 type  12 payload length  16 imm  20 flags  24 total  32 offset
//
// A whole small send (recSmall) has only the first 16 bytes of header, so
// that an 8-byte message and the collectives engine's 32-byte header fit in
// one cache line with it.
const (
	recHdr      = 40
	recSmallHdr = 16

	recPad        = 1 // skip total bytes (to the ring's start)
	recSend       = 2 // a fragment of a send: payload at offset of total
	recWriteImm   = 3 // consumes a receive: total bytes were written, imm
	recLenErr     = 4 // consumes a receive too small for a total-byte send
	recError      = 5 // the sender entered the error state; payload: why
	recSendDirect = 6 // consumes a receive: total bytes were copied into it
	recSmall      = 7 // a whole send of at most smallSend bytes, header 16

	fragFirst = 1
	fragLast  = 2

	// maxFrag is the largest payload of one record; longer sends are
	// fragmented so that the receiver copies out while the sender copies
	// in.
	maxFrag = 64 << 10
	// smallSend is the largest send that always travels in one recSmall
	// record, whatever the receive: the receiver's copy out of the ring is
	// cheaper than the cache misses of a direct copy and its record.
	smallSend = 1024 - recSmallHdr
	// stampRoom is the space a record needs beyond its own: the next
	// record's stamp word, which stamp may zero.
	stampRoom = 64
)

func recSize(payload int) int { return alignUp(recHdr+payload, 64) }

func smallSize(payload int) int { return alignUp(recSmallHdr+payload, 64) }

// execState belongs to whoever executes the send queue (one at a time).
type execState struct {
	keys     map[uint32]int // rkey -> peer key-table slot
	lastKey  uint32         // the last rkey found, and its slot: keys
	lastIdx  int            // without the map lookup for a repeated key
	consumed uint64         // peer receives consumed
	head     uint64         // our ring's producer position
	// What was last read of the peer's receives posted and of our ring's
	// consumer position: they are read again only when they do not
	// suffice, so that a stream of messages does not pull the peer's
	// cache lines over at every one.
	posted uint64
	tail   uint64
	// minCap is what the peer last published as a lower bound of the
	// capacity of its outstanding receives: a send no longer than it needs
	// no look at the receive's own entry.
	minCap uint64
	iov    [soft.MaxSGE]unix.Iovec
}

// exec runs w. Without block it returns false, having done nothing, when w
// would have to wait (no receive posted, ring full, fallback round trip).
func (c *conn) exec(w *wr, block bool) bool {
	if c.state.Load() != stateActive {
		c.complete(w, rdma.StatusFlushed)
		return true
	}
	switch w.op {
	case rdma.OpSend:
		return c.execSend(w, block)
	case rdma.OpRead:
		return c.execRemote(w, block)
	default:
		return c.execWrite(w, block)
	}
}

// fail completes w with st and moves the connection to the error state.
// The peer learns it from an error record in the ring, after everything
// posted before w (the socket is only used when the ring is full). A
// length error needs no record: the peer's receive fails on its own.
func (c *conn) fail(w *wr, st rdma.Status, what string) {
	if st == rdma.StatusRemoteAccessError {
		c.dev.counts.access.Add(1)
	}
	wc := rdma.WC{WRID: w.wrid, Status: st, Opcode: w.op}
	reason := c.opErr("post_"+w.op.String(), fmt.Errorf("%s (peer pid %d): %w", what, c.peerPid, &rdma.WCError{WC: wc}))
	if c.markError(reason, false) {
		if st != rdma.StatusRemoteInvalidRequest {
			msg := []byte(reason.Error())
			msg = msg[:min(len(msg), maxInline)]
			if rec, ok := c.reserve(recSize(len(msg)), false); ok {
				putHdr(rec, recError, uint32(len(msg)), 0, 0, 0, 0)
				copy(rec[recHdr:], msg)
				c.publish(rec)
			} else {
				c.sendCtl(msgError, msg)
			}
		}
		c.flushRecvs()
	}
	c.complete(w, st)
}

func (c *conn) peerRecvReady() bool {
	if c.exe.posted > c.exe.consumed {
		return true
	}
	c.exe.posted = c.peer.u64(offRecvPosted).Load()
	c.exe.minCap = c.peer.u64(offRecvMinCap).Load() // stored before the count
	return c.exe.posted > c.exe.consumed
}

// needRecv makes sure the peer has a receive posted, waiting RNRRetry times
// RNRTimer when block is set. It reports whether w may go on; when it has
// completed w it returns false, done.
func (c *conn) needRecv(w *wr, block bool) (ok, done bool) {
	if c.peerRecvReady() {
		return true, false
	}
	if !block {
		return false, false
	}
	cfg := c.dev.cfg
	cond := func() bool { return c.peerRecvReady() || c.state.Load() != stateActive }
	for try := 0; cfg.RNRRetry < 0 || try < cfg.RNRRetry; try++ {
		deadline := time.Now().Add(cfg.RNRTimer)
		for left := cfg.RNRTimer; left > 0 && !cond(); left = time.Until(deadline) {
			c.peer.recvBell().wait(cond, left)
		}
		if cond() {
			break
		}
	}
	switch {
	case c.state.Load() != stateActive:
		c.complete(w, rdma.StatusFlushed)
	case c.peerRecvReady():
		return true, false
	default:
		c.fail(w, rdma.StatusRNRRetryExceeded, fmt.Sprintf("receiver not ready after %d retries %v apart", cfg.RNRRetry, cfg.RNRTimer))
	}
	return false, true
}

func (c *conn) spaceFor(size int) bool {
	size += stampRoom
	idx := int(c.exe.head & (ringSize - 1))
	if ringSize-idx < size {
		size += ringSize - idx
	}
	if ringSize-int(c.exe.head-c.exe.tail) >= size {
		return true
	}
	c.exe.tail = c.local.u64(offTail).Load()
	return ringSize-int(c.exe.head-c.exe.tail) >= size
}

// reserve returns room for a record of size bytes in our ring, waiting for
// the peer to consume when block is set. It fails when the connection
// leaves the active state.
func (c *conn) reserve(size int, block bool) ([]byte, bool) {
	cond := func() bool { return c.spaceFor(size) || c.state.Load() != stateActive }
	for !c.spaceFor(size) {
		if !block || c.state.Load() != stateActive {
			return nil, false
		}
		c.local.spaceBell().wait(cond, 100*time.Millisecond)
	}
	ring := c.local.ring()
	idx := int(c.exe.head & (ringSize - 1))
	if pad := ringSize - idx; pad < size {
		putHdr(ring[idx:], recPad, 0, 0, 0, uint64(pad), 0)
		c.stamp(ring[idx : idx+pad])
		c.exe.head += uint64(pad)
		idx = 0
	}
	return ring[idx : idx+size], true
}

func putHdr(b []byte, typ, plen, imm, flags uint32, total, off uint64) {
	binary.LittleEndian.PutUint32(b[8:], typ)
	binary.LittleEndian.PutUint32(b[12:], plen)
	binary.LittleEndian.PutUint32(b[16:], imm)
	binary.LittleEndian.PutUint32(b[20:], flags)
	binary.LittleEndian.PutUint64(b[24:], total)
	binary.LittleEndian.PutUint64(b[32:], off)
}

// stamp makes rec, written in full at ring position c.exe.head, visible to
// the receiver by storing its stamp, head+1: the receiver takes a word at
// its read position p for a record only if it is p+1, and any other value
// for "not yet" (a stamp of an earlier lap, or payload). The word where
// the next record will start is left as it is, unless an earlier lap left
// there the very value the next record's stamp will have (payload that
// happens to equal it): that is zeroed first. Zeroing it always would cost
// every message a cache-line ownership transfer ahead of its stamp, since
// the receiver polls that line. The compiler keeps plain stores ahead of
// an atomic one, and x86 makes stores visible in program order.
func (c *conn) stamp(rec []byte) {
	next := c.exe.head + uint64(len(rec))
	w := c.local.ring()[next&(ringSize-1):]
	if binary.LittleEndian.Uint64(w) == next+1 {
		binary.LittleEndian.PutUint64(w, 0)
	}
	storeRelease64((*atomic.Uint64)(unsafe.Pointer(&rec[0])), c.exe.head+1)
}

// publish stamps the record rec, reserved at the head of our ring, moves
// the head past it and rings the peer (who sleeps on the head, not the
// stamps).
func (c *conn) publish(rec []byte) {
	c.stamp(rec)
	c.exe.head += uint64(len(rec))
	c.ringStore(c.local.u64(offHead), c.exe.head)
	c.local.dataBell().ring()
}

// putRecord writes a payload-less record.
func (c *conn) putRecord(typ, imm uint32, total uint64, block bool) bool {
	rec, ok := c.reserve(recSize(0), block)
	if !ok {
		return false
	}
	putHdr(rec, typ, 0, imm, 0, total, 0)
	c.publish(rec)
	return true
}

func (c *conn) execSend(w *wr, block bool) bool {
	ok, done := c.needRecv(w, block)
	if !ok {
		return done
	}
	if w.total <= smallSend && uint64(w.total) <= c.exe.minCap {
		// The common small send: one record, no look at the receive.
		if !block && !c.spaceFor(smallSize(w.total)) {
			return false
		}
		rec, ok := c.reserve(smallSize(w.total), block)
		if !ok {
			c.complete(w, rdma.StatusFlushed)
			return true
		}
		binary.LittleEndian.PutUint32(rec[8:], recSmall)
		binary.LittleEndian.PutUint32(rec[12:], uint32(w.total))
		gather(rec[recSmallHdr:recSmallHdr+w.total], w.list(), 0)
		c.publish(rec)
		c.exe.consumed++
		c.complete(w, rdma.StatusSuccess)
		return true
	}
	first := min(w.total, maxFrag)
	direct := c.directOK(w.total)
	if !block && (direct && !c.spaceFor(recSize(0)) || !direct && (w.total > maxFrag || !c.spaceFor(recSize(first)))) {
		return false
	}
	if capacity := c.peer.recvLen(c.exe.consumed).Load(); uint64(w.total) > capacity {
		if !c.putRecord(recLenErr, 0, uint64(w.total), block) {
			c.complete(w, rdma.StatusFlushed)
			return true
		}
		c.exe.consumed++
		c.fail(w, rdma.StatusRemoteInvalidRequest, fmt.Sprintf("%d-byte send into a %d-byte receive", w.total, capacity))
		return true
	}
	sgl := w.list()
	if c.sendDirect(w, sgl) {
		if !c.putRecord(recSendDirect, 0, uint64(w.total), block) {
			c.complete(w, rdma.StatusFlushed)
			return true
		}
		c.exe.consumed++
		c.complete(w, rdma.StatusSuccess)
		return true
	}
	for off := 0; ; {
		n := min(w.total-off, maxFrag)
		rec, ok := c.reserve(recSize(n), block)
		if !ok {
			c.complete(w, rdma.StatusFlushed)
			return true
		}
		var flags uint32
		if off == 0 {
			flags |= fragFirst
		}
		if off+n == w.total {
			flags |= fragLast
		}
		putHdr(rec, recSend, uint32(n), 0, flags, uint64(w.total), uint64(off))
		gather(rec[recHdr:recHdr+n], sgl, off)
		c.publish(rec)
		off += n
		if off == w.total {
			break
		}
	}
	c.exe.consumed++
	c.complete(w, rdma.StatusSuccess)
	return true
}

func (c *conn) execWrite(w *wr, block bool) bool {
	if w.hasImm {
		ok, done := c.needRecv(w, block)
		if !ok {
			return done
		}
		if !block && !c.spaceFor(recSize(0)) {
			return false
		}
	}
	if w.total > 0 {
		st, ok := c.remoteCopy(w, block)
		if !ok {
			return false
		}
		if st != rdma.StatusSuccess {
			c.refused(w, st)
			return true
		}
	}
	if w.hasImm {
		if !c.putRecord(recWriteImm, w.imm, uint64(w.total), block) {
			c.complete(w, rdma.StatusFlushed)
			return true
		}
		c.exe.consumed++
	}
	c.complete(w, rdma.StatusSuccess)
	return true
}

// execRemote runs a read.
func (c *conn) execRemote(w *wr, block bool) bool {
	if w.total > 0 {
		st, ok := c.remoteCopy(w, block)
		if !ok {
			return false
		}
		if st != rdma.StatusSuccess {
			c.refused(w, st)
			return true
		}
	}
	c.complete(w, rdma.StatusSuccess)
	return true
}

// refused completes w, a write or read the peer's key table refused. A
// peer that is closing the connection revoked its keys first (retire):
// the refusal is its close, and w is flushed, as the rest of the queue is
// once its socket ends, which delivers what it sent before (its
// goodbye). Else the access was bad, and the connection fails (fail).
// Before, a rank still writing while its peer closed had the connection
// fail with a remote access error, and took the peer's goodbye for a
// failure.
func (c *conn) refused(w *wr, st rdma.Status) {
	if st == rdma.StatusRemoteAccessError && c.peer.u32(offClosing).Load() != 0 {
		c.complete(w, rdma.StatusFlushed)
		return
	}
	c.fail(w, st, c.remoteWhat(w, st))
}

func (c *conn) remoteWhat(w *wr, st rdma.Status) string {
	if st == rdma.StatusRemoteAccessError {
		return fmt.Sprintf("%s of %d bytes at %#x rkey %#x refused (key, bounds or access)", w.op, w.total, w.raddr, w.rkey)
	}
	return fmt.Sprintf("%s of %d bytes at %#x rkey %#x failed", w.op, w.total, w.raddr, w.rkey)
}

// remoteCopy moves w's bytes to (write) or from (read) the peer's region
// after checking the key, the bounds and the access in the peer's key
// table. It reports false when it would block and block is not set.
func (c *conn) remoteCopy(w *wr, block bool) (rdma.Status, bool) {
	need := uint32(rdma.AccessRemoteWrite)
	if w.op == rdma.OpRead {
		need = uint32(rdma.AccessRemoteRead)
	}
	idx, cached := c.exe.lastIdx, w.rkey == c.exe.lastKey && w.rkey != 0
	if !cached {
		idx, cached = c.exe.keys[w.rkey]
	}
	var off uint64
	entered := false
	if cached {
		off, entered = c.peer.enter(idx, w.rkey, w.raddr, w.total, need)
	}
	if !entered {
		if idx = c.peer.findKey(w.rkey); idx >= 0 {
			off, entered = c.peer.enter(idx, w.rkey, w.raddr, w.total, need)
		}
		if !entered {
			delete(c.exe.keys, w.rkey)
			c.exe.lastKey = 0
			return rdma.StatusRemoteAccessError, true
		}
		if len(c.exe.keys) >= 2*maxKeys {
			clear(c.exe.keys) // stale keys of regions long deregistered
		}
		c.exe.keys[w.rkey] = idx
	}
	c.exe.lastKey, c.exe.lastIdx = w.rkey, idx
	sgl := w.list()
	switch {
	case off != noArena:
		defer c.peer.leave(idx)
		if off+uint64(w.total) > uint64(len(c.peerArena)) {
			return rdma.StatusRemoteAccessError, true
		}
		remote := c.peerArena[off : off+uint64(w.total)]
		if w.op == rdma.OpRead {
			scatter(sgl, 0, remote)
		} else {
			gather(remote, sgl, 0)
		}
		return rdma.StatusSuccess, true
	case c.cma:
		defer c.peer.leave(idx)
		return c.cmaCopy(w, sgl), true
	default:
		c.peer.leave(idx) // the peer checks again and copies itself
		if !block {
			return 0, false
		}
		return c.fallbackCopy(w, sgl), true
	}
}

// cmaCopy is the cross-memory-attach path for registered Go memory.
func (c *conn) cmaCopy(w *wr, sgl []rdma.SGE) rdma.Status {
	iov := c.exe.iov[:0]
	for _, s := range sgl {
		if len(s.Buf) > 0 {
			v := unix.Iovec{Base: unsafe.SliceData(s.Buf)}
			v.SetLen(len(s.Buf)) // Len is 32 bits on 32-bit platforms
			iov = append(iov, v)
		}
	}
	remote := [1]unix.RemoteIovec{{Base: uintptr(w.raddr), Len: w.total}}
	var n int
	var err error
	for {
		if w.op == rdma.OpRead {
			n, err = unix.ProcessVMReadv(c.peerPid, iov, remote[:], 0)
		} else {
			n, err = unix.ProcessVMWritev(c.peerPid, iov, remote[:], 0)
		}
		if err != unix.EINTR {
			break
		}
	}
	switch {
	case err == nil && n == w.total:
		return rdma.StatusSuccess
	case errors.Is(err, unix.ESRCH):
		return rdma.StatusRetryExceeded
	default:
		return rdma.StatusRemoteAccessError
	}
}

// gather copies the concatenation of sgl, from byte off on, into dst.
func gather(dst []byte, sgl []rdma.SGE, off int) {
	for _, s := range sgl {
		if len(dst) == 0 {
			return
		}
		if off >= len(s.Buf) {
			off -= len(s.Buf)
			continue
		}
		n := copy(dst, s.Buf[off:])
		dst = dst[n:]
		off = 0
	}
}

// scatter copies src into the concatenation of sgl from byte off on.
func scatter(sgl []rdma.SGE, off int, src []byte) {
	for _, s := range sgl {
		if len(src) == 0 {
			return
		}
		if off >= len(s.Buf) {
			off -= len(s.Buf)
			continue
		}
		n := copy(s.Buf[off:], src)
		src = src[n:]
		off = 0
	}
}

// cmaDirectMin is the smallest send written with process_vm_writev into a
// registered receive buffer; smaller ones go through the ring, which costs
// no syscall.
const cmaDirectMin = 64 << 10

// directOK reports whether a total-byte send may go straight into the
// peer's next receive.
func (c *conn) directOK(total int) bool {
	if total == 0 {
		return false
	}
	seq := c.exe.consumed
	return c.peer.recvOff(seq).Load() != noArena || c.cma && total >= cmaDirectMin && c.peer.recvAddr(seq).Load() != 0
}

// sendDirect copies w straight into the peer's posted receive: a memcpy
// into the peer's arena, or process_vm_writev into its registered memory
// for large sends (one copy instead of two). The peer's fence (set before
// it releases receive buffers) and the users counter make the copy safe
// against a concurrent flush, as for the key table.
func (c *conn) sendDirect(w *wr, sgl []rdma.SGE) bool {
	if !c.directOK(w.total) {
		return false
	}
	seq := c.exe.consumed
	off, addr := c.peer.recvOff(seq).Load(), c.peer.recvAddr(seq).Load()
	if off != noArena && off+uint64(w.total) > uint64(len(c.peerArena)) {
		return false
	}
	users := c.peer.u32(offDirectUsers)
	users.Add(1)
	defer users.Add(^uint32(0))
	if c.peer.u32(offRecvFenced).Load() != 0 {
		return false
	}
	if off != noArena {
		gather(c.peerArena[off:off+uint64(w.total)], sgl, 0)
		return true
	}
	remote := *w
	remote.op, remote.raddr = rdma.OpWrite, addr
	return c.cmaCopy(&remote, sgl) == rdma.StatusSuccess
}
