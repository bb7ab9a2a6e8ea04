// Package devfault fails a provider's device the way a real one fails, for
// tests of what the layers above make of it (the collectives engine,
// comm): a completion queue that overran (verbs' IBV_EVENT_CQ_ERR), and
// connections that the device itself failed (a port that stayed down, a
// device that died: Conn.Err wraps rdma.ErrDeviceFailed).
//
// Device wraps any provider's device. Its CQs are *CQ, which fail on
// CQ.Fail; its connections, dialed or accepted, are *Conn, which fail on
// Device.Lose. The provider gets its own CQs back where a connection
// names one of ours.
//
// Ownership: a Device keeps the connections it made until it is
// collected (tests are short). A CQ relays the provider's notifications
// from its own goroutine, which Close stops.
package devfault

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// CQ wraps a provider's CQ. Once failed (Fail) it is what verbs makes of
// a CQ after IBV_EVENT_CQ_ERR, an overrun that lost every completion:
// Poll finds nothing, Arm sends its token at once, Err says why. After
// counts the Polls and Arms it got since.
type CQ struct {
	rdma.CQ
	notify    chan struct{} // the provider's tokens, relayed, and the failure's
	err       atomic.Pointer[error]
	after     atomic.Int64
	stop      chan struct{}
	closeOnce sync.Once
}

// NewCQ wraps inner.
func NewCQ(inner rdma.CQ) *CQ {
	q := &CQ{CQ: inner, notify: make(chan struct{}, 1), stop: make(chan struct{})}
	go func() {
		for {
			select {
			case <-inner.Notify():
				q.token()
			case <-q.stop:
				return
			}
		}
	}()
	return q
}

func (q *CQ) token() {
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

// Fail fails the CQ with err and wakes a sleeper.
func (q *CQ) Fail(err error) {
	q.err.Store(&err)
	q.token()
}

// After is the number of Polls and Arms since Fail.
func (q *CQ) After() int64 { return q.after.Load() }

// Poll implements rdma.CQ.
func (q *CQ) Poll(wcs []rdma.WC) int {
	if q.err.Load() != nil {
		q.after.Add(1)
		return 0
	}
	return q.CQ.Poll(wcs)
}

// Arm implements rdma.CQ.
func (q *CQ) Arm() {
	if q.err.Load() != nil {
		q.after.Add(1)
		q.token()
		return
	}
	q.CQ.Arm()
}

// Notify implements rdma.CQ.
func (q *CQ) Notify() <-chan struct{} { return q.notify }

// Err implements rdma.CQ.
func (q *CQ) Err() error {
	if p := q.err.Load(); p != nil {
		return *p
	}
	return nil
}

// Close implements rdma.CQ.
func (q *CQ) Close() error {
	q.closeOnce.Do(func() { close(q.stop) })
	return q.CQ.Close()
}

// Conn is a connection its device can fail (Device.Lose): Err then
// reports that error.
type Conn struct {
	rdma.Conn
	err atomic.Pointer[error]
}

// Err implements rdma.Conn.
func (c *Conn) Err() error {
	if p := c.err.Load(); p != nil {
		return *p
	}
	return c.Conn.Err()
}

// lose records err and closes the connection, so that its posted
// receives come back flushed.
func (c *Conn) lose(err error) {
	c.err.Store(&err)
	c.Conn.Close()
}

// Device wraps a provider's device (set Device). Set the other fields
// before it is used.
type Device struct {
	rdma.Device
	// CQs, if not nil, gets each CQ the device makes; it should have room
	// for them.
	CQs chan *CQ
	// Failed, if not nil, fails each CQ from the start.
	Failed error

	mu    sync.Mutex
	conns []*Conn
}

// CreateCQ implements rdma.Device.
func (d *Device) CreateCQ(depth int) (rdma.CQ, error) {
	inner, err := d.Device.CreateCQ(depth)
	if err != nil {
		return nil, err
	}
	q := NewCQ(inner)
	if d.Failed != nil {
		q.Fail(d.Failed)
	}
	if d.CQs != nil {
		d.CQs <- q
	}
	return q, nil
}

// Lose fails every connection the device made with err, as verbs does for
// a port that stayed down or a dead device (err should wrap
// rdma.ErrDeviceFailed).
func (d *Device) Lose(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		c.lose(err)
	}
}

// track wraps a connection the device made.
func (d *Device) track(c rdma.Conn, err error) (rdma.Conn, error) {
	if err != nil {
		return nil, err
	}
	fc := &Conn{Conn: c}
	d.mu.Lock()
	d.conns = append(d.conns, fc)
	d.mu.Unlock()
	return fc, nil
}

// inner gives the provider its own CQs where init names ours.
func inner(init rdma.QPInit) rdma.QPInit {
	for _, p := range []*rdma.CQ{&init.SendCQ, &init.RecvCQ} {
		if q, ok := (*p).(*CQ); ok {
			*p = q.CQ
		}
	}
	return init
}

// Dial implements rdma.Device.
func (d *Device) Dial(ctx context.Context, addr string) (rdma.Conn, error) {
	return d.track(d.Device.Dial(ctx, addr))
}

// DialQP implements rdma.Device.
func (d *Device) DialQP(ctx context.Context, addr string, init rdma.QPInit) (rdma.Conn, error) {
	return d.track(d.Device.DialQP(ctx, addr, inner(init)))
}

// Listen implements rdma.Device.
func (d *Device) Listen(ctx context.Context, addr string) (rdma.Listener, error) {
	ln, err := d.Device.Listen(ctx, addr)
	if err != nil {
		return nil, err
	}
	return listener{ln, d}, nil
}

type listener struct {
	rdma.Listener
	d *Device
}

func (l listener) Accept(ctx context.Context) (rdma.Conn, error) {
	return l.d.track(l.Listener.Accept(ctx))
}

func (l listener) AcceptQP(ctx context.Context, init rdma.QPInit) (rdma.Conn, error) {
	return l.d.track(l.Listener.AcceptQP(ctx, inner(init)))
}
