package mem_test

import (
	"context"
	"runtime"
	"runtime/metrics"
	"testing"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// BenchmarkCQPingPong bounces an 8-byte write-with-immediate between two
// goroutines, each polling a CQ of its own device that its conn's queues
// are bound to, as the collectives engine does: spin on Poll for a while,
// yielding after a while, then Arm, Poll, and sleep on Notify. ns/op is one round trip.
func BenchmarkCQPingPong(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	devA, err := rdma.Open("mem")
	if err != nil {
		b.Fatal(err)
	}
	defer devA.Close()
	devB, err := rdma.Open("mem")
	if err != nil {
		b.Fatal(err)
	}
	defer devB.Close()
	cqA, _ := devA.CreateCQ(0)
	cqB, _ := devB.CreateCQ(0)
	defer cqA.Close()
	defer cqB.Close()
	ln, err := devB.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	ch := make(chan rdma.Conn, 1)
	go func() {
		c, err := ln.AcceptQP(ctx, rdma.QPInit{SendCQ: cqB, RecvCQ: cqB})
		if err != nil {
			b.Error(err)
		}
		ch <- c
	}()
	a, err := devA.DialQP(ctx, ln.Addr().String(), rdma.QPInit{SendCQ: cqA, RecvCQ: cqA})
	if err != nil {
		b.Fatal(err)
	}
	c := <-ch
	if c == nil {
		b.FailNow()
	}
	defer a.Close()
	defer c.Close()
	ma := mustMR(b, devA, 8, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	mb := mustMR(b, devB, 8, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	for _, x := range []struct {
		c  rdma.Conn
		mr *rdma.MR
	}{{a, ma}, {c, mb}} {
		for i := 0; i < 2; i++ {
			if err := x.c.PostRecv(0, nil, nil); err != nil {
				b.Fatal(err)
			}
		}
	}
	// wait takes the next completion from cq, spinning before it sleeps.
	wait := func(cq rdma.CQ, wcs []rdma.WC) error {
		for {
			for i := 0; i < 1000; i++ {
				if cq.Poll(wcs) > 0 {
					return wcs[0].Err()
				}
				if i >= 100 {
					runtime.Gosched()
				}
			}
			cq.Arm()
			if cq.Poll(wcs) > 0 {
				return wcs[0].Err()
			}
			select {
			case <-cq.Notify():
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	b.SetBytes(8)
	b.ReportAllocs()
	done := make(chan error, 1)
	go func() {
		wcs := make([]rdma.WC, 1)
		for {
			err := wait(cqB, wcs)
			if err == nil {
				err = c.PostRecv(0, nil, nil)
			}
			if err == nil {
				err = c.PostWriteImm(0, mb.Bytes(), mb, 0, ma.Addr(), ma.RKey(), 1)
			}
			if err != nil {
				done <- err
				return
			}
		}
	}()
	wcs := make([]rdma.WC, 1)
	sched0 := schedEvents()
	for b.Loop() {
		if err := a.PostWriteImm(0, ma.Bytes(), ma, 0, mb.Addr(), mb.RKey(), 1); err != nil {
			b.Fatal(err)
		}
		if err := wait(cqA, wcs); err != nil {
			b.Fatal(err)
		}
		if err := a.PostRecv(0, nil, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(schedEvents()-sched0)/float64(b.N), "sched/op")
	cancel()
	<-done
}

// schedEvents counts the times goroutines have been scheduled to run
// (runnable to running): a measure of hand-offs that does not depend on
// how loaded the machine is.
func schedEvents() uint64 {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(s)
	var n uint64
	for _, c := range s[0].Value.Float64Histogram().Counts {
		n += c
	}
	return n
}
