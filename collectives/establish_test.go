package collectives

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
	_ "github.com/gorun-hpc/gorun/transport/rdma/mem"
)

// allocFails is a device whose Alloc fails after `ok` successes.
type allocFails struct {
	rdma.Device
	ok int
}

var errNoMemory = errors.New("no memory (test)")

func (d *allocFails) Alloc(n int, a rdma.Access) (*rdma.MR, error) {
	if d.ok == 0 {
		return nil, errNoMemory
	}
	d.ok--
	return d.Device.Alloc(n, a)
}

// A link whose setup fails part-way frees what it allocated and returns
// the error (it used to free through a nil *Link and panic).
func TestEstablishFailureFreesAndReturns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, _ := rdma.Open("mem")
	b, _ := rdma.Open("mem")
	defer a.Close()
	defer b.Close()
	ln, err := b.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(ctx); err == nil {
			defer c.Close()
			<-ctx.Done()
		}
	}()
	conn, err := a.Dial(ctx, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	dev := &allocFails{Device: a, ok: 1} // the staging area succeeds, the control ring fails
	d, err := NewDevice(dev, 4)
	if err != nil {
		t.Fatal(err)
	}
	l, err := Establish(ctx, conn, d, 0, LinkParams{Slots: 2, SlotBytes: 4096})
	if !errors.Is(err, errNoMemory) || l != nil {
		t.Fatalf("Establish = %v, %v; want nil and the Alloc error", l, err)
	}
}
