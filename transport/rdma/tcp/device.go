package tcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/gorun-hpc/gorun/transport/rdma"
	"github.com/gorun-hpc/gorun/transport/rdma/internal/soft"
)

const provider = "tcp"

// MaxInline is the largest payload FlagInline accepts: it is copied into
// the send queue at post time.
const MaxInline = 256

func init() {
	info := rdma.ProviderInfo{Name: provider, Reach: rdma.ReachNetwork, NeedsIP: true, Preference: 10}
	rdma.RegisterProviderInfo(info, func(cfg rdma.Config) (rdma.Device, error) {
		cfg = cfg.WithDefaults()
		if cfg.SendQueueDepth < 1 || cfg.RecvQueueDepth < 1 || cfg.RNRTimer < 0 || cfg.RNRRetry < -1 {
			return nil, opErr("open", fmt.Errorf("%w: config %+v", rdma.ErrInvalid, cfg))
		}
		return newDevice(cfg), nil
	})
}

type device struct {
	cfg    rdma.Config
	pd     *soft.PD
	counts counts

	mu     sync.Mutex
	closed bool
	conns  map[*conn]struct{}
	lns    map[*listener]struct{}
}

func newDevice(cfg rdma.Config) *device {
	cfg.Token = bytes.Clone(cfg.Token) // the caller may reuse its slice
	return &device{
		cfg:   cfg,
		pd:    soft.NewPD(provider),
		conns: make(map[*conn]struct{}),
		lns:   make(map[*listener]struct{}),
	}
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

func (d *device) Listen(ctx context.Context, addr string) (rdma.Listener, error) {
	var lc net.ListenConfig
	nl, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, opErr("listen", err)
	}
	ln := newListener(d, nl.(*net.TCPListener))
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		nl.Close()
		return nil, opErr("listen", rdma.ErrClosed)
	}
	d.lns[ln] = struct{}{}
	ln.start()
	return ln, nil
}

// DialQP implements rdma.Device.
func (d *device) DialQP(ctx context.Context, addr string, init rdma.QPInit) (rdma.Conn, error) {
	if d.isClosed() {
		return nil, opErr("dial", rdma.ErrClosed)
	}
	if err := d.checkInit(init); err != nil {
		return nil, opErr("dial", err)
	}
	var nd net.Dialer
	nc, err := nd.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, opErr("dial", err)
	}
	c, err := d.setup(ctx, nc.(*net.TCPConn), roleDial)
	if err != nil {
		return nil, opErr("dial", err)
	}
	c.start(init)
	return c, nil
}

// setup tunes the socket, authenticates the peer and makes the conn; the
// caller starts it with its completion queues.
func (d *device) setup(ctx context.Context, nc *net.TCPConn, r role) (*conn, error) {
	tuneSocket(nc)
	if err := handshake(ctx, nc, d.cfg.Token, d.cfg.Checksum, r); err != nil {
		nc.Close()
		var no *refusal
		if errors.As(err, &no) {
			d.counts.auth.Add(1)
		}
		return nil, &peerError{peer: nc.RemoteAddr().String(), err: err}
	}
	c := newConn(d, nc, nc, nc.RemoteAddr().String())
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		nc.Close()
		return nil, rdma.ErrClosed
	}
	d.conns[c] = struct{}{}
	d.mu.Unlock()
	return c, nil
}

func (d *device) forget(c *conn) {
	d.mu.Lock()
	delete(d.conns, c)
	d.mu.Unlock()
}

func (d *device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	lns, conns := d.lns, d.conns
	d.lns, d.conns = nil, nil
	d.mu.Unlock()
	for ln := range lns {
		ln.Close()
	}
	for c := range conns {
		c.Close()
	}
	var errs []error
	for _, mr := range d.pd.All() {
		if err := mr.Deregister(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
