package mem

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
	"github.com/gorun-hpc/gorun/transport/rdma/internal/soft"
)

// MaxInline is the largest payload a FlagInline request may carry.
const MaxInline = 256

const provider = "mem"

func init() {
	rdma.RegisterProviderInfo(rdma.ProviderInfo{Name: provider, Reach: rdma.ReachProcess, Preference: 40}, func(cfg rdma.Config) (rdma.Device, error) {
		return Open(cfg), nil
	})
}

// namespace maps listener names to listeners, process wide.
var namespace struct {
	mu   sync.Mutex
	next uint64
	lns  map[string]*listener
}

// Open returns a new device with cfg (zero fields take their defaults).
func Open(cfg rdma.Config) rdma.Device {
	return &device{
		cfg:   cfg.WithDefaults(),
		pd:    soft.NewPD(provider),
		conns: make(map[*conn]struct{}),
		lns:   make(map[*listener]struct{}),
	}
}

type device struct {
	cfg rdma.Config
	pd  *soft.PD

	mu     sync.Mutex
	closed bool
	conns  map[*conn]struct{}
	lns    map[*listener]struct{}

	counts counts // refusals (counters.go)
}

func opErr(op string, err error) error { return rdma.NewOpError(provider, op, err) }

func (d *device) Name() string { return provider }

func (d *device) isClosed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.closed
}

func (d *device) Register(buf []byte, access rdma.Access) (*rdma.MR, error) {
	return d.pd.Register(buf, access, d.isClosed())
}

func (d *device) Alloc(n int, access rdma.Access) (*rdma.MR, error) {
	return d.pd.Alloc(n, access, d.cfg.AllocNode(), d.isClosed())
}

// Listen binds a name in the process-wide namespace. Any address is
// accepted; "mem:NAME" asks for NAME, anything else gets a fresh number.
func (d *device) Listen(ctx context.Context, addr string) (rdma.Listener, error) {
	if err := ctx.Err(); err != nil {
		return nil, opErr("listen", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, opErr("listen", rdma.ErrClosed)
	}
	namespace.mu.Lock()
	defer namespace.mu.Unlock()
	if namespace.lns == nil {
		namespace.lns = make(map[string]*listener)
	}
	var name string
	if n, ok := strings.CutPrefix(addr, "mem:"); ok && n != "" && n != "0" {
		name = addr
		if namespace.lns[name] != nil {
			return nil, opErr("listen", fmt.Errorf("%s: address in use: %w", addr, rdma.ErrInvalid))
		}
	} else {
		for name == "" || namespace.lns[name] != nil {
			namespace.next++
			name = "mem:" + strconv.FormatUint(namespace.next, 10)
		}
	}
	ln := &listener{dev: d, addr: Addr(name), ready: make(chan struct{}, 1), done: make(chan struct{})}
	namespace.lns[name] = ln
	d.lns[ln] = struct{}{}
	return ln, nil
}

// Dial connects to a listener's address and returns a connected Conn.
func (d *device) Dial(ctx context.Context, addr string) (rdma.Conn, error) {
	return d.dial(ctx, addr, queues{})
}

func (d *device) dial(ctx context.Context, addr string, q queues) (rdma.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, opErr("dial", err)
	}
	namespace.mu.Lock()
	ln := namespace.lns[addr]
	namespace.mu.Unlock()
	if ln == nil {
		return nil, opErr("dial", fmt.Errorf("%s: connection refused (no listener): %w", addr, rdma.ErrNotConnected))
	}
	srvDev := ln.dev
	id := connIDs.Add(1)
	cli := newConn(d, fmt.Sprintf("%s/c%d", addr, id))
	srv := newConn(srvDev, fmt.Sprintf("%s/s%d", addr, id))
	cli.peer, srv.peer = srv, cli
	cli.bind(q)
	if !d.track(cli) {
		return nil, opErr("dial", rdma.ErrClosed)
	}
	if !srvDev.track(srv) {
		d.untrack(cli)
		return nil, opErr("dial", fmt.Errorf("%s: connection refused (device closed): %w", addr, rdma.ErrNotConnected))
	}
	if !ln.enqueue(srv) {
		cli.Close()
		srv.Close()
		return nil, opErr("dial", fmt.Errorf("%s: connection refused (listener closed): %w", addr, rdma.ErrNotConnected))
	}
	return cli, nil
}

