//go:build linux

package shm

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// pair connects two devices of this process.
func pair(t testing.TB, cfg rdma.Config) (a, b rdma.Conn, da, db rdma.Device) {
	t.Helper()
	var err error
	if da, err = rdma.OpenConfig("shm", cfg); err != nil {
		t.Fatal(err)
	}
	if db, err = rdma.OpenConfig("shm", cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { da.Close(); db.Close() })
	a, b = connectDevs(t, da, db)
	return a, b, da, db
}

// connectDevs connects two devices of this process: da dials db.
func connectDevs(t testing.TB, da, db rdma.Device) (a, b rdma.Conn) {
	t.Helper()
	ctx := testCtx(t)
	ln, err := db.Listen(ctx, "127.0.0.1:0")
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
	if a, err = da.Dial(ctx, ln.Addr().String()); err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	return a, r.c
}

func mustWC(t testing.TB, get func(context.Context) (rdma.WC, error), want rdma.WC) rdma.WC {
	t.Helper()
	wc, err := get(testCtx(t))
	if err != nil {
		t.Fatalf("get completion: %v", err)
	}
	if wc.WRID != want.WRID || wc.Status != want.Status || wc.Opcode != want.Opcode {
		t.Fatalf("completion %+v, want %+v", wc, want)
	}
	return wc
}

