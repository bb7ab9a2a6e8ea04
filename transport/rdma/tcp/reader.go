package tcp

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/gorun-hpc/gorun/transport/rdma"
	"github.com/gorun-hpc/gorun/transport/rdma/internal/soft"
)

// readLoop is the only reader of the socket. It never waits for the
// writer; the only waits are the bounded receiver-not-ready ones.
func (c *conn) readLoop() {
	defer close(c.readDone)
	err := c.serve()
	if errors.Is(err, errProtocol) {
		c.dev.counts.protocol.Add(1)
	}
	c.fail(err)
}

// serve reads and handles frames until the stream ends or breaks the
// protocol. It is the whole decoder: everything it does with peer bytes is
// checked against the protection domain first.
func (c *conn) serve() error {
	var h header
	for {
		if _, err := io.ReadFull(c.r, c.rhdr[:c.hlen]); err != nil {
			return err
		}
		if c.cfg.Checksum {
			if !intact(&c.rhdr) {
				return c.corruptHeader()
			}
			h.crc = binary.LittleEndian.Uint32(c.rhdr[hdrLen:])
		}
		if err := h.decode(head(&c.rhdr)); err != nil {
			return err
		}
		if h.op <= opReadReq {
			if h.seq != c.expect {
				return fmt.Errorf("%w: request %d, want %d", errProtocol, h.seq, c.expect)
			}
			c.expect++
		}
		if c.discard {
			if err := c.drainPayload(&h); err != nil {
				return err
			}
			continue
		}
		var err error
		switch h.op {
		case opWrite, opWriteImm:
			err = c.serveWrite(&h)
		case opSend:
			err = c.serveSend(&h)
		case opReadReq:
			c.serveRead(&h)
		case opAck:
			err = c.onAck(&h)
		case opNak:
			err = c.onNak(&h)
		case opReadResp:
			err = c.onReadResp(&h)
		}
		if err != nil {
			return err
		}
	}
}

func (c *conn) drainPayload(h *header) error {
	if !h.hasPayload() {
		return nil
	}
	return c.drain(int(h.length))
}

