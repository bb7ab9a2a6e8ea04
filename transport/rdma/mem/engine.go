package mem

import (
	"fmt"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
	"github.com/gorun-hpc/gorun/transport/rdma/internal/soft"
)

// Who executes the send queue (conn.owner, under mu). At most one of them
// at a time, so requests take effect in post order: a poster that finds
// the queue empty and nobody executing runs its request inline
// (ownPoster); anything posted meanwhile queues behind it and goes to the
// engine goroutine (ownEngine), which keeps the queue until it is empty.
const (
	ownNone uint8 = iota
	ownPoster
	ownEngine
)

// toEngineLocked hands the queue to the engine, starting or waking it.
// The caller holds mu and owns the queue or sees ownNone.
func (c *conn) toEngineLocked() {
	c.owner = ownEngine
	switch {
	case !c.started:
		c.started = true
		c.wg.Add(1)
		go c.run()
	case c.idle:
		c.idle = false
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
}

// runInline executes w on the posting goroutine: no hand-off on the path
// from a post to the peer's completion queue. A send that finds no receive
// posted on the peer would have to wait (receiver not ready), which a post
// must not: it goes to the head of the queue, for the engine.
func (c *conn) runInline(w *wr) {
	defer c.wg.Done()
	if c.state.Load() == stateActive && w.op != opWrite && w.op != opRead {
		st, why, rnr := c.deliver(w)
		if rnr {
			c.mu.Lock()
			c.sq = append(c.sq, wr{})
			copy(c.sq[1:], c.sq)
			c.sq[0] = *w
			*w = wr{}
			c.toEngineLocked()
			c.mu.Unlock()
			return
		}
		c.complete(w, st, why)
	} else {
		c.execute(w)
	}
	c.mu.Lock()
	*w = wr{}
	if len(c.sq) > 0 {
		c.toEngineLocked()
	} else {
		c.owner = ownNone
	}
	c.mu.Unlock()
}

// run executes the send queue in post order while it owns it. The first
// hand-off starts it; between bursts it parks on wake, and it returns once
// the conn is out of service and its queue is flushed, so a closed conn
// owns no goroutine.
func (c *conn) run() {
	defer c.wg.Done()
	for {
		c.mu.Lock()
		for c.owner != ownEngine || len(c.sq) == 0 {
			if c.owner == ownEngine {
				c.owner = ownNone
			}
			if c.state.Load() >= statePeerGone && c.owner == ownNone && len(c.sq) == 0 {
				c.mu.Unlock()
				return
			}
			c.idle = true
			c.mu.Unlock()
			select {
			case <-c.wake:
			case <-c.done:
			}
			c.mu.Lock()
			c.idle = false
		}
		batch := c.sq
		c.sq, c.spare = c.spare[:0], nil
		c.mu.Unlock()
		for i := range batch {
			c.execute(&batch[i])
			batch[i] = wr{}
		}
		c.mu.Lock()
		c.spare = batch[:0]
		c.mu.Unlock()
	}
}

// execute performs one request and completes it.
func (c *conn) execute(w *wr) {
	st, why := rdma.StatusFlushed, error(nil)
	if c.state.Load() == stateActive {
		switch w.op {
		case opWrite:
			st, why = c.write(w)
		case opRead:
			st, why = c.read(w)
		default:
			st, why = c.send(w)
		}
	}
	c.complete(w, st, why)
}

// complete ends a request that ran with status st.
func (c *conn) complete(w *wr, st rdma.Status, why error) {
	soft.ReleaseAll(w.list())
	c.outstanding.Add(-1)
	if st != rdma.StatusSuccess && st != rdma.StatusFlushed {
		c.fail(why)
	}
	if st != rdma.StatusSuccess || w.flags&rdma.FlagSignaled != 0 {
		wc := rdma.WC{WRID: w.wrid, Status: st, Opcode: opcodes[w.op]}
		if w.op == opRead && st == rdma.StatusSuccess {
			wc.ByteLen = w.n
		}
		c.sendCQ.Push(wc)
	}
}

// failure describes a failed request for Conn.Err.
func (c *conn) failure(w *wr, st rdma.Status, detail string) error {
	wc := rdma.WC{WRID: w.wrid, Status: st, Opcode: opcodes[w.op]}
	return fmt.Errorf("conn %s: %s to peer %s (%s): %w", c.name, opNames[w.op], c.peer.name, detail, &rdma.WCError{WC: wc})
}

func (c *conn) remoteErr(w *wr) error {
	c.peer.dev.counts.access.Add(1)
	return c.failure(w, rdma.StatusRemoteAccessError,
		fmt.Sprintf("rkey %#x addr %#x len %d", w.rkey, w.raddr, w.n))
}

// peerDown is the outcome of a request whose target left service: flushed
// if the peer is closing (this conn is about to be shut down too), else
// the retries a real link would exhaust against a queue pair in error.
func (c *conn) peerDown(w *wr) (rdma.Status, error) {
	if c.peer.state.Load() >= statePeerGone {
		return rdma.StatusFlushed, nil
	}
	return rdma.StatusRetryExceeded, c.failure(w, rdma.StatusRetryExceeded, "peer in the error state")
}

func (c *conn) write(w *wr) (rdma.Status, error) {
	p := c.peer
	if p.state.Load() != stateActive {
		return c.peerDown(w)
	}
	dst, mr := p.dev.pd.Remote(w.rkey, w.raddr, w.n, rdma.AccessRemoteWrite)
	if mr == nil {
		return rdma.StatusRemoteAccessError, c.remoteErr(w)
	}
	var tmp [1]rdma.SGE
	copyLists([]rdma.SGE{{Buf: dst}}, w.payload(&tmp))
	mr.Release()
	return rdma.StatusSuccess, nil
}

func (c *conn) read(w *wr) (rdma.Status, error) {
	p := c.peer
	if p.state.Load() != stateActive {
		return c.peerDown(w)
	}
	src, mr := p.dev.pd.Remote(w.rkey, w.raddr, w.n, rdma.AccessRemoteRead)
	if mr == nil {
		return rdma.StatusRemoteAccessError, c.remoteErr(w)
	}
	copyLists(w.list(), []rdma.SGE{{Buf: src}})
	mr.Release()
	return rdma.StatusSuccess, nil
}

// send delivers a send or write-with-immediate, retrying while the peer
// has no receive posted.
func (c *conn) send(w *wr) (rdma.Status, error) {
	cfg := &c.dev.cfg
	retries := 0
	for {
		st, why, rnr := c.deliver(w)
		if !rnr {
			return st, why
		}
		if cfg.RNRRetry >= 0 && retries >= cfg.RNRRetry {
			return rdma.StatusRNRRetryExceeded, c.failure(w, rdma.StatusRNRRetryExceeded,
				fmt.Sprintf("no receive posted after %d retries %v apart", retries, cfg.RNRTimer))
		}
		if c.timer == nil {
			c.timer = time.NewTimer(cfg.RNRTimer)
		} else {
			c.timer.Reset(cfg.RNRTimer)
		}
		select {
		case <-c.peer.recvPosted:
			c.timer.Stop()
		case <-c.timer.C:
			retries++
		case <-c.kick:
			c.timer.Stop()
			if c.state.Load() != stateActive {
				return rdma.StatusFlushed, nil
			}
		case <-c.done:
			c.timer.Stop()
			return rdma.StatusFlushed, nil
		}
	}
}

// deliver consumes a receive posted on the peer; rnr reports that none was.
func (c *conn) deliver(w *wr) (st rdma.Status, why error, rnr bool) {
	p := c.peer
	p.rqMu.Lock()
	defer p.rqMu.Unlock()
	if p.rqDead || p.state.Load() != stateActive {
		st, why := c.peerDown(w)
		return st, why, false
	}
	if p.rqHead == len(p.rq) {
		return 0, nil, true
	}
	var dst []byte
	var dmr *rdma.MR
	if w.op == opWriteImm {
		if dst, dmr = p.dev.pd.Remote(w.rkey, w.raddr, w.n, rdma.AccessRemoteWrite); dmr == nil {
			return rdma.StatusRemoteAccessError, c.remoteErr(w), false
		}
	}
	r := p.rq[p.rqHead]
	p.rq[p.rqHead] = recvWR{}
	if p.rqHead++; p.rqHead == len(p.rq) {
		p.rq, p.rqHead = p.rq[:0], 0
	} else if p.rqHead >= 64 && 2*p.rqHead >= len(p.rq) {
		// A queue that never empties (receives are re-posted as they
		// complete) would otherwise grow for the life of the connection:
		// move the live tail to the front, at most half the slice, so the
		// cost stays amortised O(1).
		n := copy(p.rq, p.rq[p.rqHead:])
		clear(p.rq[n:])
		p.rq, p.rqHead = p.rq[:n], 0
	}
	defer soft.ReleaseAll(r.list())
	var tmp [1]rdma.SGE
	wc := rdma.WC{WRID: r.wrid, Opcode: rdma.OpRecv, ByteLen: w.n}
	switch {
	case w.op == opWriteImm:
		copyLists([]rdma.SGE{{Buf: dst}}, w.payload(&tmp))
		dmr.Release()
		wc.Opcode, wc.Imm, wc.HasImm = rdma.OpRecvWriteImm, w.imm, true
	case w.n > r.cap:
		wc.Status, wc.ByteLen = rdma.StatusLocalLengthError, 0
		reason := fmt.Errorf("conn %s: receive wrid %d of %d bytes too small for a %d-byte send from peer %s: %w",
			p.name, r.wrid, r.cap, w.n, c.name, &rdma.WCError{WC: wc})
		p.markError(reason)
		p.recvCQ.Push(wc)
		p.flushRecvsLocked()
		return rdma.StatusRemoteInvalidRequest, c.failure(w, rdma.StatusRemoteInvalidRequest,
			fmt.Sprintf("peer's receive wrid %d holds %d bytes, sent %d", r.wrid, r.cap, w.n)), false
	default:
		copyLists(r.list(), w.payload(&tmp))
	}
	p.recvCQ.Push(wc)
	return rdma.StatusSuccess, nil, false
}

// copyLists copies the bytes of src, in order, into dst, which must hold
// at least as many.
func copyLists(dst, src []rdma.SGE) {
	di, doff := 0, 0
	for _, s := range src {
		b := s.Buf
		for len(b) > 0 {
			for doff == len(dst[di].Buf) {
				di, doff = di+1, 0
			}
			n := copy(dst[di].Buf[doff:], b)
			doff += n
			b = b[n:]
		}
	}
}
