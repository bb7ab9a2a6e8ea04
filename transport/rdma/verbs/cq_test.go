//go:build linux && cgo && rdma

package verbs

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

func newCQ(t testing.TB, d rdma.Device, depth int) rdma.CQ {
	t.Helper()
	cq, err := d.CreateCQ(depth)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cq.Close() })
	return cq
}

func both(cq rdma.CQ) rdma.QPInit { return rdma.QPInit{SendCQ: cq, RecvCQ: cq} }

// pollN polls cq until n completions came or ctx ends, sleeping through
// Arm and Notify when it finds nothing.
func pollN(t testing.TB, ctx context.Context, cq rdma.CQ, n int) []rdma.WC {
	t.Helper()
	var out []rdma.WC
	buf := make([]rdma.WC, 32)
	for len(out) < n {
		if k := cq.Poll(buf); k > 0 {
			out = append(out, buf[:k]...)
			continue
		}
		cq.Arm()
		if k := cq.Poll(buf); k > 0 {
			out = append(out, buf[:k]...)
			continue
		}
		select {
		case <-cq.Notify():
		case <-ctx.Done():
			t.Fatalf("%d of %d completions before %v: %+v", len(out), n, ctx.Err(), out)
		}
	}
	return out
}

// TestSharedCQ: two connections on each side share one CQ per side;
// sends are mostly unsignaled (the provider signals some internally) and
// only the signaled ones complete; each connection's completions come in
// its post order, with the caller's wrids.
func TestSharedCQ(t *testing.T) {
	d := openDev(t, rdma.Config{SendQueueDepth: 64, RecvQueueDepth: 256})
	ccq, scq := newCQ(t, d, 0), newCQ(t, d, 0)
	const conns, msgs, every = 2, 200, 7
	var cli, srv [conns]rdma.Conn
	for i := range cli {
		cli[i], srv[i] = pairQP(t, d, d, both(ccq), both(scq))
	}
	ctx := ctxT(t)
	sb, _ := d.Alloc(64, rdma.AccessLocalWrite)
	rb, _ := d.Alloc(conns*msgs*8, rdma.AccessLocalWrite)
	for i := range srv {
		for m := 0; m < msgs; m++ {
			off := (i*msgs + m) * 8
			if err := srv[i].PostRecv(uint64(i)<<32|uint64(m), rb.Bytes()[off:off+8], rb); err != nil {
				t.Fatal(err)
			}
		}
	}
	signaled := 0
	for m := 0; m < msgs; m++ {
		for i := range cli {
			f := rdma.Flags(0)
			if m%every == every-1 {
				f = rdma.FlagSignaled
				signaled++
			}
			for {
				err := cli[i].PostSend(uint64(i)<<32|uint64(m), sb.Bytes()[:1+m%8], sb, f)
				if err == nil {
					break
				}
				if !errors.Is(err, rdma.ErrQueueFull) || ctx.Err() != nil {
					t.Fatal(err)
				}
				time.Sleep(time.Millisecond) // the device is behind; retry
			}
		}
	}
	checkOrder := func(side string, wcs []rdma.WC, op rdma.Opcode, step int) {
		t.Helper()
		next := [conns]int{}
		for i := range next {
			next[i] = step - 1
			if op == rdma.OpRecv {
				next[i] = 0
			}
		}
		for _, wc := range wcs {
			i, m := int(wc.WRID>>32), int(wc.WRID&0xffffffff)
			if wc.Status != rdma.StatusSuccess || wc.Opcode != op || i >= conns || m != next[i] {
				t.Fatalf("%s: completion %+v, want conn %d's wrid %d", side, wc, i, next[i])
			}
			if op == rdma.OpRecv && wc.ByteLen != 1+m%8 {
				t.Fatalf("%s: %+v: ByteLen want %d", side, wc, 1+m%8)
			}
			next[i] += step
		}
	}
	checkOrder("receiver", pollN(t, ctx, scq, conns*msgs), rdma.OpRecv, 1)
	checkOrder("sender", pollN(t, ctx, ccq, signaled), rdma.OpSend, every)
	var wc [4]rdma.WC
	if n := ccq.Poll(wc[:]); n != 0 {
		t.Fatalf("extra completions %+v", wc[:n])
	}
}

