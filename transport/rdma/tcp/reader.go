package tcp

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
	"github.com/gorun-hpc/gorun/transport/rdma/internal/soft"
)

// The read side is a parser that never waits: parse consumes what the
// socket holds and stops at its end, in any state, to resume at the next
// pass. Small frames arrive through the staging buffer, many per read; a
// payload segment of directMin bytes or more is read from the socket
// straight into its registered region. Everything it does with peer bytes
// is checked against the protection domain first. Requests are served one
// at a time in stream order, which gives the contract's ordering.

const (
	stagingLen = 16 << 10
	directMin  = 4 << 10
)

// Parser states.
const (
	psHeader  = iota // reading a frame header
	psPayload        // reading the payload of ps.h into ps.segs
	psRNR            // a send or write with immediate waits for a receive
	psDrop           // a header failed its CRC: drop the stream until it ends
)

// What to do once a payload is in.
const (
	thenNothing  = iota // drained
	thenWrite           // a write (with immediate) is in place
	thenSend            // a send is in its receive
	thenReadResp        // a read's data is in place
	thenBadWrite        // drained a write that failed its access check
	thenRNR             // drained a request whose receive never came
	thenLength          // drained a send longer than its receive
)

// parser is the read side's state between passes. Read-token owned.
type parser struct {
	state   int
	h       header
	then    uint8
	segs    []rdma.SGE // where the payload goes; nil drains it
	one     [1]rdma.SGE
	seg     int // position in segs
	off     int
	left    int // payload bytes still to come
	crc     uint32
	mr      *rdma.MR // region a write's payload is going into
	rw      *recvWR  // receive a send's payload is going into
	w       *wr      // read whose response data is coming in
	tries   int      // receiver-not-ready retries so far
	retryAt time.Time
}

// parse serves every complete frame and every partial payload the socket
// holds. It returns nil when the socket has nothing more now or the stream
// waits for a receive; an error ends the connection.
func (c *conn) parse() error {
	p := &c.ps
	for {
		switch p.state {
		case psHeader:
			if c.inHi-c.inLo < c.hlen {
				if err := c.fill(); err != nil {
					return c.inputErr(err)
				}
				continue
			}
			copy(c.rhdr[:c.hlen], c.in[c.inLo:])
			c.inLo += c.hlen
			if err := c.onHeader(); err != nil {
				return err
			}
		case psPayload:
			if err := c.payload(); err != nil {
				return c.inputErr(err)
			}
			p.state = psHeader
			c.payloadDone()
		case psRNR:
			stalled, err := c.rnrRetry()
			if stalled || err != nil {
				return err
			}
		case psDrop:
			c.inLo = c.inHi
			if err := c.fill(); err != nil {
				return c.inputErr(err)
			}
		}
	}
}

// inputErr maps the end of the input: nothing more for now is no error,
// and the peer's end inside a frame is an unexpected one.
func (c *conn) inputErr(err error) error {
	switch {
	case err == errAgain:
		return nil
	case err == io.EOF && (c.ps.state != psHeader || c.inHi > c.inLo):
		return io.ErrUnexpectedEOF
	}
	return err
}

// fill reads what the socket holds into the staging buffer, after the
// bytes not yet parsed (fewer than a header: it is called only when
// those are not enough).
func (c *conn) fill() error {
	n := copy(c.in, c.in[c.inLo:c.inHi])
	c.inLo, c.inHi = 0, n
	k, err := c.read(c.in[n:])
	c.inHi += k
	if k > 0 {
		return nil
	}
	return err
}

// read is readSome, but once a read came back short the socket counts as
// empty until the pass ends: a system call that would only say EAGAIN is
// saved. Bytes that arrive meanwhile are not lost: they wake the watcher.
func (c *conn) read(p []byte) (int, error) {
	if c.drained {
		return 0, errAgain
	}
	n, err := c.readSome(p)
	if n < len(p) && c.rc != nil {
		c.drained = true
	}
	return n, err
}

// onHeader checks the header just read and starts serving its frame.
func (c *conn) onHeader() error {
	h := &c.ps.h
	if !intact(&c.rhdr) {
		c.corruptHeader()
		return nil
	}
	if c.cfg.Checksum {
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
		c.drainPayload()
		return nil
	}
	return c.dispatch()
}

