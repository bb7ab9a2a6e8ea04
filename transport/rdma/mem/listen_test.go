package mem_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
	"github.com/gorun-hpc/gorun/transport/rdma/mem"
)

func TestListenAddresses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	dev := mem.Open(rdma.Config{})
	defer dev.Close()
	ln, err := dev.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if a := ln.Addr(); a.Network() != "mem" || !strings.HasPrefix(a.String(), "mem:") {
		t.Fatalf("address %s/%s", a.Network(), a)
	}
	named, err := dev.Listen(ctx, "mem:rank-3")
	if err != nil || named.Addr().String() != "mem:rank-3" {
		t.Fatalf("named listen: %v %v", named, err)
	}
	if _, err := dev.Listen(ctx, "mem:rank-3"); !errors.Is(err, rdma.ErrInvalid) {
		t.Fatalf("second listen on a name: %v", err)
	}
	named.Close()
	again, err := dev.Listen(ctx, "mem:rank-3")
	if err != nil {
		t.Fatalf("listen after the name was freed: %v", err)
	}
	again.Close()

	// Two pending dials, two waiting accepts.
	accepted := make(chan error, 2)
	for i := 0; i < 2; i++ {
		go func() {
			c, err := ln.Accept(ctx)
			if err == nil {
				c.Close()
			}
			accepted <- err
		}()
	}
	for i := 0; i < 2; i++ {
		c, err := dev.Dial(ctx, ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	for i := 0; i < 2; i++ {
		if err := <-accepted; err != nil {
			t.Fatal(err)
		}
	}
	// A dial nobody accepts is refused when the listener closes.
	pend, err := dev.Dial(ctx, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	if err := pend.PostSend(1, nil, nil, rdma.FlagSignaled); !errors.Is(err, rdma.ErrClosed) {
		t.Fatalf("post on a dialed conn whose listener closed unaccepted: %v", err)
	}
	if _, err := ln.Accept(ctx); !errors.Is(err, rdma.ErrClosed) {
		t.Fatalf("accept after close: %v", err)
	}
	if _, err := dev.Dial(ctx, ln.Addr().String()); !errors.Is(err, rdma.ErrNotConnected) {
		t.Fatalf("dial after close: %v", err)
	}
	if _, err := dev.Dial(ctx, "mem:nobody"); !errors.Is(err, rdma.ErrNotConnected) {
		t.Fatalf("dial to nobody: %v", err)
	}
}

// TestDeviceClose: closing a device closes its conns (and so disconnects
// their peers) and refuses further use.
func TestDeviceClose(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a, b, da, _ := pair(t, rdma.Config{})
	mr, err := da.Alloc(64, rdma.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.PostRecv(1, nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := da.Close(); err != nil {
		t.Fatal(err)
	}
	if mr.Valid() {
		t.Fatal("MR still registered after device Close")
	}
	if err := a.PostSend(1, nil, nil, 0); !errors.Is(err, rdma.ErrClosed) {
		t.Fatalf("post after device close: %v", err)
	}
	if wc, err := b.GetRecvComp(ctx); err != nil || wc.Status != rdma.StatusFlushed {
		t.Fatalf("peer's receive after device close: %+v %v", wc, err)
	}
	if _, err := b.GetRecvComp(ctx); !errors.Is(err, rdma.ErrClosed) {
		t.Fatalf("peer's GetRecvComp once drained: %v", err)
	}
	if err := b.Err(); !errors.Is(err, rdma.ErrClosed) {
		t.Fatalf("peer's Err: %v", err)
	}
	if _, err := da.Alloc(64, rdma.AccessLocalWrite); !errors.Is(err, rdma.ErrClosed) {
		t.Fatalf("alloc after close: %v", err)
	}
	if _, err := da.Listen(ctx, "127.0.0.1:0"); !errors.Is(err, rdma.ErrClosed) {
		t.Fatalf("listen after close: %v", err)
	}
}