// TestSharedCQReapsInternal: unsignaled writes far beyond the send queue's
// depth never fill it when nobody polls: the provider's internal
// completions are reaped at post time, and never delivered.
func TestSharedCQReapsInternal(t *testing.T) {
	d := openDev(t, rdma.Config{SendQueueDepth: 32})
	cq := newCQ(t, d, 0)
	cli, _ := pairQP(t, d, d, both(cq), rdma.QPInit{})
	src, _ := d.Alloc(64, rdma.AccessLocalWrite)
	dst, _ := d.Alloc(64, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	ctx := ctxT(t)
	for i := 0; i < 1000; i++ {
		for {
			err := cli.PostWrite(1, src.Bytes(), src, 0, dst.Addr(), dst.RKey())
			if err == nil {
				break
			}
			if !errors.Is(err, rdma.ErrQueueFull) || ctx.Err() != nil {
				t.Fatalf("write %d: %v", i, err)
			}
			time.Sleep(time.Millisecond) // the device is behind; retry
		}
	}
	if err := cli.PostWrite(2, src.Bytes(), src, rdma.FlagSignaled, dst.Addr(), dst.RKey()); err != nil {
		t.Fatal(err)
	}
	wcs := pollN(t, ctx, cq, 1)
	if wcs[0].WRID != 2 || wcs[0].Status != rdma.StatusSuccess || wcs[0].Opcode != rdma.OpWrite {
		t.Fatalf("completion %+v, want the signaled write 2", wcs[0])
	}
	var more [4]rdma.WC
	if n := cq.Poll(more[:]); n != 0 {
		t.Fatalf("extra completions %+v", more[:n])
	}
}

// TestSharedCQFlushOnPeerClose: receives posted on a connection bound to a
// shared CQ complete there flushed when the peer closes (after flushGrace
// on rxe before 6.3, which drops them); a second connection on the same CQ
// keeps working.
func TestSharedCQFlushOnPeerClose(t *testing.T) {
	d := openDev(t, rdma.Config{})
	cq := newCQ(t, d, 0)
	cli, srv := pairQP(t, d, d, rdma.QPInit{}, both(cq))
	cli2, srv2 := pairQP(t, d, d, rdma.QPInit{}, both(cq))
	rb, _ := d.Alloc(64, rdma.AccessLocalWrite)
	for i := uint64(1); i <= 3; i++ {
		if err := srv.PostRecv(i, rb.Bytes()[:8], rb); err != nil {
			t.Fatal(err)
		}
	}
	cli.Close()
	ctx := ctxT(t)
	wcs := pollN(t, ctx, cq, 3)
	for i, wc := range wcs {
		if wc.WRID != uint64(i+1) || wc.Status != rdma.StatusFlushed {
			t.Fatalf("completion %d: %+v, want wrid %d flushed", i, wc, i+1)
		}
	}
	if srv.Err() == nil {
		t.Error("Err is nil after the peer closed")
	}
	if err := srv.PostRecv(4, rb.Bytes()[:8], rb); err != nil {
		t.Fatal(err)
	}
	if wc := pollN(t, ctx, cq, 1)[0]; wc.WRID != 4 || wc.Status != rdma.StatusFlushed {
		t.Fatalf("receive posted after the flush: %+v, want wrid 4 flushed", wc)
	}
	if err := srv2.PostRecv(5, rb.Bytes()[8:16], rb); err != nil {
		t.Fatal(err)
	}
	if err := cli2.PostSend(0, []byte("ok"), nil, rdma.FlagInline); err != nil {
		t.Fatal(err)
	}
	if wc := pollN(t, ctx, cq, 1)[0]; wc.WRID != 5 || wc.Status != rdma.StatusSuccess || wc.ByteLen != 2 {
		t.Fatalf("the other connection's receive: %+v", wc)
	}
}

// TestSharedCQCloseFlushes: Close hands the shared CQ a flushed completion
// for every outstanding request, and GetRecvComp on a bound queue returns
// the CQ's next completion.
func TestSharedCQCloseFlushes(t *testing.T) {
	d := openDev(t, rdma.Config{})
	cq := newCQ(t, d, 0)
	cli, srv := pairQP(t, d, d, both(cq), rdma.QPInit{})
	rb, _ := d.Alloc(64, rdma.AccessLocalWrite)
	if err := cli.PostRecv(1, rb.Bytes()[:8], rb); err != nil {
		t.Fatal(err)
	}
	if err := cli.PostRecv(2, rb.Bytes()[8:16], rb); err != nil {
		t.Fatal(err)
	}
	if err := srv.PostSend(9, []byte("x"), nil, rdma.FlagInline); err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	wc, err := cli.GetRecvComp(ctx)
	if err != nil || wc.WRID != 1 || wc.Status != rdma.StatusSuccess || wc.ByteLen != 1 {
		t.Fatalf("GetRecvComp on a bound queue: %+v %v", wc, err)
	}
	cli.Close()
	wc, err = cli.GetSendComp(ctx) // either queue: both are the CQ
	if err != nil || wc.WRID != 2 || wc.Status != rdma.StatusFlushed {
		t.Fatalf("after Close: %+v %v, want wrid 2 flushed", wc, err)
	}
	if err := rb.Deregister(); err != nil {
		t.Fatalf("deregister after the flush: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := cli.GetRecvComp(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("GetRecvComp on an empty bound queue: %v, want DeadlineExceeded", err)
	}
}

// TestSharedCQArm: a sleeper armed before a completion arrives gets a token.
func TestSharedCQArm(t *testing.T) {
	d := openDev(t, rdma.Config{})
	cq := newCQ(t, d, 0)
	cli, srv := pairQP(t, d, d, rdma.QPInit{}, both(cq))
	rb, _ := d.Alloc(64, rdma.AccessLocalWrite)
	var wc [2]rdma.WC
	if n := cq.Poll(wc[:]); n != 0 {
		t.Fatalf("poll on an idle CQ: %d", n)
	}
	for round := uint64(1); round <= 3; round++ {
		if err := srv.PostRecv(round, rb.Bytes()[:8], rb); err != nil {
			t.Fatal(err)
		}
		cq.Arm()
		if n := cq.Poll(wc[:]); n != 0 {
			t.Fatalf("completion before the send: %+v", wc[:n])
		}
		select { // drop a stale token
		case <-cq.Notify():
		default:
		}
		if err := cli.PostSend(0, []byte("wake"), nil, rdma.FlagInline); err != nil {
			t.Fatal(err)
		}
		select {
		case <-cq.Notify():
		case <-time.After(10 * time.Second):
			t.Fatal("no token after the completion")
		}
		if n := cq.Poll(wc[:]); n != 1 || wc[0].WRID != round {
			t.Fatalf("after the token: %+v", wc[:n])
		}
	}
}

// TestSharedCQClosedFirst: closing a CQ before its connections wakes a
// sleeper; Poll returns nothing; the connections still close.
func TestSharedCQClosedFirst(t *testing.T) {
	d := openDev(t, rdma.Config{})
	cq, err := d.CreateCQ(0)
	if err != nil {
		t.Fatal(err)
	}
	cli, _ := pairQP(t, d, d, both(cq), rdma.QPInit{})
	done := make(chan error, 1)
	go func() {
		_, err := cli.GetRecvComp(ctxT(t))
		done <- err
	}()
	if err := cq.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, rdma.ErrCQClosed) {
		t.Fatalf("waiter after CQ.Close: %v, want ErrCQClosed", err)
	}
	rb, _ := d.Alloc(64, rdma.AccessLocalWrite)
	if err := cli.PostRecv(1, rb.Bytes(), rb); err != nil {
		t.Fatal(err)
	}
	var wc [1]rdma.WC
	if n := cq.Poll(wc[:]); n != 0 {
		t.Fatal("Poll after Close returned", n)
	}
	if err := cli.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.DialQP(ctxT(t), "127.0.0.1:1", both(cq)); !errors.Is(err, rdma.ErrClosed) {
		t.Fatalf("DialQP with a closed CQ: %v, want ErrClosed", err)
	}
}

// TestSharedCQForeign: a CQ of another device is refused.
func TestSharedCQForeign(t *testing.T) {
	d, other := openDev(t, rdma.Config{}), openDev(t, rdma.Config{})
	cq := newCQ(t, other, 0)
	ctx := ctxT(t)
	if _, err := d.DialQP(ctx, vmIP(t)+":1", both(cq)); !errors.Is(err, rdma.ErrInvalid) {
		t.Fatalf("DialQP with another device's CQ: %v, want ErrInvalid", err)
	}
}

// TestSharedCQNoAlloc: an empty Poll, and a write-with-imm round trip
// polled from shared CQs, allocate nothing.
func TestSharedCQNoAlloc(t *testing.T) {
	d := openDev(t, rdma.Config{})
	ccq, scq := newCQ(t, d, 0), newCQ(t, d, 0)
	cli, srv := pairQP(t, d, d, both(ccq), both(scq))
	src, _ := d.Alloc(64, rdma.AccessLocalWrite)
	dst, _ := d.Alloc(64, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	wcs := make([]rdma.WC, 32)
	if n := testing.AllocsPerRun(100, func() { ccq.Poll(wcs) }); n != 0 {
		t.Errorf("empty Poll allocates %v times", n)
	}
	ctx := ctxT(t)
	n := testing.AllocsPerRun(50, func() {
		if err := srv.PostRecv(1, nil, nil); err != nil {
			t.Fatal(err)
		}
		if err := cli.PostWriteImm(2, src.Bytes()[:8], src, rdma.FlagSignaled, dst.Addr(), dst.RKey(), 7); err != nil {
			t.Fatal(err)
		}
		for got := 0; got < 2; {
			if ctx.Err() != nil {
				t.Fatal("round trip timed out")
			}
			got += ccq.Poll(wcs) + scq.Poll(wcs)
		}
	})
	if n != 0 {
		t.Errorf("post and poll allocate %v times per round trip", n)
	}
}
