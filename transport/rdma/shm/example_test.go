//go:build linux

package shm_test

import (
	"context"
	"fmt"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
	_ "github.com/gorun-hpc/gorun/transport/rdma/shm"
)

// Two devices (in a real job, two processes of one host) connect; one
// writes into the other's Alloc'd region, then tells it with a send.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	target, _ := rdma.Open("shm")
	defer target.Close()
	initiator, _ := rdma.Open("shm")
	defer initiator.Close()

	ln, err := target.Listen(ctx, "127.0.0.1:0") // a private unix socket
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ln.Close()
	a, err := initiator.Dial(ctx, ln.Addr().String())
	if err != nil {
		fmt.Println(err)
		return
	}
	b, _ := ln.Accept(ctx)

	region, _ := target.Alloc(4096, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	note, _ := target.Alloc(64, rdma.AccessLocalWrite)
	b.PostRecv(1, note.Bytes(), note)

	src, _ := initiator.Alloc(4096, rdma.AccessLocalWrite)
	copy(src.Bytes(), "hello, same host")
	a.PostWrite(1, src.Bytes()[:16], src, 0, region.Addr(), region.RKey()) // one memcpy
	a.PostSend(2, src.Bytes()[:5], src, rdma.FlagSignaled)                 // after the write's data
	a.GetSendComp(ctx)
	wc, _ := b.GetRecvComp(ctx)
	fmt.Printf("%d-byte message; region holds %q\n", wc.ByteLen, region.Bytes()[:16])
	// Output: 5-byte message; region holds "hello, same host"
}
