package tcp

import (
	"fmt"
	"io"
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
	c.mu.Lock()
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
	c.setErrorLocked(opErr(opName(w.op), &peerError{peer: c.peer, err: &rdma.WCError{WC: wc}}))
	c.finish(w, st)
	c.head++
	c.mu.Unlock()
	kick(c.wake)
	return nil
}

func (c *conn) onReadResp(h *header) error {
	c.mu.Lock()
	if err := c.checkSeq(h); err != nil {
		c.mu.Unlock()
		return err
	}
	w := c.slot(h.seq)
	if w.op != opReadReq || w.length != int(h.length) {
		c.mu.Unlock()
		return fmt.Errorf("%w: read response %d of %d bytes does not match the request", errProtocol, h.seq, h.length)
	}
	if err := c.completeUpTo(h.seq); err != nil {
		c.mu.Unlock()
		return err
	}
	c.mu.Unlock()
	// The slot stays ours: only this goroutine completes requests while
	// the conn is working, and the reaper waits for it to exit.
	left := w.length
	for _, s := range w.sgl {
		if left == 0 {
			break
		}
		k := min(left, len(s.Buf))
		if _, err := io.ReadFull(c.r, s.Buf[:k]); err != nil {
			return err
		}
		left -= k
	}
	c.mu.Lock()
	c.finish(w, rdma.StatusSuccess)
	c.head++
	c.readsInFlight--
	fenced := c.readsInFlight == 0
	c.mu.Unlock()
	if fenced {
		kick(c.wake)
	}
	return nil
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
