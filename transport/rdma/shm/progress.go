//go:build linux

package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/gorun-hpc/gorun/internal/release"
	"github.com/gorun-hpc/gorun/transport/rdma"
)

var errProtocolRing = errors.New("malformed record in the peer's ring")

// progressLoop consumes the peer's ring: sends land in posted receives,
// write-with-immediate notifications consume them. It spins briefly, then
// sleeps on the peer's data doorbell, except while someone else polls the
// ring: a private receive poller (GetRecvComp, which sleeps on the
// doorbell itself), or the caller of the shared receive CQ's Poll, which
// drains the ring whenever it polls. Bound to a shared CQ, the goroutine
// sleeps on the doorbell only while the CQ is armed, so that while the
// caller spins in Poll the peer's sends make no wake-up write.
func (c *conn) progressLoop() {
	defer c.wg.Done()
	head, tail := c.peer.u64(offHead), c.peer.u64(offTail)
	bell := c.peer.dataBell()
	more := func() bool {
		return head.Load() != tail.Load() || c.state.Load() == stateClosed || c.peerGone.Load() || c.pollers.Load() > 0
	}
	var q *cq // the shared receive CQ, once bound
	armedMore := func() bool { return more() || !q.armed() }
	// A goroutine that starts before its conn is bound to a shared CQ
	// (DialQP binds after the handshake) must not sleep in private mode
	// once it is: under load it reached that sleep late, inside
	// TestSharedCQSpin's window ("1 doorbell sleep while both sides spin").
	privateMore := func() bool { return more() || c.recvShared.Load() != nil }
	for {
		if c.state.Load() == stateClosed {
			return
		}
		c.progMu.Lock()
		got := c.state.Load() != stateClosed && c.drain(nil)
		c.progMu.Unlock()
		if got {
			continue
		}
		if c.peerGone.Load() {
			// Everything the peer published has been delivered.
			<-c.done
			return
		}
		if c.pollers.Load() > 0 {
			select {
			case <-c.pollIdle:
			case <-c.done:
				return
			}
			continue
		}
		if q = c.recvShared.Load(); q == nil {
			bell.wait(privateMore, 0)
			continue
		}
		if !q.armed() {
			// Poll drains the ring; Arm kicks us. A kick left over from
			// an earlier Arm costs one more turn.
			select {
			case <-c.armKick:
			case <-c.done:
				return
			}
			continue
		}
		// Armed: the poller is about to sleep on Notify. No spin: it has
		// spun already.
		bell.waitNoSpin(armedMore, 0)
	}
}

// drain handles every published record and reports whether there was any.
// progMu is held. Receive completions go to out when the connection's
// receive CQ allows it (see completeRecv), else to the receive CQ.
// In the error state records are skipped (their receives were flushed).
func (c *conn) drain(out *wcBuf) bool {
	ring := c.peer.ring()
	if ringStamp(ring, c.rxTail) != c.rxTail+1 {
		return false
	}
	tail := c.peer.u64(offTail)
	space := c.peer.spaceBell()
	for {
		idx := int(c.rxTail & (ringSize - 1))
		if ringStamp(ring, c.rxTail) != c.rxTail+1 {
			break // not yet (stamp explains why any other value is)
		}
		h := ring[idx:]
		typ := binary.LittleEndian.Uint32(h[8:])
		plen := int(binary.LittleEndian.Uint32(h[12:]))
		hdr := recHdr
		if typ == recSmall {
			hdr = recSmallHdr
		}
		size := alignUp(hdr+plen, 64)
		if typ == recPad {
			size = int(binary.LittleEndian.Uint64(h[24:]))
		}
		if size <= 0 || size > ringSize-idx || plen > maxFrag || size&63 != 0 {
			// Skip what the peer published: its records are not ours to trust.
			c.setError(c.opErr("recv", errProtocolRing), true)
			c.rxTail = c.peer.u64(offHead).Load()
			release.Store64(&c.rxPos, c.rxTail)
			c.ringStore(tail, c.rxTail)
			space.ring()
			return true
		}
		switch {
		case typ == recPad || c.state.Load() != stateActive:
		case typ == recError:
			c.setError(c.opErr("conn", fmt.Errorf("peer pid %d: %s", c.peerPid, h[recHdr:recHdr+plen])), false)
		default:
			c.deliver(out, typ, h[:hdr], h[hdr:hdr+plen])
		}
		c.rxTail += uint64(size)
		release.Store64(&c.rxPos, c.rxTail)
		c.ringStore(tail, c.rxTail)
		space.ring()
	}
	return true
}

// ringStamp is the stamp word of the record at ring position pos: pos+1
// once the producer has written it in full, anything else before (stamp).
func ringStamp(ring []byte, pos uint64) uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&ring[pos&(ringSize-1)])).Load()
}

// deliver applies one record to the head of the receive queue.
func (c *conn) deliver(out *wcBuf, typ uint32, h, payload []byte) {
	var imm, flags uint32
	var total, off uint64
	if typ == recSmall {
		total, flags = uint64(len(payload)), fragFirst|fragLast
	} else {
		imm = binary.LittleEndian.Uint32(h[16:])
		flags = binary.LittleEndian.Uint32(h[20:])
		total = binary.LittleEndian.Uint64(h[24:])
		off = binary.LittleEndian.Uint64(h[32:])
	}
	var fault error
	c.rqMu.Lock()
	if c.rqLen == 0 {
		c.rqMu.Unlock()
		c.setError(c.opErr("recv", fmt.Errorf("peer pid %d sent without a posted receive: %w", c.peerPid, errProtocolRing)), true)
		return
	}
	r := &c.rq[c.rqHead]
	switch typ {
	case recSend, recSmall:
		if off+uint64(len(payload)) > uint64(r.total) || (flags&fragFirst != 0) != (off == 0) {
			fault = c.opErr("recv", errProtocolRing)
			break
		}
		scatter(r.list(), int(off), payload)
		if flags&fragLast != 0 {
			wc := rdma.WC{WRID: r.wrid, Opcode: rdma.OpRecv, ByteLen: int(total)}
			c.popRecv() // releases the regions before the completion shows
			c.completeRecv(out, wc)
		}
	case recSendDirect:
		if total > uint64(r.total) {
			fault = c.opErr("recv", errProtocolRing)
			break
		}
		wc := rdma.WC{WRID: r.wrid, Opcode: rdma.OpRecv, ByteLen: int(total)}
		c.popRecv()
		c.completeRecv(out, wc)
	case recWriteImm:
		wc := rdma.WC{WRID: r.wrid, Opcode: rdma.OpRecvWriteImm, ByteLen: int(total), Imm: imm, HasImm: true}
		c.popRecv()
		c.completeRecv(out, wc)
	case recLenErr:
		// Err first, then the completion, then the flushes behind it.
		wc := rdma.WC{WRID: r.wrid, Status: rdma.StatusLocalLengthError, Opcode: rdma.OpRecv, ByteLen: int(total)}
		reason := c.opErr("recv", fmt.Errorf("%d-byte message from peer pid %d into a %d-byte receive: %w",
			total, c.peerPid, r.total, &rdma.WCError{WC: wc}))
		c.popRecv()
		c.markError(reason, true)
		c.completeRecv(out, wc)
		c.flushRecvsLocked()
	default:
		fault = c.opErr("recv", errProtocolRing)
	}
	c.rqMu.Unlock()
	if fault != nil {
		c.setError(fault, true)
	}
}
