package mem_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
	"github.com/gorun-hpc/gorun/transport/rdma/mem"
)

// A CQ belongs to its device: binding a conn of another device to it is
// refused, on both the dialing and the accepting side.
func TestCQOtherDevice(t *testing.T) {
	ctx := context.Background()
	devA, _ := rdma.Open("mem")
	defer devA.Close()
	devB, _ := rdma.Open("mem")
	defer devB.Close()
	cqA, err := devA.CreateCQ(0)
	if err != nil {
		t.Fatal(err)
	}
	defer cqA.Close()
	ln, err := devB.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, err := devB.DialQP(ctx, ln.Addr().String(), rdma.QPInit{RecvCQ: cqA}); !errors.Is(err, rdma.ErrInvalid) {
		t.Fatalf("DialQP with another device's CQ: %v, want ErrInvalid", err)
	}
	if _, err := ln.AcceptQP(ctx, rdma.QPInit{SendCQ: cqA}); !errors.Is(err, rdma.ErrInvalid) {
		t.Fatalf("AcceptQP with another device's CQ: %v, want ErrInvalid", err)
	}
	if _, err := devA.CreateCQ(-1); !errors.Is(err, rdma.ErrInvalid) {
		t.Fatalf("CreateCQ(-1): %v", err)
	}
}

// A Poll after Close returns nothing, even with completions queued, and
// Close leaves a token for a sleeper.
func TestCQPollAfterClose(t *testing.T) {
	ctx := context.Background()
	dev, _ := rdma.Open("mem")
	defer dev.Close()
	peer, _ := rdma.Open("mem")
	defer peer.Close()
	cq, _ := dev.CreateCQ(0)
	ln, err := peer.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// The accepted end stays open until the test ends: closed at once, it
	// raced the PostRecv below, which then failed with the peer's close
	// (.ci/run, 2026-11-28).
	accepted := make(chan rdma.Conn, 1)
	go func() {
		c, _ := ln.Accept(ctx)
		accepted <- c
	}()
	defer func() {
		ln.Close() // an Accept still waiting (the dial failed) returns
		if c := <-accepted; c != nil {
			c.Close()
		}
	}()
	c, err := dev.DialQP(ctx, ln.Addr().String(), rdma.QPInit{SendCQ: cq, RecvCQ: cq})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.PostRecv(1, nil, nil); err != nil {
		t.Fatal(err)
	}
	c.Close() // the receive is flushed into the CQ
	cq.Close()
	var wcs [4]rdma.WC
	if n := cq.Poll(wcs[:]); n != 0 {
		t.Fatalf("Poll after Close: %d completions", n)
	}
	select {
	case <-cq.Notify():
	default:
		t.Fatal("no token after Close")
	}
}

// TestCloseLeavesItsFlushesInTheCQ: when Close returns, every completion
// of the conn is in its CQ, even while the peer's Close runs at the same
// moment (it flushes this end's receives on its own goroutine). The engine
// relies on it: once it has closed a conn and polled the CQ, it gives the
// conn's wrid prefix to the next conn, and a flush arriving later failed
// that one (comm's TestCollectivesSampled, n=64: "recv ... flushed" on a
// healthy new connection).
func TestCloseLeavesItsFlushesInTheCQ(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	da, db := mem.Open(rdma.Config{}), mem.Open(rdma.Config{})
	defer da.Close()
	defer db.Close()
	q, _ := da.CreateCQ(0)
	defer q.Close()
	ln, err := db.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	buf, _ := da.Alloc(64, rdma.AccessLocalWrite)
	const recvs = 8
	wcs := make([]rdma.WC, 2*recvs)
	for round := range 2000 {
		ch := make(chan rdma.Conn, 1)
		go func() {
			c, _ := ln.Accept(ctx)
			ch <- c
		}()
		a, err := da.DialQP(ctx, ln.Addr().String(), rdma.QPInit{SendCQ: q, RecvCQ: q})
		if err != nil {
			t.Fatal(err)
		}
		b := <-ch
		if b == nil {
			t.Fatal("accept failed")
		}
		for i := range recvs {
			if err := a.PostRecv(uint64(i), buf.Bytes()[:8], buf); err != nil {
				t.Fatal(err)
			}
		}
		start := make(chan struct{})
		peerClosed := make(chan struct{})
		go func() {
			<-start
			b.Close()
			close(peerClosed)
		}()
		close(start)
		a.Close()
		n := q.Poll(wcs)
		<-peerClosed
		if n != recvs {
			later := q.Poll(wcs[n:])
			t.Fatalf("round %d: %d flushed receives in the CQ when Close returned, %d after the peer's Close, want %d", round, n, later, recvs)
		}
	}
}
