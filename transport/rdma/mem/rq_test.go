package mem

import (
	"context"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// A receive queue that never empties (every completed receive is posted
// again, as the collectives do) must not grow with the number of messages.
func TestRecvQueueStaysBounded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	da, db := Open(rdma.Config{}), Open(rdma.Config{})
	defer da.Close()
	defer db.Close()
	ln, err := db.Listen(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	acc := make(chan rdma.Conn, 1)
	go func() { c, _ := ln.Accept(ctx); acc <- c }()
	a, err := da.Dial(ctx, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := <-acc
	src, _ := da.Register(make([]byte, 8), rdma.AccessLocalWrite)
	dst, _ := db.Register(make([]byte, 8*16), rdma.AccessLocalWrite)
	for i := range 16 {
		if err := b.PostRecv(uint64(i), dst.Bytes()[8*i:8*i+8], dst); err != nil {
			t.Fatal(err)
		}
	}
	const msgs = 20000
	for i := 0; i < msgs; i++ {
		if err := a.PostSend(uint64(i), src.Bytes(), src, 0); err != nil {
			t.Fatal(err)
		}
		wc, err := b.GetRecvComp(ctx)
		if err != nil || wc.Status != rdma.StatusSuccess {
			t.Fatalf("message %d: %+v %v", i, wc, err)
		}
		if err := b.PostRecv(wc.WRID, dst.Bytes()[8*wc.WRID:8*wc.WRID+8], dst); err != nil {
			t.Fatal(err)
		}
	}
	c := b.(*conn)
	c.rqMu.Lock()
	n := cap(c.rq)
	c.rqMu.Unlock()
	if n > 1024 {
		t.Fatalf("after %d messages with 16 receives posted the queue holds %d slots", msgs, n)
	}
}