// dispatch starts serving frame ps.h (again, after a receiver-not-ready
// wait).
func (c *conn) dispatch() error {
	h := &c.ps.h
	switch h.op {
	case opWrite, opWriteImm:
		c.startWrite(h)
	case opSend:
		c.startSend(h)
	case opReadReq:
		c.serveRead(h)
	case opAck:
		return c.onAck(h)
	case opNak:
		return c.onNak(h)
	case opReadResp:
		return c.startReadResp(h)
	}
	return nil
}

// expectPayload makes the next n bytes go into segs (nil: dropped), then
// does then.
func (c *conn) expectPayload(segs []rdma.SGE, n int, then uint8) {
	p := &c.ps
	p.state, p.segs, p.seg, p.off, p.left, p.crc, p.then = psPayload, segs, 0, 0, n, 0, then
}

func (c *conn) drainPayload() {
	if c.ps.h.hasPayload() {
		c.expectPayload(nil, int(c.ps.h.length), thenNothing)
	}
}

// payload moves the current payload into place: first what the staging
// buffer holds, then, for a large remainder, straight from the socket.
func (c *conn) payload() error {
	p := &c.ps
	for p.left > 0 {
		if c.inHi > c.inLo {
			k := min(p.left, c.inHi-c.inLo)
			c.place(c.in[c.inLo : c.inLo+k])
			c.inLo += k
			continue
		}
		if dst := c.dest(); len(dst) >= directMin {
			n, err := c.read(dst)
			c.placed(dst[:n])
			if err != nil && n == 0 {
				return err
			}
			continue
		}
		if err := c.fill(); err != nil {
			return err
		}
	}
	return nil
}

// dest is where the next payload bytes go when read from the socket.
func (c *conn) dest() []byte {
	p := &c.ps
	if p.segs == nil {
		if c.scratch == nil {
			c.scratch = make([]byte, 32<<10) // rare: invalid requests, the error state
		}
		return c.scratch[:min(p.left, len(c.scratch))]
	}
	for p.off == len(p.segs[p.seg].Buf) {
		p.seg, p.off = p.seg+1, 0
	}
	b := p.segs[p.seg].Buf[p.off:]
	n := min(len(b), p.left)
	if c.cfg.Checksum {
		n = min(n, crcChunk) // checksum bytes still in cache
	}
	return b[:n]
}

// place copies b into the payload's destination.
func (c *conn) place(b []byte) {
	p := &c.ps
	p.left -= len(b)
	if p.segs == nil {
		return
	}
	if c.cfg.Checksum {
		p.crc = crc32.Update(p.crc, castagnoli, b)
	}
	for len(b) > 0 {
		if p.off == len(p.segs[p.seg].Buf) {
			p.seg, p.off = p.seg+1, 0
			continue
		}
		k := copy(p.segs[p.seg].Buf[p.off:], b)
		b = b[k:]
		p.off += k
	}
}

// placed accounts for b, read from the socket straight into dest().
func (c *conn) placed(b []byte) {
	p := &c.ps
	p.left -= len(b)
	if p.segs == nil {
		return
	}
	if c.cfg.Checksum {
		p.crc = crc32.Update(p.crc, castagnoli, b)
	}
	p.off += len(b)
}

// payloadDone finishes the frame whose payload is in.
func (c *conn) payloadDone() {
	p := &c.ps
	h := &p.h
	n := int(h.length)
	switch p.then {
	case thenWrite:
		p.mr.Release()
		p.mr = nil
		p.one[0] = rdma.SGE{}
		if c.badCRC(h, p.crc) {
			c.badPayload(h, "serve_write")
			break
		}
		if h.op == opWriteImm {
			c.consumeRecv(rdma.WC{Opcode: rdma.OpRecvWriteImm, ByteLen: n, Imm: h.imm, HasImm: true})
		}
		c.ack(h)
	case thenSend:
		if c.badCRC(h, p.crc) {
			c.badPayload(h, "serve_send") // the receive is flushed, never delivered
			break
		}
		c.consumeRecv(rdma.WC{Opcode: rdma.OpRecv, ByteLen: n})
		c.ack(h)
	case thenReadResp:
		c.readRespDone(h, p.w, p.crc)
	case thenBadWrite:
		c.remoteError(h, rdma.StatusRemoteAccessError, "serve_write",
			fmt.Errorf("write of %d bytes at %#x rkey %#x: %w", n, h.addr, h.rkey, rdma.ErrAccess))
	case thenRNR:
		c.remoteError(h, rdma.StatusRNRRetryExceeded, "serve_send",
			fmt.Errorf("no receive posted after %d retries %v apart", c.cfg.RNRRetry, c.cfg.RNRTimer))
	case thenLength:
		c.lengthError(h, p.rw)
	}
	p.segs, p.rw, p.w = nil, nil, nil
}

