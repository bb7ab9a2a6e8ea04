package tcp

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/gorun-hpc/gorun/transport/rdma"
	"github.com/gorun-hpc/gorun/transport/rdma/internal/soft"
)

// cq is a completion queue: a FIFO of completions (soft.CQ) plus the conns
// bound to it, whose sockets Poll reads on the caller's goroutine. A
// conn's private send and receive queues are cqs bound to it alone.
type cq struct {
	*soft.CQ
	dev     *device
	private bool

	mu    sync.Mutex              // serialises changes to conns and ep's set
	conns atomic.Pointer[[]*conn] // copy on write: Poll reads it unlocked
	ep    readySet                // which sockets have bytes (shared queues)
}

func newCQ(d *device) *cq {
	q := &cq{CQ: soft.NewCQ(), dev: d}
	q.conns.Store(new([]*conn))
	q.ep.init()
	return q
}

func newPrivateCQ(d *device, c *conn) *cq {
	q := newCQ(d)
	q.private = true
	q.conns.Store(&[]*conn{c})
	return q
}

// Poll implements rdma.CQ: it serves what has arrived on every bound
// conn, then returns the completions that are ready.
func (q *cq) Poll(wcs []rdma.WC) int {
	select {
	case <-q.Closed():
		return 0
	default:
	}
	conns := *q.conns.Load()
	for _, c := range conns {
		c.resume() // a write waiting for room in its socket
	}
	// With two conns or more, one readiness check costs less than a read
	// per conn: 4 ranks over tcp polled 3 sockets a poll, mostly empty.
	if len(conns) < 2 || !q.ep.progressReady(conns) {
		for _, c := range conns {
			c.progress()
		}
	}
	return q.CQ.Poll(wcs)
}

// Close implements rdma.CQ.
func (q *cq) Close() error {
	q.mu.Lock()
	q.ep.close()
	q.mu.Unlock()
	return q.CQ.Close()
}

func (q *cq) bind(c *conn) {
	q.mu.Lock()
	defer q.mu.Unlock()
	next := append(slices.Clone(*q.conns.Load()), c)
	q.conns.Store(&next)
	q.ep.add(c)
}

func (q *cq) unbind(c *conn) {
	q.mu.Lock()
	defer q.mu.Unlock()
	next := slices.DeleteFunc(slices.Clone(*q.conns.Load()), func(x *conn) bool { return x == c })
	q.conns.Store(&next)
	q.ep.remove(c)
}

// CreateCQ implements rdma.Device. depth is not needed: the queue grows.
func (d *device) CreateCQ(depth int) (rdma.CQ, error) {
	if depth < 0 {
		return nil, opErr("create_cq", rdma.ErrInvalid)
	}
	if d.isClosed() {
		return nil, opErr("create_cq", rdma.ErrClosed)
	}
	return newCQ(d), nil
}

// checkInit refuses completion queues that are not this device's.
func (d *device) checkInit(init rdma.QPInit) error {
	for _, q := range []rdma.CQ{init.SendCQ, init.RecvCQ} {
		if q == nil {
			continue
		}
		if x, ok := q.(*cq); !ok || x.dev != d || x.private {
			return fmt.Errorf("%w: completion queue %T of another device", rdma.ErrInvalid, q)
		}
	}
	return nil
}

// Dial implements rdma.Device.
func (d *device) Dial(ctx context.Context, addr string) (rdma.Conn, error) {
	return d.DialQP(ctx, addr, rdma.QPInit{})
}

// Accept implements rdma.Listener.
func (l *listener) Accept(ctx context.Context) (rdma.Conn, error) {
	return l.AcceptQP(ctx, rdma.QPInit{})
}
