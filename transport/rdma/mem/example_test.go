package mem_test

import (
	"context"
	"fmt"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
	_ "github.com/gorun-hpc/gorun/transport/rdma/mem"
)

// Two ranks in one process: rank 1 writes into rank 0's buffer, then
// sends a message; when rank 0 sees the receive, the written data is
// already in place.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	dev0, _ := rdma.Open("mem")
	dev1, _ := rdma.Open("mem")
	defer dev0.Close()
	defer dev1.Close()

	ln, _ := dev0.Listen(ctx, "127.0.0.1:0")
	c1, _ := dev1.Dial(ctx, ln.Addr().String())
	c0, _ := ln.Accept(ctx)

	target, _ := dev0.Alloc(64, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	msg, _ := dev0.Alloc(16, rdma.AccessLocalWrite)
	_ = c0.PostRecv(1, msg.Bytes(), msg)

	// rank 1 learns target.Addr() and target.RKey() out of band
	src, _ := dev1.Alloc(64, rdma.AccessLocalWrite)
	copy(src.Bytes(), "written remotely")
	_ = c1.PostWrite(1, src.Bytes()[:16], src, 0, target.Addr(), target.RKey())
	_ = c1.PostSend(2, []byte("done"), nil, rdma.FlagInline|rdma.FlagSignaled)

	wc, _ := c0.GetRecvComp(ctx)
	fmt.Printf("%s: %q, then %q\n", wc.Opcode, target.Bytes()[:16], msg.Bytes()[:wc.ByteLen])
	wc, _ = c1.GetSendComp(ctx)
	fmt.Println(wc.WRID, wc.Status)
	// Output:
	// recv: "written remotely", then "done"
	// 2 success
}
