package tcp

import (
	"bytes"
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// pair connects two devices over loopback.
func pair(t testing.TB, cfg rdma.Config) (a, b rdma.Conn, devA, devB rdma.Device) {
	t.Helper()
	ctx := testCtx(t)
	devA, err := rdma.OpenConfig("tcp", cfg)
	if err != nil {
		t.Fatal(err)
	}
	devB, err = rdma.OpenConfig("tcp", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { devA.Close(); devB.Close() })
	ln, err := devB.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type res struct {
		c   rdma.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := ln.Accept(ctx)
		ch <- res{c, err}
	}()
	a, err = devA.Dial(ctx, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	return a, r.c, devA, devB
}

func mustReg(t testing.TB, d rdma.Device, buf []byte, acc rdma.Access) *rdma.MR {
	t.Helper()
	mr, err := d.Register(buf, acc)
	if err != nil {
		t.Fatal(err)
	}
	return mr
}

func sendComp(t testing.TB, c rdma.Conn) rdma.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wc, err := c.GetSendComp(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return wc
}

func recvComp(t testing.TB, c rdma.Conn) rdma.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wc, err := c.GetRecvComp(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return wc
}

// noComp fails if a completion shows up within a short wait.
func noComp(t testing.TB, get func(context.Context) (rdma.WC, error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if wc, err := get(ctx); err == nil {
		t.Fatalf("unexpected completion %+v", wc)
	}
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*7)
	}
}

func TestWriteThenSendOrdering(t *testing.T) {
	a, b, devA, devB := pair(t, rdma.Config{})
	const n = 3 << 20
	src := make([]byte, n)
	fill(src, 1)
	srcMR := mustReg(t, devA, src, 0)
	dst := make([]byte, n)
	dstMR := mustReg(t, devB, dst, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	msg := []byte("done")
	rbuf := make([]byte, 16)
	rMR := mustReg(t, devB, rbuf, rdma.AccessLocalWrite)
	if err := b.PostRecv(7, rbuf, rMR); err != nil {
		t.Fatal(err)
	}
	// Unsignaled write, then an inline signaled send: the receive must
	// see the write's data in place.
	if err := a.PostWrite(1, src, srcMR, 0, dstMR.Addr(), dstMR.RKey()); err != nil {
		t.Fatal(err)
	}
	if err := a.PostSend(2, msg, nil, rdma.FlagSignaled|rdma.FlagInline); err != nil {
		t.Fatal(err)
	}
	rc := recvComp(t, b)
	if rc.WRID != 7 || rc.Status != rdma.StatusSuccess || rc.Opcode != rdma.OpRecv || rc.ByteLen != len(msg) {
		t.Fatalf("recv wc %+v", rc)
	}
	if !bytes.Equal(dst, src) || string(rbuf[:4]) != "done" {
		t.Fatal("data not in place when the send was delivered")
	}
	wc := sendComp(t, a)
	if wc.WRID != 2 || wc.Opcode != rdma.OpSend || wc.Status != rdma.StatusSuccess {
		t.Fatalf("send wc %+v (the unsignaled write must not complete)", wc)
	}
	noComp(t, a.GetSendComp)
	if err := srcMR.Deregister(); err != nil {
		t.Fatalf("deregister after completion: %v", err)
	}
}

func TestRemoteAccessError(t *testing.T) {
	for _, tc := range []struct {
		name string
		acc  rdma.Access
		key  func(*rdma.MR) uint32
		off  uint64
		n    int
	}{
		{"bad-rkey", rdma.AccessRemoteWrite, func(m *rdma.MR) uint32 { return m.RKey() ^ 0x5a5a }, 0, 8},
		{"out-of-bounds", rdma.AccessRemoteWrite, (*rdma.MR).RKey, 60, 8},
		{"no-remote-write", rdma.AccessLocalWrite, (*rdma.MR).RKey, 0, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b, devA, devB := pair(t, rdma.Config{})
			src := make([]byte, tc.n)
			srcMR := mustReg(t, devA, src, 0)
			dst := make([]byte, 64)
			dstMR := mustReg(t, devB, dst, tc.acc)
			if err := a.PostWrite(1, src, srcMR, 0, dstMR.Addr()+tc.off, tc.key(dstMR)); err != nil {
				t.Fatal(err)
			}
			wc := sendComp(t, a)
			if wc.WRID != 1 || wc.Status != rdma.StatusRemoteAccessError {
				t.Fatalf("wc %+v, want remote access error (unsignaled requests report failures)", wc)
			}
			if a.Err() == nil {
				t.Fatal("initiator not in the error state")
			}
			deadline := time.Now().Add(5 * time.Second)
			for b.Err() == nil && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if !errors.Is(b.Err(), rdma.ErrAccess) {
				t.Fatalf("target Err() = %v, want ErrAccess", b.Err())
			}
			if err := a.PostWrite(2, src, srcMR, rdma.FlagSignaled, dstMR.Addr(), dstMR.RKey()); err != nil {
				t.Fatal(err)
			}
			if wc := sendComp(t, a); wc.WRID != 2 || wc.Status != rdma.StatusFlushed {
				t.Fatalf("post in error state: %+v, want flushed", wc)
			}
			rbuf := make([]byte, 8)
			if err := b.PostRecv(3, rbuf, mustReg(t, devB, rbuf, rdma.AccessLocalWrite)); err != nil {
				t.Fatal(err)
			}
			if wc := recvComp(t, b); wc.WRID != 3 || wc.Status != rdma.StatusFlushed {
				t.Fatalf("receive in error state: %+v, want flushed", wc)
			}
			for _, v := range dst {
				if v != 0 {
					t.Fatal("invalid write reached memory")
				}
			}
		})
	}
}

func TestRNRRetryExceeded(t *testing.T) {
	cfg := rdma.Config{RNRRetry: 3, RNRTimer: 5 * time.Millisecond}
	a, b, _, _ := pair(t, cfg)
	start := time.Now()
	if err := a.PostSend(9, []byte("x"), nil, rdma.FlagInline); err != nil {
		t.Fatal(err)
	}
	wc := sendComp(t, a)
	if wc.WRID != 9 || wc.Status != rdma.StatusRNRRetryExceeded {
		t.Fatalf("wc %+v", wc)
	}
	if d := time.Since(start); d < 15*time.Millisecond {
		t.Fatalf("gave up after %v, want ≥ 3 × 5ms", d)
	}
	if a.Err() == nil {
		t.Fatal("no error state")
	}
	_ = b
}

func TestRNRLatePost(t *testing.T) {
	cfg := rdma.Config{RNRRetry: 20, RNRTimer: 10 * time.Millisecond}
	a, b, _, devB := pair(t, cfg)
	if err := a.PostSend(1, []byte("hello"), nil, rdma.FlagInline|rdma.FlagSignaled); err != nil {
		t.Fatal(err)
	}
	time.Sleep(30 * time.Millisecond)
	buf := make([]byte, 8)
	mr := mustReg(t, devB, buf, rdma.AccessLocalWrite)
	if err := b.PostRecv(2, buf, mr); err != nil {
		t.Fatal(err)
	}
	if wc := recvComp(t, b); wc.Status != rdma.StatusSuccess || wc.ByteLen != 5 || string(buf[:5]) != "hello" {
		t.Fatalf("recv %+v %q", wc, buf)
	}
	if wc := sendComp(t, a); wc.Status != rdma.StatusSuccess {
		t.Fatalf("send %+v", wc)
	}
}

func TestRecvTooSmall(t *testing.T) {
	a, b, _, devB := pair(t, rdma.Config{})
	buf := make([]byte, 4)
	mr := mustReg(t, devB, buf, rdma.AccessLocalWrite)
	if err := b.PostRecv(1, buf, mr); err != nil {
		t.Fatal(err)
	}
	if err := a.PostSend(2, []byte("too long"), nil, rdma.FlagInline|rdma.FlagSignaled); err != nil {
		t.Fatal(err)
	}
	if wc := recvComp(t, b); wc.WRID != 1 || wc.Status != rdma.StatusLocalLengthError {
		t.Fatalf("recv %+v", wc)
	}
	if wc := sendComp(t, a); wc.WRID != 2 || wc.Status == rdma.StatusSuccess {
		t.Fatalf("send %+v", wc)
	}
	if !bytes.Equal(buf, make([]byte, 4)) {
		t.Fatal("oversized send was written")
	}
}

var netListenConfig net.ListenConfig

var netDialer net.Dialer