// drain reads and drops n payload bytes (n ≤ maxMsg) into the scratch
// buffer, which is never registered.
func (c *conn) drain(n int) error {
	if c.scratch == nil && n > 0 {
		c.scratch = make([]byte, 32<<10) // rare: only invalid requests
	}
	for n > 0 {
		k := min(n, len(c.scratch))
		if _, err := io.ReadFull(c.r, c.scratch[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

func (c *conn) ack(h *header) {
	if h.flags&fAck != 0 {
		c.queueResp(header{op: opAck, seq: h.seq}, nil, nil)
	}
}

// remoteError answers request h with a NAK and moves this end to the error
// state; the initiator moves there when the NAK arrives.
func (c *conn) remoteError(h *header, st rdma.Status, op string, cause error) {
	if st == rdma.StatusRemoteAccessError {
		c.dev.counts.access.Add(1)
	}
	c.setError(opErr(op, &peerError{peer: c.peer, err: cause}))
	c.queueResp(header{op: opNak, seq: h.seq, status: uint16(st)}, nil, nil)
}

// setError moves a live conn to the error state: the reader stops serving
// (every later frame is drained), the receive queue is flushed now and the
// writer flushes the send queue. Only the reader calls it.
func (c *conn) setError(err error) {
	c.mu.Lock()
	c.setErrorLocked(err)
	c.mu.Unlock()
	kick(c.wake)
}

func (c *conn) setErrorLocked(err error) {
	c.discard = true
	if c.state == stateOK {
		c.state = stateError
		if c.err == nil {
			c.err = err
		}
		c.flushRQ()
	}
}

func (c *conn) serveWrite(h *header) error {
	n := int(h.length)
	b, mr := c.dev.pd.Remote(h.rkey, h.addr, n, rdma.AccessRemoteWrite)
	if mr == nil {
		if err := c.drain(n); err != nil {
			return err
		}
		c.remoteError(h, rdma.StatusRemoteAccessError, "serve_write",
			fmt.Errorf("write of %d bytes at %#x rkey %#x: %w", n, h.addr, h.rkey, rdma.ErrAccess))
		return nil
	}
	var rw *recvWR
	if h.op == opWriteImm {
		var err error
		if rw, err = c.waitRecv(); err != nil || rw == nil {
			mr.Release()
			return c.rnrExceeded(h, err)
		}
	}
	crc, err := c.readInto(b, 0)
	mr.Release()
	if err != nil {
		return err
	}
	if c.badCRC(h, crc) {
		c.badPayload(h, "serve_write")
		return nil
	}
	if rw != nil {
		c.consumeRecv(rdma.WC{WRID: rw.wrid, Opcode: rdma.OpRecvWriteImm, ByteLen: n, Imm: h.imm, HasImm: true})
	}
	c.ack(h)
	return nil
}

func (c *conn) serveSend(h *header) error {
	n := int(h.length)
	rw, err := c.waitRecv()
	if err != nil || rw == nil {
		return c.rnrExceeded(h, err)
	}
	if n > rw.length {
		if err := c.drain(n); err != nil {
			return err
		}
		// Error state first (so Err is set when the failure is seen),
		// then this receive fails, then the rest are flushed.
		err := opErr("serve_send", &peerError{peer: c.peer,
			err: fmt.Errorf("send of %d bytes into a %d-byte receive: %w", n, rw.length, rdma.ErrInvalid)})
		c.mu.Lock()
		c.discard = true
		c.state = stateError
		c.err = cmp.Or(c.err, err)
		c.rqHead++
		soft.ReleaseAll(rw.sgl)
		clear(rw.sgl)
		c.recvCQ.Push(rdma.WC{WRID: rw.wrid, Status: rdma.StatusLocalLengthError, Opcode: rdma.OpRecv, ByteLen: n})
		c.flushRQ()
		c.mu.Unlock()
		c.queueResp(header{op: opNak, seq: h.seq, status: uint16(rdma.StatusRemoteInvalidRequest)}, nil, nil)
		return nil
	}
	left := n
	var crc uint32
	for _, s := range rw.sgl {
		if left == 0 {
			break
		}
		k := min(left, len(s.Buf))
		if crc, err = c.readInto(s.Buf[:k], crc); err != nil {
			return err
		}
		left -= k
	}
	if c.badCRC(h, crc) {
		c.badPayload(h, "serve_send") // the receive is flushed, never delivered
		return nil
	}
	c.consumeRecv(rdma.WC{WRID: rw.wrid, Opcode: rdma.OpRecv, ByteLen: n})
	c.ack(h)
	return nil
}

// badPayload fails request h, whose payload is in place but failed its
// CRC32C: the NAK fails it on the initiator, and the error state flushes
// the receive it would have completed.
func (c *conn) badPayload(h *header, op string) {
	c.checksumError(h.seq, opErr(op, &peerError{peer: c.peer,
		err: fmt.Errorf("%s %d of %d bytes at %#x: payload %w", opName(h.op), h.seq, h.length, h.addr, errChecksum)}))
}

func (c *conn) rnrExceeded(h *header, err error) error {
	if err != nil {
		return err
	}
	if err := c.drainPayload(h); err != nil {
		return err
	}
	c.remoteError(h, rdma.StatusRNRRetryExceeded, "serve_send",
		fmt.Errorf("no receive posted after %d retries %v apart", c.cfg.RNRRetry, c.cfg.RNRTimer))
	return nil
}

// waitRecv returns the oldest posted receive, waiting for one as an RC
// responder's receiver-not-ready retries would: RNRRetry times RNRTimer
// apart (forever if RNRRetry < 0), waking early when one is posted. The
// stream is held meanwhile, which keeps every later request behind this
// one. A nil receive and nil error mean the retries ran out.
func (c *conn) waitRecv() (*recvWR, error) {
	for try := 0; ; try++ {
		c.mu.Lock()
		if c.rqHead < c.rqTail {
			rw := c.rslot(c.rqHead)
			c.mu.Unlock()
			return rw, nil
		}
		c.mu.Unlock()
		if c.cfg.RNRRetry >= 0 && try >= c.cfg.RNRRetry {
			return nil, nil
		}
		c.rnrTimer.Reset(c.cfg.RNRTimer)
		select {
		case <-c.recvWake:
			try-- // a post is not a retry
		case <-c.rnrTimer.C:
			if c.peerGone() {
				// The stream is held, so EOF would not be read: look.
				c.rnrTimer.Stop()
				return nil, errPeerClosed
			}
		case <-c.done:
			c.rnrTimer.Stop()
			return nil, errClosing
		}
		c.rnrTimer.Stop()
	}
}

// consumeRecv pops the oldest receive and reports wc for it.
func (c *conn) consumeRecv(wc rdma.WC) {
	c.mu.Lock()
	rw := c.rslot(c.rqHead)
	c.rqHead++
	soft.ReleaseAll(rw.sgl)
	clear(rw.sgl)
	c.recvCQ.Push(wc)
	c.mu.Unlock()
}

func (c *conn) serveRead(h *header) {
	n := int(h.length)
	b, mr := c.dev.pd.Remote(h.rkey, h.addr, n, rdma.AccessRemoteRead)
	if mr == nil {
		c.remoteError(h, rdma.StatusRemoteAccessError, "serve_read",
			fmt.Errorf("read of %d bytes at %#x rkey %#x: %w", n, h.addr, h.rkey, rdma.ErrAccess))
		return
	}
	// Copy now: later requests may overwrite the region before the writer
	// sends the response, and the reader must not wait for the writer.
	p := getBuf(n)
	copy(*p, b)
	mr.Release()
	c.queueResp(header{op: opReadResp, seq: h.seq, length: h.length}, *p, p)
}
