package faulty

import (
	"context"
	"sync"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// cq wraps a CQ made by the wrapped device's CreateCQ so that the InWait
// point fires where a poller takes completions:
//
//   - every completion Poll hands out is one "wait" event at InWait,
//     counted by the device's rules like a GetSendComp or GetRecvComp call
//     (each of which returns one completion); a Poll that finds nothing is
//     not an event, so how long a caller spins does not move the count.
//     The rules fire after the provider's Poll returned and before Poll
//     returns to its caller, once per completion: "kill:wait:N" kills the
//     process as its Nth completion (over the device's conns, polled or
//     waited for) is about to be handled;
//   - Delay sleeps and Freeze stops the process inside Poll (so Poll then
//     blocks, which is the fault); Kill never returns;
//   - Cut closes every conn bound to the CQ (the poll was a wait on each of
//     them), whose outstanding requests then flush into the CQ;
//   - Drop does nothing there, as in GetSendComp and GetRecvComp.
//
// Arm, Notify and Close are the provider's.
type cq struct {
	rdma.CQ
	plan *Plan

	mu    sync.Mutex
	conns map[*conn]struct{} // bound and not closed
}

func (d *device) CreateCQ(depth int) (rdma.CQ, error) {
	inner, err := d.Device.CreateCQ(depth)
	if err != nil {
		return nil, err
	}
	return &cq{CQ: inner, plan: d.plan, conns: map[*conn]struct{}{}}, nil
}

// Poll implements rdma.CQ.
func (q *cq) Poll(wcs []rdma.WC) int {
	n := q.CQ.Poll(wcs)
	for i := 0; i < n; i++ {
		q.fire()
	}
	return n
}

// fire applies the InWait rules to one completion.
func (q *cq) fire() {
	for _, r := range q.plan.Rules {
		if !r.match("wait", InWait) {
			continue
		}
		if r.Action == Cut {
			q.cut()
			continue
		}
		act(r)
	}
}

// cut closes every conn bound to q.
func (q *cq) cut() {
	q.mu.Lock()
	conns := make([]*conn, 0, len(q.conns))
	for c := range q.conns {
		conns = append(conns, c)
	}
	q.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

func (q *cq) bind(c *conn) {
	q.mu.Lock()
	q.conns[c] = struct{}{}
	q.mu.Unlock()
}

func (q *cq) unbind(c *conn) {
	q.mu.Lock()
	delete(q.conns, c)
	q.mu.Unlock()
}

// unwrap returns init with the provider's CQs in place of ours, and ours.
func unwrap(init rdma.QPInit) (rdma.QPInit, []*cq) {
	var qs []*cq
	for _, p := range []*rdma.CQ{&init.SendCQ, &init.RecvCQ} {
		if q, ok := (*p).(*cq); ok {
			*p = q.CQ
			if len(qs) == 0 || qs[0] != q {
				qs = append(qs, q)
			}
		}
	}
	return init, qs
}

// newConn wraps c and binds it to the CQs it was made with.
func newConn(c rdma.Conn, plan *Plan, qs []*cq) *conn {
	fc := &conn{Conn: c, plan: plan, cqs: qs}
	for _, q := range qs {
		q.bind(fc)
	}
	return fc
}

// Close implements rdma.Conn.
func (c *conn) Close() error {
	for _, q := range c.cqs {
		q.unbind(c)
	}
	return c.Conn.Close()
}

func (d *device) DialQP(ctx context.Context, addr string, init rdma.QPInit) (rdma.Conn, error) {
	in, qs := unwrap(init)
	c, err := d.Device.DialQP(ctx, addr, in)
	if err != nil {
		return nil, err
	}
	return newConn(c, d.plan, qs), nil
}

func (l *listener) AcceptQP(ctx context.Context, init rdma.QPInit) (rdma.Conn, error) {
	in, qs := unwrap(init)
	c, err := l.Listener.AcceptQP(ctx, in)
	if err != nil {
		return nil, err
	}
	return newConn(c, l.plan, qs), nil
}
