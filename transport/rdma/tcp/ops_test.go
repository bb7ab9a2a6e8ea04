package tcp

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

func TestWriteImm(t *testing.T) {
	a, b, devA, devB := pair(t, rdma.Config{})
	src := []byte("immediate payload")
	srcMR := mustReg(t, devA, src, 0)
	dst := make([]byte, 64)
	dstMR := mustReg(t, devB, dst, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	if err := b.PostRecv(5, nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := a.PostWriteImm(1, src, srcMR, rdma.FlagSignaled, dstMR.Addr()+8, dstMR.RKey(), 0xfeedbeef); err != nil {
		t.Fatal(err)
	}
	wc := recvComp(t, b)
	want := rdma.WC{WRID: 5, Opcode: rdma.OpRecvWriteImm, ByteLen: len(src), Imm: 0xfeedbeef, HasImm: true}
	if wc != want {
		t.Fatalf("recv %+v, want %+v", wc, want)
	}
	if !bytes.Equal(dst[8:8+len(src)], src) {
		t.Fatal("data missing")
	}
	if wc := sendComp(t, a); wc.WRID != 1 || wc.Opcode != rdma.OpWrite || wc.Status != 0 {
		t.Fatalf("send %+v", wc)
	}
}

func TestReadAndReadv(t *testing.T) {
	a, _, devA, devB := pair(t, rdma.Config{})
	remote := make([]byte, 1<<20)
	fill(remote, 3)
	rMR := mustReg(t, devB, remote, rdma.AccessRemoteRead)
	local := make([]byte, 1<<20)
	lMR := mustReg(t, devA, local, rdma.AccessLocalWrite)
	if err := a.PostRead(1, local[:1000], lMR, rdma.FlagSignaled, rMR.Addr()+24, rMR.RKey()); err != nil {
		t.Fatal(err)
	}
	sgl := []rdma.SGE{{Buf: local[2000:2100], MR: lMR}, {Buf: local[5000:5000]}, {Buf: local[9000:], MR: lMR}}
	if err := a.PostReadv(2, sgl, rdma.FlagSignaled, rMR.Addr()+100, rMR.RKey()); err != nil {
		t.Fatal(err)
	}
	for _, id := range []uint64{1, 2} {
		if wc := sendComp(t, a); wc.WRID != id || wc.Opcode != rdma.OpRead || wc.Status != 0 {
			t.Fatalf("wc %+v", wc)
		}
	}
	if !bytes.Equal(local[:1000], remote[24:1024]) {
		t.Fatal("read data wrong")
	}
	rest := len(local) - 9000
	if !bytes.Equal(local[2000:2100], remote[100:200]) || !bytes.Equal(local[9000:], remote[200:200+rest]) {
		t.Fatal("readv data wrong")
	}
	// A read needs local write access and remote read access.
	if err := a.PostRead(3, local[:8], mustReg(t, devA, make([]byte, 8), 0), 0, rMR.Addr(), rMR.RKey()); !errors.Is(err, rdma.ErrNotRegistered) {
		t.Fatalf("read into foreign buffer: %v", err)
	}
	ro := make([]byte, 8)
	if err := a.PostRead(3, ro, mustReg(t, devA, ro, 0), 0, rMR.Addr(), rMR.RKey()); !errors.Is(err, rdma.ErrAccess) {
		t.Fatalf("read into read-only region: %v", err)
	}
	wOnly := mustReg(t, devB, make([]byte, 64), rdma.AccessRemoteWrite)
	if err := a.PostRead(4, local[:8], lMR, 0, wOnly.Addr(), wOnly.RKey()); err != nil {
		t.Fatal(err)
	}
	if wc := sendComp(t, a); wc.WRID != 4 || wc.Status != rdma.StatusRemoteAccessError {
		t.Fatalf("read without remote-read access: %+v", wc)
	}
}

func TestScatterGather(t *testing.T) {
	a, b, devA, devB := pair(t, rdma.Config{})
	src := make([]byte, 300)
	fill(src, 9)
	sMR := mustReg(t, devA, src, 0)
	sgl := []rdma.SGE{{Buf: src[:10], MR: sMR}, {Buf: src[100:250], MR: sMR}, {Buf: src[290:], MR: sMR}}
	want := append(append(append([]byte{}, src[:10]...), src[100:250]...), src[290:]...)
	dst := make([]byte, 200)
	dMR := mustReg(t, devB, dst, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	if err := a.PostWritev(1, sgl, rdma.FlagSignaled, dMR.Addr(), dMR.RKey()); err != nil {
		t.Fatal(err)
	}
	sendComp(t, a)
	if !bytes.Equal(dst[:len(want)], want) {
		t.Fatal("writev data wrong")
	}
	r := make([]byte, 400)
	rMR := mustReg(t, devB, r, rdma.AccessLocalWrite)
	rsgl := []rdma.SGE{{Buf: r[:5], MR: rMR}, {Buf: r[100:300], MR: rMR}}
	if err := b.PostRecvv(2, rsgl); err != nil {
		t.Fatal(err)
	}
	if err := a.PostSendv(3, sgl, rdma.FlagSignaled); err != nil {
		t.Fatal(err)
	}
	if wc := recvComp(t, b); wc.WRID != 2 || wc.ByteLen != len(want) || wc.Status != 0 {
		t.Fatalf("recv %+v", wc)
	}
	got := append(append([]byte{}, r[:5]...), r[100:100+len(want)-5]...)
	if !bytes.Equal(got, want) {
		t.Fatal("sendv/recvv data wrong")
	}
	sendComp(t, a)
}

func TestBusyMRAndQueueFull(t *testing.T) {
	cfg := rdma.Config{SendQueueDepth: 4, RNRRetry: -1}
	a, b, devA, devB := pair(t, cfg)
	src := []byte("payload")
	sMR := mustReg(t, devA, src, 0)
	// Sends block on the peer (no receive posted, retries forever), so they
	// stay outstanding.
	for i := range 4 {
		if err := a.PostSend(uint64(i), src, sMR, rdma.FlagSignaled); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.PostSend(9, src, sMR, rdma.FlagSignaled); !errors.Is(err, rdma.ErrQueueFull) {
		t.Fatalf("fifth post: %v, want ErrQueueFull", err)
	}
	if err := sMR.Deregister(); !errors.Is(err, rdma.ErrBusy) {
		t.Fatalf("deregister while in use: %v", err)
	}
	r := make([]byte, 64)
	rMR := mustReg(t, devB, r, rdma.AccessLocalWrite)
	for i := range 4 {
		if err := b.PostRecv(uint64(i), r[i*16:i*16+16], rMR); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		if wc := sendComp(t, a); wc.WRID != uint64(i) || wc.Status != 0 {
			t.Fatalf("wc %+v", wc)
		}
	}
	if err := sMR.Deregister(); err != nil {
		t.Fatal(err)
	}
	if err := a.PostSend(10, src, sMR, 0); !errors.Is(err, rdma.ErrNotRegistered) {
		t.Fatalf("post with deregistered MR: %v", err)
	}
}

func TestUnsignaledStream(t *testing.T) {
	// Far more unsignaled writes than the queue holds: internal acks must
	// free the slots.
	a, _, devA, devB := pair(t, rdma.Config{SendQueueDepth: 16})
	src := make([]byte, 64)
	sMR := mustReg(t, devA, src, 0)
	dst := make([]byte, 64)
	dMR := mustReg(t, devB, dst, rdma.AccessRemoteWrite)
	ctx := testCtx(t)
	for i := 0; i <= 1000; {
		flags := rdma.Flags(0)
		if i == 1000 {
			flags = rdma.FlagSignaled
		}
		err := a.PostWrite(uint64(i), src, sMR, flags, dMR.Addr(), dMR.RKey())
		if errors.Is(err, rdma.ErrQueueFull) {
			if ctx.Err() != nil {
				t.Fatal("queue never drained")
			}
			time.Sleep(100 * time.Microsecond)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		i++
	}
	if wc := sendComp(t, a); wc.WRID != 1000 {
		t.Fatalf("wc %+v", wc)
	}
	if err := sMR.Deregister(); err != nil {
		t.Fatal(err)
	}
}

func TestFenceAfterRead(t *testing.T) {
	a, b, devA, devB := pair(t, rdma.Config{})
	remote := []byte("fresh data from the target")
	rMR := mustReg(t, devB, remote, rdma.AccessRemoteRead)
	local := make([]byte, len(remote))
	lMR := mustReg(t, devA, local, rdma.AccessLocalWrite)
	rbuf := make([]byte, 64)
	if err := b.PostRecv(1, rbuf, mustReg(t, devB, rbuf, rdma.AccessLocalWrite)); err != nil {
		t.Fatal(err)
	}
	if err := a.PostRead(1, local, lMR, 0, rMR.Addr(), rMR.RKey()); err != nil {
		t.Fatal(err)
	}
	// The fenced send carries what the read brought in.
	if err := a.PostSend(2, local, lMR, rdma.FlagFence|rdma.FlagSignaled); err != nil {
		t.Fatal(err)
	}
	if wc := recvComp(t, b); wc.ByteLen != len(remote) || !bytes.Equal(rbuf[:len(remote)], remote) {
		t.Fatalf("fenced send carried %q", rbuf[:wc.ByteLen])
	}
	if wc := sendComp(t, a); wc.WRID != 2 {
		t.Fatalf("wc %+v", wc)
	}
}

func TestLocalChecks(t *testing.T) {
	a, _, devA, devB := pair(t, rdma.Config{})
	buf := make([]byte, 16)
	if err := a.PostSend(1, buf, nil, 0); !errors.Is(err, rdma.ErrNotRegistered) {
		t.Fatalf("unregistered: %v", err)
	}
	other := mustReg(t, devB, buf, rdma.AccessLocalWrite)
	if err := a.PostSend(1, buf, other, 0); !errors.Is(err, rdma.ErrNotRegistered) {
		t.Fatalf("MR of another device: %v", err)
	}
	big := make([]byte, a.MaxInline()+1)
	if err := a.PostSend(1, big, nil, rdma.FlagInline); !errors.Is(err, rdma.ErrInvalid) {
		t.Fatalf("oversized inline: %v", err)
	}
	ro := mustReg(t, devA, buf, 0)
	if err := a.PostRecv(1, buf, ro); !errors.Is(err, rdma.ErrAccess) {
		t.Fatalf("receive into read-only MR: %v", err)
	}
	var oe *rdma.OpError
	if err := a.PostRecv(1, buf, ro); !errors.As(err, &oe) || oe.Provider != "tcp" {
		t.Fatalf("error type %T", err)
	}
}

func TestCloseFlushesAndPeerSeesEnd(t *testing.T) {
	a, b, devA, _ := pair(t, rdma.Config{RNRRetry: -1})
	src := []byte("x")
	sMR := mustReg(t, devA, src, rdma.AccessLocalWrite)
	if err := a.PostSend(1, src, sMR, 0); err != nil { // never received
		t.Fatal(err)
	}
	if err := a.PostRecv(2, src, sMR); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if wc := sendComp(t, a); wc.WRID != 1 || wc.Status != rdma.StatusFlushed {
		t.Fatalf("send after close %+v", wc)
	}
	if wc := recvComp(t, a); wc.WRID != 2 || wc.Status != rdma.StatusFlushed {
		t.Fatalf("recv after close %+v", wc)
	}
	ctx := testCtx(t)
	if _, err := a.GetSendComp(ctx); !errors.Is(err, rdma.ErrClosed) {
		t.Fatalf("drained closed conn: %v", err)
	}
	if err := a.PostSend(3, src, sMR, 0); !errors.Is(err, rdma.ErrClosed) {
		t.Fatalf("post after close: %v", err)
	}
	if err := sMR.Deregister(); err != nil {
		t.Fatalf("close must release regions: %v", err)
	}
	if _, err := b.GetRecvComp(ctx); err == nil || ctx.Err() != nil {
		t.Fatalf("peer did not see the end: %v", err)
	}
	if _, err := b.GetSendComp(ctx); err == nil || ctx.Err() != nil {
		t.Fatalf("peer send queue did not end: %v", err)
	}
	if !errors.Is(b.Err(), rdma.ErrClosed) {
		t.Fatalf("peer Err %v", b.Err())
	}
}

func TestDialAcceptHonourContext(t *testing.T) {
	dev, err := rdma.Open("tcp")
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	ln, err := dev.Listen(testCtx(t), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := ln.Accept(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("accept: %v", err)
	}
	if time.Since(start) > 2*time.Second {
		t.Fatal("accept ignored its deadline")
	}
	// A listener that never answers the handshake: Dial must give up.
	raw, err := (&netListenConfig).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	if _, err := dev.Dial(ctx2, raw.Addr().String()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("dial: %v", err)
	}
}
