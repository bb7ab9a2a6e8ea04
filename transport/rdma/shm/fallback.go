//go:build linux

package shm

import (
	"encoding/binary"
	"io"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// When cross-memory attach is not permitted (Yama ptrace_scope 2 or 3, a
// seccomp filter, GORUN_SHM_CMA=0), writes and reads of a peer's
// registered Go memory go through the peer: the request travels on the
// unix socket and the peer's socket goroutine checks the key, the bounds
// and the access (soft.PD.Remote) and copies. Alloc'd memory never needs
// this: it is in the peer's arena, which is mapped here.

type fallbackResp struct {
	status rdma.Status
	data   []byte
}

// fallbackCopy runs w through the peer and waits for its answer.
func (c *conn) fallbackCopy(w *wr, sgl []rdma.SGE) rdma.Status {
	var req [16]byte
	binary.LittleEndian.PutUint32(req[0:], w.rkey)
	binary.LittleEndian.PutUint64(req[8:], w.raddr)
	var err error
	if w.op == rdma.OpRead {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(w.total))
		err = c.sendCtl(msgReadReq, req[:], n[:])
	} else {
		payload := make([]byte, w.total)
		gather(payload, sgl, 0)
		err = c.sendCtl(msgWriteReq, req[:], payload)
	}
	if err != nil {
		return rdma.StatusRetryExceeded
	}
	select {
	case r := <-c.respCh:
		if r.status == rdma.StatusSuccess && w.op == rdma.OpRead {
			if len(r.data) != w.total {
				return rdma.StatusRemoteInvalidRequest
			}
			scatter(sgl, 0, r.data)
		}
		return r.status
	case <-c.done:
		return rdma.StatusFlushed
	}
}

// serveFallback handles one fallback message of n body bytes on the socket
// goroutine. Answers are written from their own goroutine so that two
// peers answering each other cannot both block writing.
func (c *conn) serveFallback(typ uint32, n int) error {
	if typ == msgResp {
		body := make([]byte, n)
		if _, err := io.ReadFull(c.uc, body); err != nil {
			return err
		}
		if n < 8 {
			return errProtocol
		}
		r := fallbackResp{status: rdma.Status(binary.LittleEndian.Uint32(body)), data: body[8:]}
		select {
		case c.respCh <- r:
		default: // no request waits for it
		}
		return nil
	}
	var req [16]byte
	if n < len(req) {
		return errProtocol
	}
	if _, err := io.ReadFull(c.uc, req[:]); err != nil {
		return err
	}
	rkey := binary.LittleEndian.Uint32(req[0:])
	addr := binary.LittleEndian.Uint64(req[8:])
	st := rdma.StatusSuccess
	var data []byte
	if typ == msgWriteReq {
		size := n - len(req)
		b, mr := c.dev.pd.Remote(rkey, addr, size, rdma.AccessRemoteWrite)
		if mr == nil {
			st = rdma.StatusRemoteAccessError
			if _, err := io.CopyN(io.Discard, c.uc, int64(size)); err != nil {
				return err
			}
		} else {
			_, err := io.ReadFull(c.uc, b)
			mr.Release()
			if err != nil {
				return err
			}
		}
	} else {
		var nb [8]byte
		if n != len(req)+8 {
			return errProtocol
		}
		if _, err := io.ReadFull(c.uc, nb[:]); err != nil {
			return err
		}
		size := int(binary.LittleEndian.Uint64(nb[:]))
		b, mr := c.dev.pd.Remote(rkey, addr, size, rdma.AccessRemoteRead)
		if mr == nil {
			st = rdma.StatusRemoteAccessError
		} else {
			data = append([]byte(nil), b...)
			mr.Release()
		}
	}
	var h [8]byte
	binary.LittleEndian.PutUint32(h[:], uint32(st))
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.sendCtl(msgResp, h[:], data)
	}()
	return nil
}
