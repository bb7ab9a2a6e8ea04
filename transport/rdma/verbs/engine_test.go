//go:build linux && cgo && rdma

package verbs

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/collectives"
	"github.com/gorun-hpc/gorun/internal/engine"
	"github.com/gorun-hpc/gorun/internal/kernels"
	"github.com/gorun-hpc/gorun/transport/rdma"
)

// gatedCQ is a shared CQ whose Poll waits while the gate is shut, so that
// completions pile up in the device, and that counts its Polls and Arms.
type gatedCQ struct {
	rdma.CQ
	gate  atomic.Pointer[chan struct{}]
	calls atomic.Int64
}

func (q *gatedCQ) Poll(wcs []rdma.WC) int {
	q.calls.Add(1)
	if g := q.gate.Load(); g != nil {
		<-*g
	}
	return q.CQ.Poll(wcs)
}

func (q *gatedCQ) Arm() {
	q.calls.Add(1)
	q.CQ.Arm()
}

// tinyCQDev makes its shared CQ a gatedCQ over an ibv_cq of one CQE
// whose room accounting (which exists to prevent an overrun) is lifted,
// as TestAsyncCQOverrun does, and gives the provider its own CQ where a
// connection names the gatedCQ.
type tinyCQDev struct {
	rdma.Device
	cq *gatedCQ
}

func (d *tinyCQDev) CreateCQ(int) (rdma.CQ, error) {
	c, err := d.Device.CreateCQ(1)
	if err != nil {
		return nil, err
	}
	q := c.(*cq)
	q.mu.Lock()
	q.depth = 1 << 12
	q.mu.Unlock()
	d.cq = &gatedCQ{CQ: c}
	return d.cq, nil
}

func (d *tinyCQDev) unwrap(init rdma.QPInit) rdma.QPInit {
	if init.SendCQ == rdma.CQ(d.cq) {
		init.SendCQ = d.cq.CQ
	}
	if init.RecvCQ == rdma.CQ(d.cq) {
		init.RecvCQ = d.cq.CQ
	}
	return init
}

func (d *tinyCQDev) DialQP(ctx context.Context, addr string, init rdma.QPInit) (rdma.Conn, error) {
	return d.Device.DialQP(ctx, addr, d.unwrap(init))
}

