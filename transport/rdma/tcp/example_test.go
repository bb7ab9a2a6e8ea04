package tcp_test

import (
	"context"
	"fmt"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
	_ "github.com/gorun-hpc/gorun/transport/rdma/tcp"
)

// Two devices in one process: the listener exposes a region, the dialer
// writes into it and then sends a message; the receive completing means the
// write's data is in place.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := rdma.Config{Token: []byte("job secret")}
	server, _ := rdma.OpenConfig("tcp", cfg)
	defer server.Close()
	client, _ := rdma.OpenConfig("tcp", cfg)
	defer client.Close()

	ln, err := server.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ln.Close()
	accepted := make(chan rdma.Conn, 1)
	go func() {
		c, err := ln.Accept(ctx)
		if err != nil {
			fmt.Println(err)
		}
		accepted <- c
	}()
	a, err := client.Dial(ctx, ln.Addr().String())
	if err != nil {
		fmt.Println(err)
		return
	}
	b := <-accepted

	dst, _ := b.RegWrite(make([]byte, 64))
	note := make([]byte, 8)
	noteMR, _ := b.RegMsgs(note)
	b.PostRecv(1, note, noteMR)

	src := []byte("hello, target")
	srcMR, _ := a.RegMsgs(src)
	a.PostWrite(1, src, srcMR, 0, dst.Addr(), dst.RKey())
	a.PostSend(2, []byte("done"), nil, rdma.FlagInline|rdma.FlagSignaled)

	wc, _ := b.GetRecvComp(ctx)
	fmt.Printf("%s: %q, note %q\n", wc.Opcode, dst.Bytes()[:len(src)], note[:wc.ByteLen])
	wc, _ = a.GetSendComp(ctx)
	fmt.Println(wc.Opcode, wc.WRID, wc.Status)
	// Output:
	// recv: "hello, target", note "done"
	// send 2 success
}
