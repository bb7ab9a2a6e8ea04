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

// TestEngineCQOverrun: a real CQ overrun (rxe raises IBV_EVENT_CQ_ERR)
// reaches a user of the collectives engine. Rank 0's device has a
// one-CQE CQ that its engine does not poll while rank 1 sends it 16
// messages; once the event is in, rank 0's receive of them fails
// promptly with an error that names rank 1 and the event, and rank 0's
// engine device gives up on the CQ (Device.Err) after a bounded number
// of polls and arms of it, instead of polling and arming it in a loop.
func TestEngineCQOverrun(t *testing.T) {
	ip := vmIP(t)
	events := watchAsyncEvents(t)
	ctx := ctxT(t)
	td := &tinyCQDev{Device: openDev(t, rdma.Config{RNRRetry: -1})}
	d0, err := engine.NewDevice(td, 16)
	if err != nil {
		t.Fatal(err)
	}
	d1, err := engine.NewDevice(openDev(t, rdma.Config{RNRRetry: -1}), 16)
	if err != nil {
		t.Fatal(err)
	}
	p := engine.LinkParams{Slots: 16, SlotBytes: 4096}
	ln, err := td.Listen(ctx, ip+":0")
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
		c, err := ln.AcceptQP(ctx, td.unwrap(d0.QPInit()))
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
	e0 := engine.NewEngine(0, 2, []*engine.Link{nil, r.l}, []*engine.Device{d0})
	e1 := engine.NewEngine(1, 2, []*engine.Link{l1, nil}, []*engine.Device{d1})
	t.Cleanup(func() {
		done := make(chan struct{})
		go func() { e1.Close(); close(done) }()
		e0.Close()
		<-done
		d0.Close()
		d1.Close()
	})

	n := 16 * (p.SlotBytes - 32) // 16 messages, staged: under engine.DirectMin
	plan := func(rank int, send bool) (*engine.Plan, *engine.Call) {
		buf := make([]byte, n)
		return engine.Compile(collectives.DirectSendRecv(rank, 2, 1-rank, send, n, 1<<20)),
			&engine.Call{Coll: collectives.SendRecv, DType: kernels.Uint8, Count: n, Work: buf, Input: buf}
	}
	gate := make(chan struct{})
	td.cq.gate.Store(&gate)
	sent := make(chan error, 1)
	go func() {
		p1, call := plan(1, true)
		sent <- e1.Run(ctx, p1, call, 0)
	}()
	events.wait(t, ctx, eventCQErr, "IBV_EVENT_CQ_ERR")
	before := td.cq.calls.Load()
	td.cq.gate.Store(nil)
	close(gate)

	p0, call := plan(0, false)
	err = e0.Run(ctx, p0, call, 0)
	var pe *engine.PeerError
	if !errors.As(err, &pe) || pe.Rank != 1 || !errors.Is(err, ErrAsyncEvent) || !strings.Contains(err.Error(), "IBV_EVENT_CQ_ERR") {
		t.Fatalf("rank 0's Run = %v; want a *PeerError naming rank 1 that wraps ErrAsyncEvent and names IBV_EVENT_CQ_ERR", err)
	}
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