// enginePair connects two collectives engines, ranks 0 and 1, over
// verbs: rank 0 on dev0 (accepting with init0), rank 1 on dev1.
func enginePair(t *testing.T, ctx context.Context, dev0, dev1 rdma.Device, init0 func(rdma.QPInit) rdma.QPInit) (e0, e1 *engine.Engine, d0, d1 *engine.Device) {
	t.Helper()
	d0, err := engine.NewDevice(dev0, 16)
	if err != nil {
		t.Fatal(err)
	}
	d1, err = engine.NewDevice(dev1, 16)
	if err != nil {
		t.Fatal(err)
	}
	p := engine.LinkParams{Slots: 16, SlotBytes: 4096}
	ln, err := dev0.Listen(ctx, vmIP(t)+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type res struct {
		l   *engine.Link
		err error
	}
	acc := make(chan res, 1)
	go func() {
		c, err := ln.AcceptQP(ctx, init0(d0.QPInit()))
		if err != nil {
			acc <- res{err: err}
			return
		}
		l, err := engine.Establish(ctx, c, d0, 0, p)
		acc <- res{l, err}
	}()
	c1, err := d1.Dev.DialQP(ctx, ln.Addr().String(), d1.QPInit())
	if err != nil {
		t.Fatal(err)
	}
	l1, err := engine.Establish(ctx, c1, d1, 1, p)
	if err != nil {
		t.Fatal(err)
	}
	r := <-acc
	if r.err != nil {
		t.Fatal(r.err)
	}
	e0 = engine.NewEngine(0, 2, []*engine.Link{nil, r.l}, []*engine.Device{d0})
	e1 = engine.NewEngine(1, 2, []*engine.Link{l1, nil}, []*engine.Device{d1})
	t.Cleanup(func() {
		done := make(chan struct{})
		go func() { e1.Close(); close(done) }()
		e0.Close()
		<-done
		d0.Close()
		d1.Close()
	})
	return e0, e1, d0, d1
}

// sendRecvPlan is rank's half of a send of n bytes from rank 1 to rank 0.
func sendRecvPlan(rank, n int) (*engine.Plan, *engine.Call) {
	buf := make([]byte, n)
	return engine.Compile(collectives.DirectSendRecv(rank, 2, 1-rank, rank == 1, n, 1<<20)),
		&engine.Call{Coll: collectives.SendRecv, DType: kernels.Uint8, Count: n, Work: buf, Input: buf}
}

// wantOwnDevice checks that err, rank's error, blames rank's own device:
// a *engine.PeerError naming rank that wraps engine.ErrDeviceFailed (not
// ErrPeerFailed) and the event named.
func wantOwnDevice(t *testing.T, rank int, err error, event string) {
	t.Helper()
	var pe *engine.PeerError
	if !errors.As(err, &pe) || pe.Rank != rank || !errors.Is(err, engine.ErrDeviceFailed) || errors.Is(err, engine.ErrPeerFailed) ||
		!errors.Is(err, ErrAsyncEvent) || !strings.Contains(err.Error(), event) {
		t.Fatalf("rank %d's Run = %v; want a *PeerError naming rank %d itself that wraps engine.ErrDeviceFailed and ErrAsyncEvent and names %s", rank, err, rank, event)
	}
}

// TestEngineCQOverrun: a real CQ overrun (rxe raises IBV_EVENT_CQ_ERR)
// reaches a user of the collectives engine. Rank 0's device has a
// one-CQE CQ that its engine does not poll while rank 1 sends it 16
// messages; once the event is in, rank 0's receive of them fails
// promptly with an error that blames rank 0's own device (the CQ is
// rank 0's: engine.ErrDeviceFailed naming rank 0, not rank 1 as before)
// and names the event, and rank 0's engine device gives up on the CQ
// (Device.Err) after a bounded number of polls and arms of it, instead
// of polling and arming it in a loop.
func TestEngineCQOverrun(t *testing.T) {
	events := watchAsyncEvents(t)
	ctx := ctxT(t)
	td := &tinyCQDev{Device: openDev(t, rdma.Config{RNRRetry: -1})}
	e0, e1, d0, _ := enginePair(t, ctx, td, openDev(t, rdma.Config{RNRRetry: -1}), td.unwrap)

	n := 16 * (4096 - 32) // 16 messages, staged: under engine.DirectMin
	gate := make(chan struct{})
	td.cq.gate.Store(&gate)
	sent := make(chan error, 1)
	go func() {
		p1, call := sendRecvPlan(1, n)
		sent <- e1.Run(ctx, p1, call, 0)
	}()
	events.wait(t, ctx, eventCQErr, "IBV_EVENT_CQ_ERR")
	before := td.cq.calls.Load()
	td.cq.gate.Store(nil)
	close(gate)

	p0, call := sendRecvPlan(0, n)
	err := e0.Run(ctx, p0, call, 0)
	wantOwnDevice(t, 0, err, "IBV_EVENT_CQ_ERR")
	t.Logf("rank 0: %v; rank 1: %v", err, <-sent)
	// Until the device gives up on the CQ (no channel says when: look
	// every millisecond); its watcher then stops polling and arming it.
	for d0.Err() == nil {
		if ctx.Err() != nil {
			t.Fatalf("the engine device never gave up on the failed CQ (%d polls and arms of it since the event)", td.cq.calls.Load()-before)
		}
		time.Sleep(time.Millisecond)
	}
	calls := td.cq.calls.Load() - before
	if calls > 1000 {
		t.Fatalf("%d polls and arms of the failed CQ before the device gave up; want a few, not a loop", calls)
	}
	if !errors.Is(d0.Err(), ErrAsyncEvent) {
		t.Fatalf("Device.Err = %v, want the CQ's IBV_EVENT_CQ_ERR", d0.Err())
	}
	t.Logf("Device.Err: %v (%d polls and arms of the CQ since the event)", d0.Err(), calls)
}

// TestEngineDeviceFatal: IBV_EVENT_DEVICE_FATAL while rank 0's engine
// waits for rank 1 fails rank 0's Run promptly with an error that blames
// rank 0's own device, not rank 1 (as it did before: the connection's
// failure named the peer). Both ranks' devices are rxe0's context here,
// and the event is fed to the dispatcher (rxe raises none on demand), so
// rank 1's next Run is not checked, only logged: it blames its own device
// or rank 0, whichever reached its connection first, or succeeds, its
// small send posted (and so done, as an eager send is) before the event
// reached its device.
func TestEngineDeviceFatal(t *testing.T) {
	ctx := ctxT(t)
	d := openDev(t, rdma.Config{})
	e0, e1, _, _ := enginePair(t, ctx, d, openDev(t, rdma.Config{}), func(i rdma.QPInit) rdma.QPInit { return i })
	ran := make(chan error, 1)
	go func() {
		p0, call := sendRecvPlan(0, 64) // rank 1 sends nothing yet
		ran <- e0.Run(ctx, p0, call, 0)
	}()
	time.Sleep(200 * time.Millisecond)
	dispatchAsync(d.(*device).ctx, eventDevFatal, 0, 0)
	wantOwnDevice(t, 0, <-ran, "IBV_EVENT_DEVICE_FATAL")
	p1, call := sendRecvPlan(1, 64)
	t.Logf("rank 1: %v", e1.Run(ctx, p1, call, 0))
}
