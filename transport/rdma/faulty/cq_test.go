package faulty

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// cqPairs makes n conns from a device wrapped in plan, all bound to one
// CQ of it (both queues), to a plain device; it returns the CQ, the
// wrapped conns and their peers.
func cqPairs(t *testing.T, plan *Plan, n int) (rdma.CQ, []rdma.Conn, []rdma.Conn, rdma.Device, rdma.Device) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	devA, err := rdma.Open("mem")
	if err != nil {
		t.Fatal(err)
	}
	devB, err := rdma.Open("mem")
	if err != nil {
		t.Fatal(err)
	}
	devA = Wrap(devA, plan)
	cq, err := devA.CreateCQ(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { devA.Close(); devB.Close(); cq.Close() })
	ln, err := devB.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var as, bs []rdma.Conn
	for i := 0; i < n; i++ {
		got := make(chan rdma.Conn, 1)
		go func() {
			c, err := ln.Accept(ctx)
			if err != nil {
				t.Error(err)
			}
			got <- c
		}()
		a, err := devA.DialQP(ctx, ln.Addr().String(), rdma.QPInit{SendCQ: cq, RecvCQ: cq})
		if err != nil {
			t.Fatal(err)
		}
		b := <-got
		if b == nil {
			t.FailNow()
		}
		as, bs = append(as, a), append(bs, b)
	}
	return cq, as, bs, devA, devB
}

// pollOne takes cq's next completion as a poller does: Poll, Arm, Poll,
// then wait on Notify.
func pollOne(t *testing.T, cq rdma.CQ) rdma.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	wc, err := rdma.WaitComp(ctx, cq, nil)
	if err != nil {
		t.Fatalf("no completion in the CQ: %v", err)
	}
	return wc
}

// In a shared CQ made by the wrapped device, every completion Poll hands
// out is one wait event; empty Polls are none, and cost no allocation.
func TestCQPollCountsCompletions(t *testing.T) {
	var third, every int
	var atThird int
	plan := &Plan{Rules: []*Rule{
		{Op: "wait", At: InWait, After: 3, Action: Hook, Hook: func() { third++; atThird = every }},
		{Op: "wait", At: InWait, After: 0, Action: Hook, Hook: func() { every++ }},
	}}
	cq, as, bs, _, _ := cqPairs(t, plan, 1)
	a, b := as[0], bs[0]
	var wcs [8]rdma.WC
	for i := 0; i < 1000; i++ {
		if cq.Poll(wcs[:]) != 0 {
			t.Fatal("completion from nowhere")
		}
	}
	if allocs := testing.AllocsPerRun(100, func() { cq.Poll(wcs[:]) }); allocs != 0 {
		t.Fatalf("empty Poll through faulty: %v allocations", allocs)
	}
	if every != 0 {
		t.Fatalf("empty Polls counted as %d waits", every)
	}
	for i := 0; i < 5; i++ {
		if err := a.PostRecv(uint64(i), nil, nil); err != nil {
			t.Fatal(err)
		}
		if err := b.PostSend(uint64(i), nil, nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 5; i++ {
		if wc := pollOne(t, cq); wc.WRID != uint64(i) || wc.Err() != nil {
			t.Fatalf("completion %d: %+v", i, wc)
		}
	}
	// GetRecvComp on a bound queue counts too, once per call.
	if err := a.PostRecv(5, nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.PostSend(5, nil, nil, 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if wc, err := a.GetRecvComp(ctx); err != nil || wc.WRID != 5 {
		t.Fatalf("GetRecvComp: %+v %v", wc, err)
	}
	if every != 6 || third != 1 || atThird != 2 {
		t.Fatalf("wait events: %d (want 6), the 3rd-wait rule fired %d times (want 1) after %d events (want 2)", every, third, atThird)
	}
}

// Cut at the wait point of a shared CQ closes every conn bound to it;
// their posted receives flush into the CQ.
func TestCQCutClosesBoundConns(t *testing.T) {
	plan := &Plan{Rules: []*Rule{{Op: "wait", At: InWait, After: 1, Action: Cut}}}
	cq, as, bs, _, _ := cqPairs(t, plan, 2)
	for k, a := range as {
		for i := 0; i < 2; i++ {
			if err := a.PostRecv(uint64(10*k+i), nil, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := bs[0].PostSend(99, nil, nil, 0); err != nil {
		t.Fatal(err)
	}
	if wc := pollOne(t, cq); wc.WRID != 0 || wc.Err() != nil {
		t.Fatalf("first completion %+v", wc)
	}
	// The cut came with that first completion: conn 0's second receive
	// and both of conn 1's flush.
	flushed := map[uint64]bool{}
	for len(flushed) < 3 {
		wc := pollOne(t, cq)
		if wc.Status != rdma.StatusFlushed {
			t.Fatalf("after the cut: %+v (%v), want flushed", wc, wc.Status)
		}
		flushed[wc.WRID] = true
	}
	if !flushed[1] || !flushed[10] || !flushed[11] {
		t.Fatalf("flushed %v, want 1, 10, 11", flushed)
	}
	for k, a := range as {
		if err := a.PostRecv(7, nil, nil); !errors.Is(err, rdma.ErrClosed) {
			t.Fatalf("conn %d after the cut: post_recv %v, want ErrClosed", k, err)
		}
	}
}
