package tcp

import (
	"github.com/gorun-hpc/gorun/transport/rdma"
	"github.com/gorun-hpc/gorun/transport/rdma/internal/soft"
)

// Post* check the local buffers (soft.CheckLocal), take a slot on the send
// queue and write what the socket takes at once (writer.go). They never
// block on the network.

func (c *conn) PostSend(wrid uint64, buf []byte, mr *rdma.MR, flags rdma.Flags) error {
	var one [1]rdma.SGE
	return c.post("post_send", opSend, rdma.OpSend, wrid, soft.One(&one, buf, mr), flags, 0, 0, 0)
}

func (c *conn) PostSendv(wrid uint64, sgl []rdma.SGE, flags rdma.Flags) error {
	return c.post("post_sendv", opSend, rdma.OpSend, wrid, sgl, flags, 0, 0, 0)
}

func (c *conn) PostWrite(wrid uint64, buf []byte, mr *rdma.MR, flags rdma.Flags, raddr uint64, rkey uint32) error {
	var one [1]rdma.SGE
	return c.post("post_write", opWrite, rdma.OpWrite, wrid, soft.One(&one, buf, mr), flags, raddr, rkey, 0)
}

func (c *conn) PostWritev(wrid uint64, sgl []rdma.SGE, flags rdma.Flags, raddr uint64, rkey uint32) error {
	return c.post("post_writev", opWrite, rdma.OpWrite, wrid, sgl, flags, raddr, rkey, 0)
}

func (c *conn) PostWriteImm(wrid uint64, buf []byte, mr *rdma.MR, flags rdma.Flags, raddr uint64, rkey uint32, imm uint32) error {
	var one [1]rdma.SGE
	return c.post("post_write_imm", opWriteImm, rdma.OpWrite, wrid, soft.One(&one, buf, mr), flags, raddr, rkey, imm)
}

func (c *conn) PostRead(wrid uint64, buf []byte, mr *rdma.MR, flags rdma.Flags, raddr uint64, rkey uint32) error {
	var one [1]rdma.SGE
	return c.post("post_read", opReadReq, rdma.OpRead, wrid, soft.One(&one, buf, mr), flags, raddr, rkey, 0)
}

func (c *conn) PostReadv(wrid uint64, sgl []rdma.SGE, flags rdma.Flags, raddr uint64, rkey uint32) error {
	return c.post("post_readv", opReadReq, rdma.OpRead, wrid, sgl, flags, raddr, rkey, 0)
}

func (c *conn) post(name string, op uint8, opcode rdma.Opcode, wrid uint64, sgl []rdma.SGE, flags rdma.Flags, raddr uint64, rkey, imm uint32) error {
	need := rdma.Access(0)
	if op == opReadReq {
		need = rdma.AccessLocalWrite // the read's data lands in it
	}
	n, err := soft.CheckLocal(c.dev.pd, sgl, need, flags, MaxInline)
	if err != nil {
		return opErr(name, err)
	}
	if n > maxMsg {
		return opErr(name, rdma.ErrInvalid)
	}
	inline := flags&rdma.FlagInline != 0 && need == 0
	c.mu.Lock()
	if err := c.enqueue(name, op, opcode, wrid, sgl, flags, raddr, rkey, imm, n, inline); err != nil {
		c.mu.Unlock()
		return err
	}
	if c.writing || c.writeExited || !c.started || c.rc == nil {
		c.mu.Unlock()
		return nil
	}
	c.writing = true
	c.writeRounds()
	return nil
}

// enqueue takes a send-queue slot for the request. Called with c.mu held.
func (c *conn) enqueue(name string, op uint8, opcode rdma.Opcode, wrid uint64, sgl []rdma.SGE, flags rdma.Flags, raddr uint64, rkey, imm uint32, n int, inline bool) error {
	if c.closed {
		return opErr(name, rdma.ErrClosed)
	}
	if c.state == stateDead {
		c.sendCQ.Push(rdma.WC{WRID: wrid, Status: rdma.StatusFlushed, Opcode: opcode})
		return nil
	}
	if c.tail-c.head >= uint64(c.cfg.SendQueueDepth) {
		return opErr(name, rdma.ErrQueueFull)
	}
	if c.tail-c.head == uint64(len(c.sq)) {
		c.sq = growRing(c.sq, c.head, c.tail)
	}
	if !inline && !soft.AcquireAll(sgl) {
		return opErr(name, rdma.ErrNotRegistered)
	}
	w := c.slot(c.tail)
	w.wrid, w.op, w.opcode = wrid, op, opcode
	w.signaled = flags&rdma.FlagSignaled != 0
	w.fence = flags&rdma.FlagFence != 0
	w.inline, w.length = inline, n
	w.raddr, w.rkey, w.imm = raddr, rkey, imm
	switch {
	case inline:
		if w.ibuf == nil {
			w.ibuf = make([]byte, 0, MaxInline)
		}
		w.ibuf = w.ibuf[:0]
		for _, s := range sgl {
			w.ibuf = append(w.ibuf, s.Buf...)
		}
		w.one[0] = rdma.SGE{Buf: w.ibuf}
		w.sgl = w.one[:]
	case len(sgl) == 1:
		w.one[0] = sgl[0]
		w.sgl = w.one[:]
	default:
		w.many = append(w.many[:0], sgl...)
		w.sgl = w.many
	}
	c.tail++
	return nil
}

func (c *conn) PostRecv(wrid uint64, buf []byte, mr *rdma.MR) error {
	var one [1]rdma.SGE
	return c.postRecv("post_recv", wrid, soft.One(&one, buf, mr))
}

func (c *conn) PostRecvv(wrid uint64, sgl []rdma.SGE) error {
	return c.postRecv("post_recvv", wrid, sgl)
}

func (c *conn) postRecv(name string, wrid uint64, sgl []rdma.SGE) error {
	n, err := soft.CheckLocal(c.dev.pd, sgl, rdma.AccessLocalWrite, 0, 0)
	if err != nil {
		return opErr(name, err)
	}
	c.mu.Lock()
	err = c.enqueueRecv(name, wrid, sgl, n)
	c.mu.Unlock()
	if err == nil && c.rnrWait.Load() {
		c.progress() // the stream waits for this receive
	}
	return err
}

// enqueueRecv takes a receive-queue slot. Called with c.mu held.
func (c *conn) enqueueRecv(name string, wrid uint64, sgl []rdma.SGE, n int) error {
	if c.closed {
		return opErr(name, rdma.ErrClosed)
	}
	if c.state != stateOK {
		c.recvCQ.Push(rdma.WC{WRID: wrid, Status: rdma.StatusFlushed, Opcode: rdma.OpRecv})
		return nil
	}
	if c.rqTail-c.rqHead >= uint64(c.cfg.RecvQueueDepth) {
		return opErr(name, rdma.ErrQueueFull)
	}
	if c.rqTail-c.rqHead == uint64(len(c.rq)) {
		c.rq = growRing(c.rq, c.rqHead, c.rqTail)
	}
	if !soft.AcquireAll(sgl) {
		return opErr(name, rdma.ErrNotRegistered)
	}
	rw := c.rslot(c.rqTail)
	rw.wrid, rw.length = wrid, n
	if len(sgl) == 1 {
		rw.one[0] = sgl[0]
		rw.sgl = rw.one[:]
	} else {
		rw.many = append(rw.many[:0], sgl...)
		rw.sgl = rw.many
	}
	c.rqTail++
	return nil
}