func (d *device) track(c *conn) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return false
	}
	d.conns[c] = struct{}{}
	return true
}

func (d *device) untrack(c *conn) {
	d.mu.Lock()
	delete(d.conns, c)
	d.mu.Unlock()
}

// Close closes every listener and connection of the device, then
// deregisters its memory regions.
func (d *device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	lns := make([]*listener, 0, len(d.lns))
	for ln := range d.lns {
		lns = append(lns, ln)
	}
	conns := make([]*conn, 0, len(d.conns))
	for c := range d.conns {
		conns = append(conns, c)
	}
	d.mu.Unlock()
	for _, ln := range lns {
		ln.Close()
	}
	for _, c := range conns {
		c.Close()
	}
	// Closing the conns waited for their engines and their peers', so no
	// copy into our memory runs now; a request still holding a region is
	// a Post racing this Close, which lets go as it sees the conn closed.
	// Wait for it (the Release wakes us), for a bounded time.
	ctx, cancel := context.WithTimeout(context.Background(), closeDrainTimeout)
	defer cancel()
	var firstErr error
	for _, mr := range d.pd.All() {
		err := mr.DeregisterWait(ctx)
		if err != nil && firstErr == nil && !isClosedErr(err) {
			firstErr = err
		}
	}
	return firstErr
}

// closeDrainTimeout bounds Close's wait for a region still in use.
const closeDrainTimeout = time.Second

// Addr is a mem listener's address, "mem:N".
type Addr string

func (a Addr) Network() string { return provider }
func (a Addr) String() string  { return string(a) }

type listener struct {
	dev   *device
	addr  Addr
	ready chan struct{} // a conn was queued
	done  chan struct{} // closed by Close

	mu      sync.Mutex
	closed  bool
	pending []*conn // dialed, not yet accepted
}

func (l *listener) Addr() net.Addr { return l.addr }

// enqueue hands a dialed conn to Accept; false if the listener is closed.
func (l *listener) enqueue(c *conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.pending = append(l.pending, c)
	l.signal()
	return true
}

func (l *listener) signal() {
	select {
	case l.ready <- struct{}{}:
	default:
	}
}

func (l *listener) Accept(ctx context.Context) (rdma.Conn, error) {
	return l.accept(ctx, queues{})
}

// accept returns the next dialed conn, bound to q. Nothing can have
// completed on it before: its peer's sends find no receive posted yet.
func (l *listener) accept(ctx context.Context, q queues) (rdma.Conn, error) {
	for {
		l.mu.Lock()
		if len(l.pending) > 0 {
			c := l.pending[0]
			l.pending[0] = nil
			l.pending = l.pending[1:]
			if len(l.pending) > 0 {
				l.signal() // another Accept may be waiting
			}
			l.mu.Unlock()
			c.bind(q)
			return c, nil
		}
		closed := l.closed
		l.mu.Unlock()
		if closed {
			return nil, opErr("accept", rdma.ErrClosed)
		}
		select {
		case <-l.ready:
		case <-l.done:
		case <-ctx.Done():
			return nil, opErr("accept", ctx.Err())
		}
	}
}

// Close unbinds the address and refuses the connections not yet accepted.
func (l *listener) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return opErr("close", rdma.ErrClosed)
	}
	l.closed = true
	pending := l.pending
	l.pending = nil
	l.mu.Unlock()
	close(l.done)
	namespace.mu.Lock()
	delete(namespace.lns, string(l.addr))
	namespace.mu.Unlock()
	l.dev.mu.Lock()
	delete(l.dev.lns, l)
	l.dev.mu.Unlock()
	for _, c := range pending {
		c.Close()
	}
	return nil
}

func isClosedErr(err error) bool { return errors.Is(err, rdma.ErrClosed) }
