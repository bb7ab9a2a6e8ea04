package mem

import (
	"context"
	"fmt"

	"github.com/gorun-hpc/gorun/transport/rdma"
	"github.com/gorun-hpc/gorun/transport/rdma/internal/soft"
)

// cq is a completion queue that conns of one device share: a soft.CQ that
// their engines, and posters running a request inline, push completions
// straight into. Poll takes them on the caller's goroutine; there is no
// progress to drive in-process.
type cq struct {
	*soft.CQ
	dev *device
}

// CreateCQ implements rdma.Device. depth is not needed: the queue grows.
func (d *device) CreateCQ(depth int) (rdma.CQ, error) {
	if depth < 0 {
		return nil, opErr("create_cq", rdma.ErrInvalid)
	}
	if d.isClosed() {
		return nil, opErr("create_cq", rdma.ErrClosed)
	}
	return &cq{CQ: soft.NewCQ(), dev: d}, nil
}

// Poll implements rdma.CQ: nothing after Close, as the contract says,
// even if flushes came in late.
func (q *cq) Poll(wcs []rdma.WC) int {
	select {
	case <-q.Closed():
		return 0
	default:
		return q.CQ.Poll(wcs)
	}
}

// queues are the shared CQs a conn is bound to; nil means private.
type queues struct{ send, recv *soft.CQ }

// queues checks that init names CQs of this device.
func (d *device) queues(op string, init rdma.QPInit) (queues, error) {
	var q queues
	for _, x := range []struct {
		cq  rdma.CQ
		dst **soft.CQ
	}{{init.SendCQ, &q.send}, {init.RecvCQ, &q.recv}} {
		if x.cq == nil {
			continue
		}
		c, ok := x.cq.(*cq)
		if !ok || c.dev != d {
			return q, opErr(op, fmt.Errorf("completion queue of another device or provider: %w", rdma.ErrInvalid))
		}
		*x.dst = c.CQ
	}
	return q, nil
}

// DialQP implements rdma.Device.
func (d *device) DialQP(ctx context.Context, addr string, init rdma.QPInit) (rdma.Conn, error) {
	q, err := d.queues("dial", init)
	if err != nil {
		return nil, err
	}
	return d.dial(ctx, addr, q)
}

// AcceptQP implements rdma.Listener.
func (l *listener) AcceptQP(ctx context.Context, init rdma.QPInit) (rdma.Conn, error) {
	q, err := l.dev.queues("accept", init)
	if err != nil {
		return nil, err
	}
	return l.accept(ctx, q)
}