func TestSendRecv(t *testing.T) {
	a, b, da, db := pair(t, rdma.Config{})
	for _, n := range []int{0, 1, 100, 101, 4096, 4097, 70000, 70001, 3 << 20, 3<<20 + 1} {
		src, _ := da.Alloc(max(n, 1), rdma.AccessLocalWrite) // no provider registers 0 bytes
		sb := src.Bytes()[:n]
		// Alternate a registered receive (through the ring) and an Alloc'd
		// one (the sender copies straight into it).
		dst := make([]byte, n+10)
		rmr, err := db.Register(dst, rdma.AccessLocalWrite)
		if n%2 == 0 {
			rmr, err = db.Alloc(n+10, rdma.AccessLocalWrite)
			dst = rmr.Bytes()
		}
		if err != nil {
			t.Fatal(err)
		}
		for i := range sb {
			sb[i] = byte(i*7 + n)
		}
		if err := b.PostRecv(1, dst, rmr); err != nil {
			t.Fatal(err)
		}
		if err := a.PostSend(2, sb, src, rdma.FlagSignaled); err != nil {
			t.Fatal(err)
		}
		mustWC(t, a.GetSendComp, rdma.WC{WRID: 2, Opcode: rdma.OpSend})
		wc := mustWC(t, b.GetRecvComp, rdma.WC{WRID: 1, Opcode: rdma.OpRecv})
		if wc.ByteLen != n || !bytes.Equal(dst[:n], sb) {
			t.Fatalf("n=%d: ByteLen %d, data equal %v", n, wc.ByteLen, bytes.Equal(dst[:n], sb))
		}
		if err := rmr.Deregister(); err != nil {
			t.Fatal(err)
		}
		if err := src.Deregister(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestWriteReadImm(t *testing.T) {
	for _, alloc := range []bool{true, false} {
		a, b, da, db := pair(t, rdma.Config{})
		var remote *rdma.MR
		var err error
		if alloc {
			remote, err = db.Alloc(1<<20, rdma.AccessLocalWrite|rdma.AccessRemoteWrite|rdma.AccessRemoteRead)
		} else {
			remote, err = db.Register(make([]byte, 1<<20), rdma.AccessLocalWrite|rdma.AccessRemoteWrite|rdma.AccessRemoteRead)
		}
		if err != nil {
			t.Fatal(err)
		}
		local, _ := da.Alloc(1<<20, rdma.AccessLocalWrite)
		copy(local.Bytes(), bytes.Repeat([]byte("gorun"), 1<<18))
		if err := a.PostWrite(1, local.Bytes()[:5000], local, 0, remote.Addr()+100, remote.RKey()); err != nil {
			t.Fatal(err)
		}
		rbuf := make([]byte, 16)
		rmr, _ := db.Register(rbuf, rdma.AccessLocalWrite)
		b.PostRecv(9, rbuf, rmr)
		if err := a.PostWriteImm(2, local.Bytes()[:10], local, rdma.FlagSignaled, remote.Addr(), remote.RKey(), 0xbeef); err != nil {
			t.Fatal(err)
		}
		mustWC(t, a.GetSendComp, rdma.WC{WRID: 2, Opcode: rdma.OpWrite})
		wc := mustWC(t, b.GetRecvComp, rdma.WC{WRID: 9, Opcode: rdma.OpRecvWriteImm})
		if !wc.HasImm || wc.Imm != 0xbeef || wc.ByteLen != 10 {
			t.Fatalf("imm completion %+v", wc)
		}
		if !bytes.Equal(remote.Bytes()[100:5100], local.Bytes()[:5000]) || !bytes.Equal(remote.Bytes()[:10], local.Bytes()[:10]) {
			t.Fatalf("alloc=%v: write data wrong", alloc)
		}
		// Read it back into a scatter list.
		copy(remote.Bytes()[200000:], "read me back, please")
		x, y := local.Bytes()[500000:500004], local.Bytes()[600000:600016]
		if err := a.PostReadv(3, []rdma.SGE{{Buf: x, MR: local}, {Buf: y, MR: local}}, rdma.FlagSignaled, remote.Addr()+200000, remote.RKey()); err != nil {
			t.Fatal(err)
		}
		mustWC(t, a.GetSendComp, rdma.WC{WRID: 3, Opcode: rdma.OpRead})
		if string(x)+string(y) != "read me back, please" {
			t.Fatalf("alloc=%v: read %q %q", alloc, x, y)
		}
	}
}

func TestRemoteAccessError(t *testing.T) {
	a, b, da, db := pair(t, rdma.Config{})
	remote, _ := db.Alloc(4096, rdma.AccessLocalWrite|rdma.AccessRemoteRead)
	local, _ := da.Alloc(4096, rdma.AccessLocalWrite)
	// No remote-write access.
	if err := a.PostWrite(1, local.Bytes()[:8], local, 0, remote.Addr(), remote.RKey()); err != nil {
		t.Fatal(err)
	}
	mustWC(t, a.GetSendComp, rdma.WC{WRID: 1, Status: rdma.StatusRemoteAccessError, Opcode: rdma.OpWrite})
	if err := a.PostSend(2, local.Bytes()[:8], local, 0); err != nil {
		t.Fatal(err)
	}
	mustWC(t, a.GetSendComp, rdma.WC{WRID: 2, Status: rdma.StatusFlushed, Opcode: rdma.OpSend})
	var wce *rdma.WCError
	if !errors.As(a.Err(), &wce) || wce.WC.Status != rdma.StatusRemoteAccessError {
		t.Fatalf("a.Err() = %v", a.Err())
	}
	deadline := time.Now().Add(5 * time.Second)
	for b.Err() == nil && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if b.Err() == nil {
		t.Fatal("target did not enter the error state")
	}
	rb := make([]byte, 8)
	rmr, _ := db.Register(rb, rdma.AccessLocalWrite)
	b.PostRecv(5, rb, rmr)
	mustWC(t, b.GetRecvComp, rdma.WC{WRID: 5, Status: rdma.StatusFlushed, Opcode: rdma.OpRecv})
}

func TestBoundsAndDeregistered(t *testing.T) {
	a, _, da, db := pair(t, rdma.Config{})
	remote, _ := db.Alloc(4096, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	local, _ := da.Alloc(8192, rdma.AccessLocalWrite)
	a.PostWrite(1, local.Bytes()[:4096], local, rdma.FlagSignaled, remote.Addr(), remote.RKey())
	mustWC(t, a.GetSendComp, rdma.WC{WRID: 1, Opcode: rdma.OpWrite})
	a.PostWrite(2, local.Bytes()[:4097], local, rdma.FlagSignaled, remote.Addr(), remote.RKey())
	mustWC(t, a.GetSendComp, rdma.WC{WRID: 2, Status: rdma.StatusRemoteAccessError, Opcode: rdma.OpWrite})

	a2, _, _, db2 := pair(t, rdma.Config{})
	_ = a2
	r2, _ := db2.Alloc(4096, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	addr, key := r2.Addr(), r2.RKey()
	if err := r2.Deregister(); err != nil {
		t.Fatal(err)
	}
	l2 := make([]byte, 8)
	lmr, _ := a2.RegMsgs(l2)
	_ = lmr
	if err := a2.PostWrite(3, l2, lmr, 0, addr, key); err != nil {
		t.Fatal(err)
	}
	mustWC(t, a2.GetSendComp, rdma.WC{WRID: 3, Status: rdma.StatusRemoteAccessError, Opcode: rdma.OpWrite})
}

func TestRNRAndLengthError(t *testing.T) {
	a, b, da, _ := pair(t, rdma.Config{RNRRetry: 3, RNRTimer: time.Millisecond})
	buf, _ := da.Alloc(64, rdma.AccessLocalWrite)
	start := time.Now()
	a.PostSend(1, buf.Bytes()[:8], buf, 0)
	mustWC(t, a.GetSendComp, rdma.WC{WRID: 1, Status: rdma.StatusRNRRetryExceeded, Opcode: rdma.OpSend})
	if d := time.Since(start); d < 3*time.Millisecond {
		t.Fatalf("RNR failed after %v, want >= 3ms", d)
	}
	_ = b

	a, b, da, db := pair(t, rdma.Config{})
	buf, _ = da.Alloc(64, rdma.AccessLocalWrite)
	rb, _ := db.Alloc(4, rdma.AccessLocalWrite)
	b.PostRecv(7, rb.Bytes(), rb)
	a.PostSend(1, buf.Bytes()[:8], buf, rdma.FlagSignaled)
	mustWC(t, b.GetRecvComp, rdma.WC{WRID: 7, Status: rdma.StatusLocalLengthError, Opcode: rdma.OpRecv})
	mustWC(t, a.GetSendComp, rdma.WC{WRID: 1, Status: rdma.StatusRemoteInvalidRequest, Opcode: rdma.OpSend})
}

func TestRNRLateReceive(t *testing.T) {
	a, b, da, db := pair(t, rdma.Config{RNRRetry: 500}) // 5s: a loaded machine may oversleep
	buf, _ := da.Alloc(64, rdma.AccessLocalWrite)
	copy(buf.Bytes(), "late")
	a.PostSend(1, buf.Bytes()[:4], buf, rdma.FlagSignaled)
	time.Sleep(20 * time.Millisecond)
	rb, _ := db.Alloc(64, rdma.AccessLocalWrite)
	b.PostRecv(2, rb.Bytes(), rb)
	mustWC(t, a.GetSendComp, rdma.WC{WRID: 1, Opcode: rdma.OpSend})
	mustWC(t, b.GetRecvComp, rdma.WC{WRID: 2, Opcode: rdma.OpRecv})
	if string(rb.Bytes()[:4]) != "late" {
		t.Fatal("payload")
	}
}

func TestCloseNotifiesPeer(t *testing.T) {
	a, b, _, db := pair(t, rdma.Config{})
	rb, _ := db.Alloc(64, rdma.AccessLocalWrite)
	b.PostRecv(1, rb.Bytes(), rb)
	if err := rb.Deregister(); !errors.Is(err, rdma.ErrBusy) {
		t.Fatalf("Deregister of a posted receive's MR = %v, want ErrBusy", err)
	}
	a.Close()
	mustWC(t, b.GetRecvComp, rdma.WC{WRID: 1, Status: rdma.StatusFlushed, Opcode: rdma.OpRecv})
	if _, err := b.GetRecvComp(testCtx(t)); !errors.Is(err, rdma.ErrClosed) {
		t.Fatalf("GetRecvComp after peer close = %v", err)
	}
	if !errors.Is(b.Err(), rdma.ErrClosed) {
		t.Fatalf("b.Err() = %v", b.Err())
	}
	if err := rb.Deregister(); err != nil {
		t.Fatal(err)
	}
	if err := a.PostSend(1, nil, nil, 0); !errors.Is(err, rdma.ErrClosed) {
		t.Fatalf("post after Close = %v", err)
	}
}

// TestCloseDeliversPublished: sends that completed on the sender are
// delivered even if the sender closes before the receiver polls.
func TestCloseDeliversPublished(t *testing.T) {
	for _, alloc := range []bool{false, true} {
		a, b, da, db := pair(t, rdma.Config{})
		rb, _ := db.Alloc(64*100, rdma.AccessLocalWrite)
		var rmr *rdma.MR = rb
		if !alloc {
			rmr, _ = db.Register(make([]byte, 64*100), rdma.AccessLocalWrite)
		}
		for i := 0; i < 12; i++ {
			b.PostRecv(uint64(i), rmr.Bytes()[i*64:(i+1)*64], rmr)
		}
		src, _ := da.Alloc(64, rdma.AccessLocalWrite)
		for i := 0; i < 10; i++ {
			src.Bytes()[0] = byte(i)
			a.PostSend(uint64(i), src.Bytes(), src, rdma.FlagSignaled)
			mustWC(t, a.GetSendComp, rdma.WC{WRID: uint64(i), Opcode: rdma.OpSend})
		}
		a.Close()
		time.Sleep(20 * time.Millisecond) // let b notice the close before it polls
		for i := 0; i < 10; i++ {
			mustWC(t, b.GetRecvComp, rdma.WC{WRID: uint64(i), Opcode: rdma.OpRecv})
			if rmr.Bytes()[i*64] != byte(i) {
				t.Fatalf("alloc=%v: message %d wrong", alloc, i)
			}
		}
		mustWC(t, b.GetRecvComp, rdma.WC{WRID: 10, Status: rdma.StatusFlushed, Opcode: rdma.OpRecv})
		mustWC(t, b.GetRecvComp, rdma.WC{WRID: 11, Status: rdma.StatusFlushed, Opcode: rdma.OpRecv})
		if _, err := b.GetRecvComp(testCtx(t)); !errors.Is(err, rdma.ErrClosed) {
			t.Fatalf("after the flushes: %v", err)
		}
	}
}
