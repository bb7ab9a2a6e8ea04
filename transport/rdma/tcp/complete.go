package tcp

import (
	"fmt"
	"math/bits"
	"sync"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// The initiator's half of the reader: responses complete the send queue in
// post order. Responses are cumulative — a response for request seq means
// every earlier request succeeded — so unsignaled requests need no frame of
// their own.

// checkSeq validates a response's seq against the requests on the wire.
// Called with c.mu held.
func (c *conn) checkSeq(h *header) error {
	if h.seq < c.head || h.seq >= c.tx {
		return fmt.Errorf("%w: response for request %d, outstanding [%d, %d)", errProtocol, h.seq, c.head, c.tx)
	}
	return nil
}

// completeUpTo completes [head, end) successfully. None of them may be a
// read: a read completes only with its own response. Called with c.mu held.
func (c *conn) completeUpTo(end uint64) error {
	for ; c.head < end; c.head++ {
		w := c.slot(c.head)
		if w.op == opReadReq {
			return fmt.Errorf("%w: read %d acknowledged without data", errProtocol, c.head)
		}
		c.finish(w, rdma.StatusSuccess)
	}
	return nil
}

func (c *conn) onAck(h *header) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.checkSeq(h); err != nil {
		return err
	}
	return c.completeUpTo(h.seq + 1)
}

func (c *conn) onNak(h *header) error {
	st := rdma.Status(h.status)
	if st == rdma.StatusSuccess || st > rdma.StatusFatal {
		return fmt.Errorf("%w: NAK with status %d", errProtocol, h.status)
	}
	crc := h.imm == nakChecksum
	c.mu.Lock()
	if crc && h.seq == c.tx {
		// The peer found a damaged response or header: no request of ours
		// is named, every earlier one was served.
		err := c.completeUpTo(h.seq)
		if err == nil {
			c.setErrorLocked(opErr("conn", &peerError{peer: c.peer, err: fmt.Errorf("the peer reports a %w", errChecksum)}))
		}
		c.mu.Unlock()
		return err
	}
	if err := c.checkSeq(h); err != nil {
		c.mu.Unlock()
		return err
	}
	if err := c.completeUpTo(h.seq); err != nil {
		c.mu.Unlock()
		return err
	}
	w := c.slot(c.head)
	if w.op == opReadReq {
		c.readsInFlight--
	}
	// Enter the error state before the failure is visible, so whoever
	// sees the completion also sees Err.
	wc := rdma.WC{WRID: w.wrid, Status: st, Opcode: w.opcode}
	var cause error = &rdma.WCError{WC: wc}
	if crc {
		cause = fmt.Errorf("the peer reports a %w: %w", errChecksum, cause)
	}
	c.setErrorLocked(opErr(opName(w.op), &peerError{peer: c.peer, err: cause}))
	c.finish(w, st)
	c.head++
	c.mu.Unlock()
	return nil
}

// startReadResp checks a read response and makes its data go into the
// read's buffers.
func (c *conn) startReadResp(h *header) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.checkSeq(h); err != nil {
		return err
	}
	w := c.slot(h.seq)
	if w.op != opReadReq || w.length != int(h.length) {
		return fmt.Errorf("%w: read response %d of %d bytes does not match the request", errProtocol, h.seq, h.length)
	}
	if err := c.completeUpTo(h.seq); err != nil {
		return err
	}
	// The slot stays the reader's: only the reader completes requests
	// while the conn is working, and the reap waits for it to exit.
	c.ps.w = w
	c.expectPayload(w.sgl, w.length, thenReadResp)
	return nil
}

// readRespDone completes read w, whose data is in place.
func (c *conn) readRespDone(h *header, w *wr, crc uint32) {
	st := rdma.StatusSuccess
	var bad error
	if c.badCRC(h, crc) {
		// The data is in place but damaged: the read fails, and the peer
		// learns it from a NAK at its next request.
		st = rdma.StatusRetryExceeded
		bad = opErr("read", &peerError{peer: c.peer,
			err: fmt.Errorf("response to read %d of %d bytes: payload %w", h.seq, h.length, errChecksum)})
		c.dev.counts.checksum.Add(1)
	}
	c.mu.Lock()
	if bad != nil {
		c.setErrorLocked(bad)
	}
	c.finish(w, st)
	c.head++
	c.readsInFlight--
	if c.readsInFlight == 0 {
		c.wantFlush = true // a fenced request may go
	}
	c.mu.Unlock()
	if bad != nil {
		c.queueResp(header{op: opNak, seq: c.expect, status: uint16(rdma.StatusRetryExceeded), imm: nakChecksum}, nil, nil)
	}
}

func opName(op uint8) string {
	switch op {
	case opWrite:
		return "write"
	case opWriteImm:
		return "write_imm"
	case opSend:
		return "send"
	case opReadReq:
		return "read"
	}
	return "op"
}

// Read responses are copied out of the region into pooled buffers, one
// pool per power-of-two size.
var readPools [31]sync.Pool

func getBuf(n int) *[]byte {
	class := bits.Len(uint(max(n, 1) - 1))
	if p, ok := readPools[class].Get().(*[]byte); ok {
		*p = (*p)[:n]
		return p
	}
	b := make([]byte, n, 1<<class)
	return &b
}

func putBuf(p *[]byte) {
	if p == nil {
		return
	}
	class := bits.Len(uint(cap(*p)) - 1)
	if cap(*p) == 1<<class && class < len(readPools) {
		readPools[class].Put(p)
	}
}
