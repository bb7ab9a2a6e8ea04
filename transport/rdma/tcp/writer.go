package tcp

import (
	"hash/crc32"
	"syscall"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// Writing. Whoever has frames to send — a poster, or a read pass with
// responses — takes the write token (c.writing) unless someone holds it,
// gathers every queued response and every sendable request in post order
// into one writev (headers and payloads straight from the registered
// regions: no copy), and writes it to the socket without waiting, round
// after round until nothing is queued. Frames queued while the token is
// held are written by its holder. When the socket is full (EAGAIN) the
// holder hands the token and the unwritten rest to the writer goroutine,
// which waits in the netpoller for room, writes the rest without waiting
// and goes on as any holder does: a post never blocks, and a small message
// never leaves its poster's goroutine.
//
// A poller takes a handed write back (resume, from CQ.Poll and the
// private queues' waits) unless the writer goroutine is in the middle of
// writing it, and goes on writing on its own goroutine: with one P per
// rank, the writer goroutine runs only when the poller lets the P go, and
// learns of room in the socket only when the scheduler polls the network,
// which it does not while the poller spins (runtime.Gosched puts the
// poller on the global run queue, found before the netpoller is asked).
// On tcp loopback with 16 MiB allreduces a hand-off waited 0.5 ms (2
// ranks) to 6.7 ms (4 ranks on 2 CPUs, yielding) before the writer even
// ran. The writer goroutine still writes when nobody polls.

// Batch bounds for one writev: enough frames to amortise the system call
// for small messages, and few enough iovecs to stay under IOV_MAX (1024)
// even when every request has a full scatter-gather list.
const (
	maxBatch = 64
	maxIov   = 1024 - 33
)

// flush writes what is queued, if nobody else is writing.
func (c *conn) flush() {
	if c.rc == nil {
		return // decoder tests: frames stay queued
	}
	c.mu.Lock()
	if c.writing || c.writeExited || !c.started {
		c.mu.Unlock()
		return
	}
	c.writing = true
	c.writeRounds()
}

// writeRounds writes rounds of queued frames until none is left, then lets
// the write token go. It never waits: a full socket hands the rest to the
// writer goroutine. Called with c.mu held and the token; returns with c.mu
// released.
func (c *conn) writeRounds() {
	for {
		if c.failing.Load() {
			c.writing = false
			c.exitWriteLocked()
			c.mu.Unlock()
			return
		}
		c.take()
		if len(c.iov) == 0 {
			c.doneOut()
			c.writing = false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		for _, s := range c.seals {
			seal(s.hdr, crcOf(c.iov[s.lo:s.hi]))
		}
		c.out = c.iov
		if c.endOut(c.writeOut()) {
			return
		}
		c.mu.Lock()
	}
}

// endOut ends a write of c.out that returned err. With the socket full it
// hands the token and the rest to the writer goroutine and reports true:
// the caller holds neither any more. Otherwise it returns the round's
// buffers, and an error fails the conn. Called without c.mu.
func (c *conn) endOut(err error) bool {
	if err == errAgain {
		c.mu.Lock()
		if !c.failing.Load() {
			c.setHanded(true)
			c.mu.Unlock()
			kick(c.wake)
			return true
		}
		c.mu.Unlock()
	}
	c.doneOut()
	if err != nil && err != errAgain {
		c.fail(err)
	}
	return false
}

// setHanded records whether the write token is with the writer goroutine.
// Called with c.mu held.
func (c *conn) setHanded(h bool) {
	c.handed = h
	c.handing.Store(h)
}

// resume takes back a write handed to the writer goroutine, unless that
// goroutine is writing it right now, and goes on with it here without
// waiting: a full socket hands it back. It never blocks.
func (c *conn) resume() {
	if !c.handing.Load() {
		return
	}
	c.mu.Lock()
	if !c.handed || c.wactive || c.failing.Load() {
		c.mu.Unlock()
		return
	}
	c.setHanded(false) // the token is ours; the writer goroutine lets it be
	c.mu.Unlock()
	if c.endOut(c.writeOut()) {
		return
	}
	c.mu.Lock()
	c.writeRounds()
}

// take gathers the next round into c.iov: every queued response, then the
// requests that may go (all, in post order, stopping at a fenced request
// while reads are in flight). In the error state it flushes the send queue
// instead: nothing of it is being written now. Called with c.mu held.
func (c *conn) take() {
	c.respOut, c.resp = c.resp, c.respSpare[:0]
	iov := c.iov[:0]
	c.seals = c.seals[:0]
	for i := range c.respOut {
		r := &c.respOut[i]
		iov = append(iov, r.hdr[:c.hlen])
		if len(r.data) > 0 {
			iov = append(iov, r.data)
		}
	}
	switch c.state {
	case stateOK:
		iov = c.takeRequests(iov)
	case stateError:
		c.flushSQ()
	}
	c.iov = iov
}

// doneOut returns what the last round held: pooled response buffers and
// the iovec slices.
func (c *conn) doneOut() {
	clear(c.iov)
	c.iov, c.out = c.iov[:0], nil
	for i := range c.respOut {
		putBuf(c.respOut[i].pooled)
		c.respOut[i] = response{}
	}
	c.respSpare, c.respOut = c.respOut[:0], nil
}

// writeOut writes c.out without waiting: errAgain, with c.out what is
// left, when the socket fills.
func (c *conn) writeOut() error {
	raceReleaseIO()
	for len(c.out) > 0 {
		c.wn, c.werr = 0, nil
		err := c.rc.Control(c.tryW)
		if err == nil {
			err = c.werr
		}
		c.advance(c.wn)
		if err != nil {
			return err
		}
	}
	return nil
}

// advance drops n written bytes from the front of c.out.
func (c *conn) advance(n int) {
	for n > 0 && len(c.out) > 0 {
		if n < len(c.out[0]) {
			c.out[0] = c.out[0][n:]
			return
		}
		n -= len(c.out[0])
		c.out = c.out[1:]
	}
	for len(c.out) > 0 && len(c.out[0]) == 0 {
		c.out = c.out[1:]
	}
}

func (c *conn) tryWriteFd(fd uintptr) {
	c.wn, c.werr = writev(fd, c.out, &c.iovecs)
}

// handedWriteFd is the writer goroutine's write of what it was handed:
// false waits for room. It lets the write be unless it is still handed (a
// poller took it back: resume), and marks it active while it writes, so
// that no poller takes it meanwhile. Once it is written, or failed, the
// token is the writer goroutine's (wdone, werr).
func (c *conn) handedWriteFd(fd uintptr) bool {
	c.mu.Lock()
	if !c.handed {
		c.mu.Unlock()
		return true
	}
	c.wactive = true
	c.mu.Unlock()
	raceReleaseIO()
	var err error
	for len(c.out) > 0 && err == nil {
		var n int
		n, err = writev(fd, c.out, &c.iovecs)
		c.advance(n)
	}
	c.mu.Lock()
	c.wactive = false
	if err == errAgain {
		c.mu.Unlock()
		return false
	}
	c.setHanded(false)
	c.wdone, c.werr = true, err
	c.mu.Unlock()
	return true
}

// writev writes bufs (at most IOV_MAX of them) with one system call,
// retrying EINTR; errAgain when the socket has no room.
func writev(fd uintptr, bufs [][]byte, iovecs *[]syscall.Iovec) (int, error) {
	v := (*iovecs)[:0]
	for _, b := range bufs {
		if len(b) == 0 {
			continue
		}
		if len(v) == maxIov {
			break
		}
		iv := syscall.Iovec{Base: &b[0]}
		iv.SetLen(len(b))
		v = append(v, iv)
	}
	*iovecs = v
	if len(v) == 0 {
		return 0, nil
	}
	for {
		n, e := writevRaw(fd, &v[0], len(v)) // rawio.go
		switch e {
		case 0:
			clear(v)
			return int(n), nil
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			clear(v)
			return 0, errAgain
		default:
			clear(v)
			return 0, e
		}
	}
}

// writeLoop is the writer goroutine: it owns the write token from a hand-
// off until the queue is empty.
func (c *conn) writeLoop() {
	defer close(c.writeDone)
	for {
		select {
		case <-c.wake:
		case <-c.done:
		}
		c.mu.Lock()
		if !c.handed {
			c.mu.Unlock()
			if c.failing.Load() {
				return
			}
			continue
		}
		c.wdone = false
		c.mu.Unlock()
		failing := c.failing.Load()
		var err error
		if !failing {
			err = c.rc.Write(c.handW)
		}
		c.mu.Lock()
		switch {
		case c.wdone:
			err = c.werr
		case (failing || err != nil) && c.handed:
			// The conn is going down (the socket closed while we waited
			// for room): the token is ours to give up.
			c.setHanded(false)
			if err == nil {
				err = rdma.ErrClosed
			}
		default:
			// A poller took the write back (handedWriteFd let it be) and
			// holds the token, or has handed it again and kicked us.
			c.mu.Unlock()
			continue
		}
		c.mu.Unlock()
		c.doneOut()
		if err != nil {
			c.fail(err)
		}
		c.mu.Lock()
		c.writeRounds()
	}
}

// takeRequests appends the next sendable requests to iov and marks them as
// on the wire; with Config.Checksum their headers are sealed after c.mu
// is released (c.seals), so the CRC of a large payload holds no lock;
// without it only the header's CRC is sealed, at once.
// Called with c.mu held.
func (c *conn) takeRequests(iov [][]byte) [][]byte {
	for n := 0; c.tx < c.tail && n < maxBatch && len(iov) < maxIov; n++ {
		w := c.slot(c.tx)
		if w.fence && c.readsInFlight > 0 {
			break // the reader flushes when the last read completes
		}
		h := header{op: w.op, imm: w.imm, rkey: w.rkey, length: uint32(w.length), seq: c.tx, addr: w.raddr}
		// Ask for an acknowledgement when the initiator needs one: a
		// completion to report, or, every ackEvery requests, to release
		// regions and slots of unsignaled requests.
		if w.signaled || (c.tx+1)%c.ackEvery == 0 || c.tx+1 == c.tail && c.tail-c.head >= uint64(c.cfg.SendQueueDepth)/2 {
			h.flags |= fAck
		}
		h.encode(head(&w.hdr))
		iov = append(iov, w.hdr[:c.hlen])
		lo := len(iov)
		if w.op != opReadReq {
			for _, s := range w.sgl {
				if len(s.Buf) > 0 {
					iov = append(iov, s.Buf)
				}
			}
		} else {
			c.readsInFlight++
		}
		if c.cfg.Checksum {
			c.seals = append(c.seals, sealing{hdr: &w.hdr, lo: lo, hi: len(iov)})
		} else {
			seal(&w.hdr, 0) // the header's CRC only
		}
		c.tx++
	}
	return iov
}

// queueResp queues a response frame; the read pass writes it when it
// ends. Consecutive ACKs merge: they are cumulative. Only the reader
// calls it.
func (c *conn) queueResp(h header, data []byte, pooled *[]byte) {
	var crc uint32
	if c.cfg.Checksum && len(data) > 0 {
		crc = crc32.Checksum(data, castagnoli)
	}
	c.wantFlush = true
	c.mu.Lock()
	if n := len(c.resp); h.op == opAck && n > 0 && c.resp[n-1].h.op == opAck {
		r := &c.resp[n-1]
		r.h.seq = h.seq
		c.encodeResp(r)
		c.mu.Unlock()
		return
	}
	c.resp = append(c.resp, response{h: h, data: data, crc: crc, pooled: pooled})
	c.encodeResp(&c.resp[len(c.resp)-1])
	c.mu.Unlock()
}

func (c *conn) encodeResp(r *response) {
	r.h.encode(head(&r.hdr))
	seal(&r.hdr, r.crc) // r.crc is 0 without Config.Checksum
}
