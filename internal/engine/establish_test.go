package engine

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
	ctx, a, _, ln := memPair(t, false)
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

// A dialer that goes away after its join request: the acceptor's
// connection fails while it decides. That failure must reach
// EstablishAccept as its error without a data race on the link's setup
// error (the failure is dispatched by the device's watcher goroutine after
// the join; CI's race detector caught the acceptor reading it unordered).
func TestAcceptDialerGoneAfterJoin(t *testing.T) {
	ctx, a, b, ln := memPair(t, true)
	da, err := NewDevice(a, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer da.Close()
	db, err := NewDevice(b, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ea, eb := NewEngine(0, 2, nil, []*Device{da}), NewEngine(1, 2, nil, []*Device{db})
	p := LinkParams{Slots: 2, SlotBytes: 4096}
	dialed := make(chan error, 1)
	go func() {
		conn, err := b.DialQP(ctx, ln.Addr().String(), db.QPInit())
		if err != nil {
			dialed <- err
			return
		}
		dctx, dcancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer dcancel()
		_, err = EstablishDial(dctx, conn, db, eb, 0, 1, p) // gives up before the answer, closing conn
		dialed <- err
	}()
	conn, err := ln.AcceptQP(ctx, da.QPInit())
	if err != nil {
		t.Fatal(err)
	}
	decided := false
	l, err := EstablishAccept(ctx, conn, da, ea, 1, p, func(peer int) uint32 {
		decided = true
		time.Sleep(300 * time.Millisecond) // the dialer gives up and its close reaches this side meanwhile
		return 0
	})
	if err == nil || l != nil || !decided {
		t.Fatalf("EstablishAccept = %v, %v (decided %v); want the failed connection's error", l, err, decided)
	}
	if err := <-dialed; err == nil {
		t.Fatal("EstablishDial succeeded; want it to give up")
	}
}

// memPair opens two mem devices a and b for t, and a listener on a (if
// onA) or b, all closed at the end of t; ctx ends after 10 s.
func memPair(t *testing.T, onA bool) (ctx context.Context, a, b rdma.Device, ln rdma.Listener) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	a, _ = rdma.Open("mem")
	b, _ = rdma.Open("mem")
	t.Cleanup(func() { a.Close(); b.Close() })
	on := b
	if onA {
		on = a
	}
	ln, err := on.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ctx, a, b, ln
}