// dropPayload releases what a payload in flight holds, when the read side
// exits.
func (c *conn) dropPayload() {
	if c.ps.mr != nil {
		c.ps.mr.Release()
		c.ps.mr = nil
	}
	c.ps.segs, c.ps.rw, c.ps.w = nil, nil, nil
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
// send queue by the next writer. Only the reader calls it.
func (c *conn) setError(err error) {
	c.mu.Lock()
	c.setErrorLocked(err)
	c.mu.Unlock()
}

func (c *conn) setErrorLocked(err error) {
	c.discard = true
	c.wantFlush = true
	if c.state == stateOK {
		c.state = stateError
		if c.err == nil {
			c.err = err
		}
		c.flushRQ()
	}
}

func (c *conn) startWrite(h *header) {
	n := int(h.length)
	b, mr := c.dev.pd.Remote(h.rkey, h.addr, n, rdma.AccessRemoteWrite)
	if mr == nil {
		c.expectPayload(nil, n, thenBadWrite)
		return
	}
	if h.op == opWriteImm && c.headRecv() == nil {
		mr.Release()
		c.stall()
		return
	}
	c.ps.mr = mr
	c.ps.one[0] = rdma.SGE{Buf: b}
	c.expectPayload(c.ps.one[:], n, thenWrite)
}

func (c *conn) startSend(h *header) {
	n := int(h.length)
	rw := c.headRecv()
	if rw == nil {
		c.stall()
		return
	}
	c.ps.rw = rw
	if n > rw.length {
		c.expectPayload(nil, n, thenLength)
		return
	}
	c.expectPayload(rw.sgl, n, thenSend)
}

// lengthError fails a send longer than its receive, whose payload has been
// drained: the error state first (so Err is set when the failure is seen),
// then this receive fails, then the rest are flushed.
func (c *conn) lengthError(h *header, rw *recvWR) {
	n := int(h.length)
	err := opErr("serve_send", &peerError{peer: c.peer,
		err: fmt.Errorf("send of %d bytes into a %d-byte receive: %w", n, rw.length, rdma.ErrInvalid)})
	c.mu.Lock()
	c.discard = true
	c.wantFlush = true
	c.state = stateError
	c.err = cmp.Or(c.err, err)
	c.rqHead++
	soft.ReleaseAll(rw.sgl)
	clear(rw.sgl)
	c.recvCQ.Push(rdma.WC{WRID: rw.wrid, Status: rdma.StatusLocalLengthError, Opcode: rdma.OpRecv, ByteLen: n})
	c.flushRQ()
	c.mu.Unlock()
	c.queueResp(header{op: opNak, seq: h.seq, status: uint16(rdma.StatusRemoteInvalidRequest)}, nil, nil)
}

// badPayload fails request h, whose payload is in place but failed its
// CRC32C: the NAK fails it on the initiator, and the error state flushes
// the receive it would have completed.
func (c *conn) badPayload(h *header, op string) {
	c.checksumError(h.seq, opErr(op, &peerError{peer: c.peer,
		err: fmt.Errorf("%s %d of %d bytes at %#x: payload %w", opName(h.op), h.seq, h.length, h.addr, errChecksum)}))
}

// headRecv returns the oldest posted receive, or nil.
func (c *conn) headRecv() *recvWR {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rqHead < c.rqTail {
		return c.rslot(c.rqHead)
	}
	return nil
}

// consumeRecv pops the oldest receive (the one the frame was dispatched
// to: only the reader pops) and reports wc for it.
func (c *conn) consumeRecv(wc rdma.WC) {
	c.mu.Lock()
	rw := c.rslot(c.rqHead)
	wc.WRID = rw.wrid
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
	// Copy now: later requests may overwrite the region before the
	// response is written, and the reader never waits for the writer.
	p := getBuf(n)
	copy(*p, b)
	mr.Release()
	c.queueResp(header{op: opReadResp, seq: h.seq, length: h.length}, *p, p)
}
