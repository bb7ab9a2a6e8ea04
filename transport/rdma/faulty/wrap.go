package faulty

import (
	"context"
	"syscall"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// Wrap returns dev with plan's faults injected into every connection.
// A nil or empty plan returns dev itself.
func Wrap(dev rdma.Device, plan *Plan) rdma.Device {
	if plan == nil || len(plan.Rules) == 0 {
		return dev
	}
	return &device{Device: dev, plan: plan}
}

type device struct {
	rdma.Device
	plan *Plan
}

// Counters passes the wrapped device's counters through, if it keeps any.
func (d *device) Counters() rdma.Counters {
	if cs, ok := d.Device.(rdma.CounterSource); ok {
		return cs.Counters()
	}
	return rdma.Counters{}
}

func (d *device) Listen(ctx context.Context, addr string) (rdma.Listener, error) {
	ln, err := d.Device.Listen(ctx, addr)
	if err != nil {
		return nil, err
	}
	return &listener{Listener: ln, plan: d.plan}, nil
}

func (d *device) Dial(ctx context.Context, addr string) (rdma.Conn, error) {
	c, err := d.Device.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	return newConn(c, d.plan, nil), nil
}

type listener struct {
	rdma.Listener
	plan *Plan
}

func (l *listener) Accept(ctx context.Context) (rdma.Conn, error) {
	c, err := l.Listener.Accept(ctx)
	if err != nil {
		return nil, err
	}
	return newConn(c, l.plan, nil), nil
}

type conn struct {
	rdma.Conn
	plan *Plan
	cqs  []*cq // the shared CQs it is bound to (DialQP, AcceptQP)
}

// fire applies the rules matching (op, at); it reports whether the request
// must be dropped.
func (c *conn) fire(op string, at Point) (drop bool) {
	for _, r := range c.plan.Rules {
		if !r.match(op, at) {
			continue
		}
		switch r.Action {
		case Drop:
			drop = true
		case Cut:
			c.Close()
		default:
			act(r)
		}
	}
	return drop
}

// act performs the actions that do not depend on where r fired.
func act(r *Rule) {
	switch r.Action {
	case Delay:
		time.Sleep(r.Delay)
	case Kill:
		syscall.Kill(syscall.Getpid(), syscall.SIGKILL)
		select {} // not reached: SIGKILL cannot be caught
	case Freeze:
		syscall.Kill(syscall.Getpid(), syscall.SIGSTOP)
	case Hook:
		if r.Hook != nil {
			r.Hook()
		}
	}
}

// post runs one post through the rules around the provider's call.
func (c *conn) post(op string, do func() error) error {
	if c.fire(op, BeforePost) {
		return nil
	}
	if err := do(); err != nil {
		return err
	}
	c.fire(op, AfterPost)
	return nil
}

func (c *conn) PostSend(wrid uint64, buf []byte, mr *rdma.MR, f rdma.Flags) error {
	return c.post("send", func() error { return c.Conn.PostSend(wrid, buf, mr, f) })
}

func (c *conn) PostSendv(wrid uint64, sgl []rdma.SGE, f rdma.Flags) error {
	return c.post("send", func() error { return c.Conn.PostSendv(wrid, sgl, f) })
}

func (c *conn) PostRecv(wrid uint64, buf []byte, mr *rdma.MR) error {
	return c.post("recv", func() error { return c.Conn.PostRecv(wrid, buf, mr) })
}

func (c *conn) PostRecvv(wrid uint64, sgl []rdma.SGE) error {
	return c.post("recv", func() error { return c.Conn.PostRecvv(wrid, sgl) })
}

func (c *conn) PostWrite(wrid uint64, buf []byte, mr *rdma.MR, f rdma.Flags, ra uint64, rkey uint32) error {
	return c.post("write", func() error { return c.Conn.PostWrite(wrid, buf, mr, f, ra, rkey) })
}

func (c *conn) PostWritev(wrid uint64, sgl []rdma.SGE, f rdma.Flags, ra uint64, rkey uint32) error {
	return c.post("write", func() error { return c.Conn.PostWritev(wrid, sgl, f, ra, rkey) })
}

func (c *conn) PostWriteImm(wrid uint64, buf []byte, mr *rdma.MR, f rdma.Flags, ra uint64, rkey uint32, imm uint32) error {
	return c.post("write", func() error { return c.Conn.PostWriteImm(wrid, buf, mr, f, ra, rkey, imm) })
}

func (c *conn) PostRead(wrid uint64, buf []byte, mr *rdma.MR, f rdma.Flags, ra uint64, rkey uint32) error {
	return c.post("read", func() error { return c.Conn.PostRead(wrid, buf, mr, f, ra, rkey) })
}

func (c *conn) PostReadv(wrid uint64, sgl []rdma.SGE, f rdma.Flags, ra uint64, rkey uint32) error {
	return c.post("read", func() error { return c.Conn.PostReadv(wrid, sgl, f, ra, rkey) })
}

func (c *conn) GetSendComp(ctx context.Context) (rdma.WC, error) {
	c.fire("wait", InWait)
	return c.Conn.GetSendComp(ctx)
}

func (c *conn) GetRecvComp(ctx context.Context) (rdma.WC, error) {
	c.fire("wait", InWait)
	return c.Conn.GetRecvComp(ctx)
}
