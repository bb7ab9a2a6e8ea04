//go:build linux

package shm

import (
	"github.com/gorun-hpc/gorun/transport/rdma"
	"github.com/gorun-hpc/gorun/transport/rdma/internal/soft"
)

func (c *conn) PostSend(wrid uint64, buf []byte, mr *rdma.MR, flags rdma.Flags) error {
	w := wr{op: rdma.OpSend, wrid: wrid, flags: flags}
	w.one[0] = rdma.SGE{Buf: buf, MR: mr}
	return c.post("post_send", w, 0)
}

func (c *conn) PostSendv(wrid uint64, sgl []rdma.SGE, flags rdma.Flags) error {
	return c.post("post_sendv", wr{op: rdma.OpSend, wrid: wrid, sgl: sgl, flags: flags}, 0)
}

func (c *conn) PostWrite(wrid uint64, buf []byte, mr *rdma.MR, flags rdma.Flags, remoteAddr uint64, rkey uint32) error {
	w := wr{op: rdma.OpWrite, wrid: wrid, flags: flags, raddr: remoteAddr, rkey: rkey}
	w.one[0] = rdma.SGE{Buf: buf, MR: mr}
	return c.post("post_write", w, 0)
}

func (c *conn) PostWritev(wrid uint64, sgl []rdma.SGE, flags rdma.Flags, remoteAddr uint64, rkey uint32) error {
	return c.post("post_writev", wr{op: rdma.OpWrite, wrid: wrid, sgl: sgl, flags: flags, raddr: remoteAddr, rkey: rkey}, 0)
}

func (c *conn) PostWriteImm(wrid uint64, buf []byte, mr *rdma.MR, flags rdma.Flags, remoteAddr uint64, rkey uint32, imm uint32) error {
	w := wr{op: rdma.OpWrite, wrid: wrid, flags: flags, raddr: remoteAddr, rkey: rkey, imm: imm, hasImm: true}
	w.one[0] = rdma.SGE{Buf: buf, MR: mr}
	return c.post("post_write_imm", w, 0)
}

func (c *conn) PostRead(wrid uint64, buf []byte, mr *rdma.MR, flags rdma.Flags, remoteAddr uint64, rkey uint32) error {
	w := wr{op: rdma.OpRead, wrid: wrid, flags: flags, raddr: remoteAddr, rkey: rkey}
	w.one[0] = rdma.SGE{Buf: buf, MR: mr}
	return c.post("post_read", w, rdma.AccessLocalWrite)
}

func (c *conn) PostReadv(wrid uint64, sgl []rdma.SGE, flags rdma.Flags, remoteAddr uint64, rkey uint32) error {
	return c.post("post_readv", wr{op: rdma.OpRead, wrid: wrid, sgl: sgl, flags: flags, raddr: remoteAddr, rkey: rkey}, rdma.AccessLocalWrite)
}

// post checks the local buffers, then runs the request now if nothing is
// queued ahead of it and it needs no wait, or queues it for the sq
// goroutine.
func (c *conn) post(op string, w wr, need rdma.Access) error {
	if c.state.Load() == stateClosed {
		return c.opErr(op, rdma.ErrClosed)
	}
	total, err := soft.CheckLocal(c.dev.pd, w.list(), need, w.flags, maxInline)
	if err != nil {
		return c.opErr(op, err)
	}
	w.total = total
	inline := w.flags&rdma.FlagInline != 0 && need&rdma.AccessLocalWrite == 0
	// The regions are taken under sqMu, after the state is read: a post
	// racing Close is flushed by it or sees the conn closed, so no
	// reference outlives Close.
	c.sqMu.Lock()
	defer c.sqMu.Unlock()
	if c.state.Load() == stateClosed {
		return c.opErr(op, rdma.ErrClosed)
	}
	if !inline {
		if !soft.AcquireAll(w.list()) {
			return c.opErr(op, rdma.ErrNotRegistered)
		}
		w.held = true
	}
	if len(c.pending) == 0 && !c.busy && c.exec(&w, false) {
		return nil
	}
	if len(c.pending) >= c.dev.cfg.SendQueueDepth {
		c.release(&w)
		return c.opErr(op, rdma.ErrQueueFull)
	}
	// The request outlives the call: own its gather list, and an inline
	// payload (the caller may reuse its buffer as soon as we return).
	if inline {
		buf := make([]byte, 0, total)
		for _, s := range w.list() {
			buf = append(buf, s.Buf...)
		}
		w.sgl = nil
		w.one[0] = rdma.SGE{Buf: buf}
	} else if w.sgl != nil {
		w.sgl = append([]rdma.SGE(nil), w.sgl...)
	}
	c.pending = append(c.pending, w)
	select {
	case c.sqWake <- struct{}{}:
	default:
	}
	return nil
}

func (c *conn) release(w *wr) {
	if w.held {
		soft.ReleaseAll(w.list())
		w.held = false
	}
}

// complete releases w's regions and reports its outcome: failures always,
// successes when signaled.
func (c *conn) complete(w *wr, st rdma.Status) {
	c.release(w)
	if st != rdma.StatusSuccess || w.flags&rdma.FlagSignaled != 0 {
		c.pushSend(rdma.WC{WRID: w.wrid, Status: st, Opcode: w.op})
	}
}

// sqLoop runs the queued requests in order, waiting where they must.
func (c *conn) sqLoop() {
	defer c.wg.Done()
	for {
		c.sqMu.Lock()
		if len(c.pending) == 0 || c.state.Load() == stateClosed {
			c.sqMu.Unlock()
			select {
			case <-c.sqWake:
				continue
			case <-c.done:
				return
			}
		}
		c.busy = true
		w := c.pending[0]
		c.sqMu.Unlock()

		c.exec(&w, true)

		c.sqMu.Lock()
		c.pending[0] = wr{}
		c.pending = c.pending[1:]
		if len(c.pending) == 0 {
			c.pending = nil
		}
		c.busy = false
		if c.pending == nil {
			c.sqIdle.Broadcast()
		}
		c.sqMu.Unlock()
	}
}
