package mem_test

import (
	"context"
	"errors"
	"testing"

	"github.com/gorun-hpc/gorun/transport/rdma"
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
	go func() {
		if c, err := ln.Accept(ctx); err == nil {
			defer c.Close()
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
