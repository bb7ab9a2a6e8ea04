package shm

import (
	"context"

	"github.com/gorun-hpc/gorun/transport/rdma"
	"github.com/gorun-hpc/gorun/transport/rdma/internal/soft"
)

// CreateCQ returns a shared completion queue. Stopgap: connections are
// bridged to it by goroutines (soft.Bridge) until the provider fills it
// natively.
func (d *Device) CreateCQ(depth int) (rdma.CQ, error) { return soft.NewCQ(), nil }

// DialQP implements rdma.Device.
func (d *Device) DialQP(ctx context.Context, addr string, init rdma.QPInit) (rdma.Conn, error) {
	c, err := d.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	return soft.Bridge(c, init), nil
}

// AcceptQP implements rdma.Listener.
func (l *listener) AcceptQP(ctx context.Context, init rdma.QPInit) (rdma.Conn, error) {
	c, err := l.Accept(ctx)
	if err != nil {
		return nil, err
	}
	return soft.Bridge(c, init), nil
}
