package tcp

import "hash/crc32"

// Batch bounds for one writev: enough frames to amortise the system call
// for small messages, and few enough iovecs to stay under IOV_MAX (1024)
// even when every request has a full scatter-gather list.
const (
	maxBatch = 64
	maxIov   = 1024 - 33
)

// writeLoop is the only writer of the socket. Each round it takes every
// queued response and then the requests the writer may send (all of them
// in post order, stopping at a fenced request while reads are in flight),
// and gathers headers and payloads with one writev: the payload goes from
// the registered region to the kernel without a copy.
func (c *conn) writeLoop() {
	defer close(c.writeDone)
	for {
		c.mu.Lock()
		resp := c.resp
		c.resp = c.respSpare[:0]
		iov := c.iov[:0]
		c.seals = c.seals[:0]
		for i := range resp {
			iov = append(iov, resp[i].hdr[:c.hlen])
			if len(resp[i].data) > 0 {
				iov = append(iov, resp[i].data)
			}
		}
		switch c.state {
		case stateOK:
			iov = c.takeRequests(iov)
		case stateError:
			// The reader has stopped touching the send queue; nothing of
			// it is in a writev now. Flush it.
			c.flushSQ()
		}
		c.mu.Unlock()

		for _, s := range c.seals {
			seal(s.hdr, crcOf(iov[s.lo:s.hi]))
		}
		if len(iov) > 0 {
			c.wbufs = iov
			raceReleaseIO()
			_, err := c.wbufs.WriteTo(c.nc)
			clear(iov)
			c.iov = iov[:0]
			for i := range resp {
				putBuf(resp[i].pooled)
				resp[i] = response{}
			}
			c.respSpare = resp[:0]
			if err != nil {
				c.fail(err)
				return
			}
			continue
		}
		c.respSpare = resp[:0]
		select {
		case <-c.wake:
		case <-c.done:
			return
		}
	}
}

// takeRequests appends the next sendable requests to iov and marks them as
// on the wire; with Config.Checksum the writer seals their headers after
// releasing c.mu (c.seals), so the CRC of a large payload holds no lock.
// Called with c.mu held.
func (c *conn) takeRequests(iov [][]byte) [][]byte {
	for n := 0; c.tx < c.tail && n < maxBatch && len(iov) < maxIov; n++ {
		w := c.slot(c.tx)
		if w.fence && c.readsInFlight > 0 {
			break // the reader kicks c.wake when the last read completes
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
		}
		c.tx++
	}
	return iov
}

// queueResp hands a response frame to the writer. Consecutive ACKs merge:
// they are cumulative.
func (c *conn) queueResp(h header, data []byte, pooled *[]byte) {
	var crc uint32
	if c.cfg.Checksum && len(data) > 0 {
		crc = crc32.Checksum(data, castagnoli)
	}
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
	kick(c.wake)
}

func (c *conn) encodeResp(r *response) {
	r.h.encode(head(&r.hdr))
	if c.cfg.Checksum {
		seal(&r.hdr, r.crc)
	}
}
