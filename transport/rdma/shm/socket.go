//go:build linux

package shm

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// Control messages on the unix socket after the handshake: a header of
// type and body length, then the body. The socket carries what is rare
// (errors, the fallback copies); its end is how a peer's close or death is
// noticed.
const (
	msgError    = 1 // body: why the sender entered the error state
	msgWriteReq = 2 // body: rkey u32, pad u32, addr u64, payload
	msgReadReq  = 3 // body: rkey u32, pad u32, addr u64, length u64
	msgResp     = 4 // body: status u32, pad u32, payload (reads)

	ctlHdr = 8
)

// sendCtl writes one control message; parts are concatenated as the body.
func (c *conn) sendCtl(typ uint32, parts ...[]byte) error {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	var h [ctlHdr]byte
	binary.LittleEndian.PutUint32(h[0:], typ)
	binary.LittleEndian.PutUint32(h[4:], uint32(n))
	c.wMu.Lock()
	defer c.wMu.Unlock()
	if _, err := c.uc.Write(h[:]); err != nil {
		return err
	}
	for _, p := range parts {
		if _, err := c.uc.Write(p); err != nil {
			return err
		}
	}
	return nil
}

// socketLoop reads control messages until the socket ends. An end we did
// not cause means the peer closed or died: outstanding work fails and the
// completion queues report the closed connection once drained.
func (c *conn) socketLoop() {
	defer c.wg.Done()
	err := c.readCtl()
	if c.state.Load() == stateClosed {
		return
	}
	c.peerGone.Store(true)
	// What the peer published before it went was delivered as far as it
	// knows (its sends completed): hand it over before the flush. A
	// receive poller asleep on the ring holds progMu; wake it first.
	c.wakeAll()
	c.progMu.Lock()
	if c.state.Load() != stateClosed {
		c.drain(nil)
	}
	c.progMu.Unlock()
	reason := c.opErr("conn", fmt.Errorf("peer pid %d closed the connection (%v): %w", c.peerPid, err, rdma.ErrClosed))
	c.setError(reason, false)
	c.wakeAll()
	c.flushRecvs()
	// A request waiting for a fallback answer gets none.
	select {
	case c.respCh <- fallbackResp{status: rdma.StatusRetryExceeded}:
	default:
	}
	// The queued requests flush now; the queue ends after them.
	c.sqMu.Lock()
	for (c.busy || len(c.pending) > 0) && c.state.Load() != stateClosed {
		c.sqIdle.Wait()
	}
	c.sqMu.Unlock()
	c.sendCQ.Shut(reason)
	c.recvCQ.Shut(reason)
}

func (c *conn) readCtl() error {
	var h [ctlHdr]byte
	for {
		if _, err := io.ReadFull(c.uc, h[:]); err != nil {
			return err
		}
		typ := binary.LittleEndian.Uint32(h[0:])
		n := int(binary.LittleEndian.Uint32(h[4:]))
		switch typ {
		case msgError:
			body := make([]byte, min(n, 4096))
			if _, err := io.ReadFull(c.uc, body); err != nil {
				return err
			}
			if _, err := io.CopyN(io.Discard, c.uc, int64(n-len(body))); err != nil {
				return err
			}
			c.setError(c.opErr("conn", fmt.Errorf("peer pid %d: %s", c.peerPid, body)), false)
		case msgWriteReq, msgReadReq, msgResp:
			if err := c.serveFallback(typ, n); err != nil {
				return err
			}
		default:
			return fmt.Errorf("unknown control message %d", typ)
		}
	}
}
