package mem_test

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
	"github.com/gorun-hpc/gorun/transport/rdma/mem"
)

// TestRing256 connects 256 devices in a ring and passes a token that each
// rank increments, with sends, then writes the final count back with
// write-with-immediate. It checks that a simulated world of 256 ranks in
// one process works and stays quick.
func TestRing256(t *testing.T) {
	const n = 256
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	devs := make([]rdma.Device, n)
	lns := make([]rdma.Listener, n)
	for i := range devs {
		devs[i] = mem.Open(rdma.Config{})
		defer devs[i].Close()
		ln, err := devs[i].Listen(ctx, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[i] = ln
	}
	next := make([]rdma.Conn, n) // i → i+1
	prev := make([]rdma.Conn, n) // i ← i-1
	for i := range devs {
		c, err := devs[i].Dial(ctx, lns[(i+1)%n].Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		next[i] = c
	}
	for i := range devs {
		c, err := lns[i].Accept(ctx)
		if err != nil {
			t.Fatal(err)
		}
		prev[i] = c
		lns[i].Close()
	}
	bufs := make([]*rdma.MR, n)
	for i := range bufs {
		mr, err := devs[i].Alloc(8, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
		if err != nil {
			t.Fatal(err)
		}
		bufs[i] = mr
		if err := prev[i].PostRecv(uint64(i), mr.Bytes(), mr); err != nil {
			t.Fatal(err)
		}
	}
	errc := make(chan error, n)
	for i := 1; i < n; i++ {
		go func() {
			wc, err := prev[i].GetRecvComp(ctx)
			if err == nil {
				err = wc.Err()
			}
			if err != nil {
				errc <- err
				return
			}
			v := binary.LittleEndian.Uint64(bufs[i].Bytes())
			binary.LittleEndian.PutUint64(bufs[i].Bytes(), v+1)
			errc <- next[i].PostSend(uint64(i), bufs[i].Bytes(), bufs[i], 0)
		}()
	}
	tok := make([]byte, 8)
	binary.LittleEndian.PutUint64(tok, 1)
	if err := next[0].PostSend(0, tok, nil, rdma.FlagInline); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < n; i++ {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	wc, err := prev[0].GetRecvComp(ctx)
	if err != nil || wc.Err() != nil {
		t.Fatalf("%+v %v", wc, err)
	}
	if got := binary.LittleEndian.Uint64(bufs[0].Bytes()); got != n {
		t.Fatalf("token %d, want %d", got, n)
	}
}
