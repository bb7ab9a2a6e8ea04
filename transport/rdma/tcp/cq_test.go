package tcp

import (
	"errors"
	"net"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
	"golang.org/x/sys/unix"
)

// qpPair connects a conn of devA bound to initA with one of devB bound to
// initB.
func qpPair(t testing.TB, devA, devB rdma.Device, initA, initB rdma.QPInit) (a, b rdma.Conn) {
	t.Helper()
	ctx := testCtx(t)
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
		c, err := ln.AcceptQP(ctx, initB)
		ch <- res{c, err}
	}()
	a, err = devA.DialQP(ctx, ln.Addr().String(), initA)
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { a.Close(); r.c.Close() })
	return a, r.c
}

func devices(t testing.TB, cfg rdma.Config) (devA, devB rdma.Device) {
	t.Helper()
	devA, err := rdma.OpenConfig("tcp", cfg)
	if err != nil {
		t.Fatal(err)
	}
	devB, err = rdma.OpenConfig("tcp", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { devA.Close(); devB.Close() })
	return devA, devB
}

func mustCQ(t testing.TB, d rdma.Device) rdma.CQ {
	t.Helper()
	q, err := d.CreateCQ(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

// pollN polls q until n completions came or ctx ends.
func pollN(t testing.TB, q rdma.CQ, n int) []rdma.WC {
	t.Helper()
	ctx := testCtx(t)
	var out []rdma.WC
	wcs := make([]rdma.WC, 32)
	for len(out) < n {
		k := q.Poll(wcs)
		out = append(out, wcs[:k]...)
		if k == 0 {
			q.Arm()
			if k = q.Poll(wcs); k > 0 {
				out = append(out, wcs[:k]...)
				continue
			}
			select {
			case <-q.Notify():
			case <-ctx.Done():
				t.Fatalf("%d of %d completions", len(out), n)
			}
		}
	}
	return out
}

// Two conns share one CQ: sends from both peers complete there, each
// conn's in its post order; the watcher's completions wake an armed CQ.
func TestSharedCQ(t *testing.T) {
	devA, devB := devices(t, rdma.Config{})
	q := mustCQ(t, devA)
	init := rdma.QPInit{SendCQ: q, RecvCQ: q}
	a1, b1 := qpPair(t, devA, devB, init, rdma.QPInit{})
	a2, b2 := qpPair(t, devA, devB, init, rdma.QPInit{})
	const per = 200
	buf := make([]byte, 2*per*8)
	mr := mustReg(t, devA, buf, rdma.AccessLocalWrite)
	for i := range per {
		for k, a := range []rdma.Conn{a1, a2} {
			off := (k*per + i) * 8
			if err := a.PostRecv(uint64(k<<16|i), buf[off:off+8], mr); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := q.Poll(make([]rdma.WC, 4)); n != 0 {
		t.Fatalf("empty poll returned %d", n)
	}
	for k, b := range []rdma.Conn{b1, b2} {
		go func() {
			for i := range per {
				if err := b.PostSend(uint64(i), []byte{byte(k), byte(i), 0, 0, 0, 0, 0, 0}, nil, rdma.FlagInline); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	next := [2]int{}
	for _, wc := range pollN(t, q, 2*per) {
		k, i := int(wc.WRID>>16), int(wc.WRID&0xffff)
		if wc.Status != rdma.StatusSuccess || wc.Opcode != rdma.OpRecv || wc.ByteLen != 8 {
			t.Fatalf("wc %+v", wc)
		}
		if i != next[k] {
			t.Fatalf("conn %d: receive %d completed before %d", k, i, next[k])
		}
		next[k]++
		if off := (k*per + i) * 8; buf[off] != byte(k) || buf[off+1] != byte(i) {
			t.Fatalf("receive %d of conn %d holds %v", i, k, buf[off:off+2])
		}
	}
	// A signaled write completes on the same CQ.
	dst := make([]byte, 64)
	dMR := mustReg(t, devB, dst, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	if err := a2.PostWrite(77, []byte("shared"), nil, rdma.FlagInline|rdma.FlagSignaled, dMR.Addr(), dMR.RKey()); err != nil {
		t.Fatal(err)
	}
	if wcs := pollN(t, q, 1); wcs[0].WRID != 77 || wcs[0].Opcode != rdma.OpWrite || string(dst[:6]) != "shared" {
		t.Fatalf("write wc %+v, dst %q", wcs[0], dst[:6])
	}
}

// Closing a bound conn, or its peer going away, flushes its receives and
// requests into the shared CQ; the CQ itself stays usable.
func TestSharedCQFlush(t *testing.T) {
	for _, who := range []string{"self", "peer"} {
		t.Run(who, func(t *testing.T) {
			devA, devB := devices(t, rdma.Config{})
			q := mustCQ(t, devA)
			a, b := qpPair(t, devA, devB, rdma.QPInit{SendCQ: q, RecvCQ: q}, rdma.QPInit{})
			buf := make([]byte, 64)
			mr := mustReg(t, devA, buf, rdma.AccessLocalWrite)
			for i := range 3 {
				if err := a.PostRecv(uint64(i), buf[i*8:i*8+8], mr); err != nil {
					t.Fatal(err)
				}
			}
			if who == "self" {
				a.Close()
			} else {
				b.Close()
			}
			wcs := pollN(t, q, 3)
			for i, wc := range wcs {
				if wc.WRID != uint64(i) || wc.Status != rdma.StatusFlushed || wc.Opcode != rdma.OpRecv {
					t.Fatalf("wc %d: %+v", i, wc)
				}
			}
			if who == "peer" {
				if err := a.Err(); !errors.Is(err, rdma.ErrClosed) {
					t.Fatalf("Err = %v", err)
				}
				// A request posted now is flushed there too.
				if err := a.PostSend(9, []byte("x"), nil, rdma.FlagInline); err != nil {
					t.Fatal(err)
				}
				if wc := pollN(t, q, 1)[0]; wc.WRID != 9 || wc.Status != rdma.StatusFlushed {
					t.Fatalf("late post %+v", wc)
				}
			}
			if err := mr.Deregister(); err != nil {
				t.Fatalf("regions held after the flush: %v", err)
			}
		})
	}
}

// Get*Comp on a bound queue return the CQ's completions, of either kind.
func TestGetCompOnSharedCQ(t *testing.T) {
	devA, devB := devices(t, rdma.Config{})
	q := mustCQ(t, devA)
	a, b := qpPair(t, devA, devB, rdma.QPInit{SendCQ: q, RecvCQ: q}, rdma.QPInit{})
	buf := make([]byte, 8)
	if err := a.PostRecv(5, buf, mustReg(t, devA, buf, rdma.AccessLocalWrite)); err != nil {
		t.Fatal(err)
	}
	if err := b.PostSend(1, []byte("hi"), nil, rdma.FlagInline); err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	if wc, err := a.GetSendComp(ctx); err != nil || wc.WRID != 5 || wc.Opcode != rdma.OpRecv {
		t.Fatalf("%+v %v", wc, err)
	}
	q.Close()
	if _, err := a.GetRecvComp(ctx); !errors.Is(err, rdma.ErrCQClosed) {
		t.Fatalf("after CQ close: %v", err)
	}
}

// A CQ of another device is refused.
func TestForeignCQ(t *testing.T) {
	devA, devB := devices(t, rdma.Config{})
	q := mustCQ(t, devB)
	ln, err := devB.Listen(testCtx(t), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, err := devA.DialQP(testCtx(t), ln.Addr().String(), rdma.QPInit{RecvCQ: q}); !errors.Is(err, rdma.ErrInvalid) {
		t.Fatalf("DialQP with a foreign CQ: %v", err)
	}
}

// Every socket has TCP_NODELAY: frames are never held back.
func TestNoDelay(t *testing.T) {
	a, b, _, _ := pair(t, rdma.Config{})
	for _, c := range []rdma.Conn{a, b} {
		rc, err := c.(*conn).nc.(*net.TCPConn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var v int
		var serr error
		rc.Control(func(fd uintptr) { v, serr = unix.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_NODELAY) })
		if serr != nil || v == 0 {
			t.Fatalf("TCP_NODELAY = %d (%v)", v, serr)
		}
	}
}

// Nobody polls the target of a write: the watcher serves it and answers,
// and the initiator's armed CQ gets its token.
func TestWatcherServesIdleTarget(t *testing.T) {
	devA, devB := devices(t, rdma.Config{})
	q := mustCQ(t, devA)
	qb := mustCQ(t, devB)
	a, _ := qpPair(t, devA, devB, rdma.QPInit{SendCQ: q, RecvCQ: q}, rdma.QPInit{SendCQ: qb, RecvCQ: qb})
	dst := make([]byte, 1<<20)
	dMR := mustReg(t, devB, dst, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	src := make([]byte, len(dst))
	fill(src, 3)
	sMR := mustReg(t, devA, src, 0)
	q.Arm()
	if q.Poll(make([]rdma.WC, 1)) != 0 {
		t.Fatal("completion before any post")
	}
	if err := a.PostWrite(1, src, sMR, rdma.FlagSignaled, dMR.Addr(), dMR.RKey()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-q.Notify():
	case <-time.After(10 * time.Second):
		t.Fatal("no token")
	}
	var wc [1]rdma.WC
	if q.Poll(wc[:]) != 1 || wc[0].WRID != 1 || wc[0].Status != rdma.StatusSuccess {
		t.Fatalf("wc %+v", wc[0])
	}
	if string(dst[:64]) != string(src[:64]) || dst[len(dst)-1] != src[len(src)-1] {
		t.Fatal("data not in place")
	}
}

// Poll and post allocate nothing: an 8-byte write-with-immediate
// ping-pong on shared CQs.
func TestPollDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	devA, devB := devices(t, rdma.Config{})
	qa, qb := mustCQ(t, devA), mustCQ(t, devB)
	a, b := qpPair(t, devA, devB, rdma.QPInit{SendCQ: qa, RecvCQ: qa}, rdma.QPInit{SendCQ: qb, RecvCQ: qb})
	ba, bb := make([]byte, 8), make([]byte, 8)
	ma := mustReg(t, devA, ba, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	mb := mustReg(t, devB, bb, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	wcs := make([]rdma.WC, 32)
	wait := func(q rdma.CQ) {
		deadline := time.Now().Add(10 * time.Second)
		for {
			n := q.Poll(wcs)
			for _, wc := range wcs[:n] {
				if wc.Status != rdma.StatusSuccess {
					t.Fatalf("wc %+v", wc)
				}
				if wc.Opcode == rdma.OpRecvWriteImm {
					return
				}
			}
			if time.Now().After(deadline) {
				t.Fatal("no completion")
			}
		}
	}
	step := func() {
		must(t, b.PostRecv(0, nil, nil))
		must(t, a.PostWriteImm(1, ba, ma, 0, mb.Addr(), mb.RKey(), 1))
		wait(qb)
		must(t, a.PostRecv(0, nil, nil))
		must(t, b.PostWriteImm(1, bb, mb, 0, ma.Addr(), ma.RKey(), 2))
		wait(qa)
	}
	for range 200 {
		step()
	}
	if n := testing.AllocsPerRun(1000, step); n > 0 {
		t.Fatalf("%v allocations per round trip", n)
	}
}

// A Poll of a CQ shared by several conns reads only the sockets that hold
// bytes (readySet): idle conns cost no read, a message on one of them is
// read and completes, and the poll allocates nothing.
func TestSharedCQReadsOnlyReadySockets(t *testing.T) {
	devA, devB := devices(t, rdma.Config{})
	q := mustCQ(t, devA)
	init := rdma.QPInit{SendCQ: q, RecvCQ: q}
	var as, bs [3]rdma.Conn
	var reads [3]atomic.Int64
	count := func() [3]int64 { return [3]int64{reads[0].Load(), reads[1].Load(), reads[2].Load()} }
	for k := range as {
		as[k], bs[k] = qpPair(t, devA, devB, init, rdma.QPInit{})
		c := as[k].(*conn)
		for !c.rtok.acquire() { // readFn is the read token's
			runtime.Gosched()
		}
		orig := c.readFn
		c.readFn = func(fd uintptr) { reads[k].Add(1); orig(fd) }
		for c.rtok.release() {
			c.readPass()
		}
	}
	wcs := make([]rdma.WC, 8)
	// Handshake bytes may still be unread: take them first.
	for range 10 {
		q.Poll(wcs)
	}
	before := count()
	for range 100 {
		if n := q.Poll(wcs); n != 0 {
			t.Fatalf("idle poll returned %+v", wcs[:n])
		}
	}
	// Reading every socket would be 300 reads; a frame the peer sends
	// meanwhile (the watchers read it too) may cost one.
	after := count()
	if n := after[0] + after[1] + after[2] - before[0] - before[1] - before[2]; n > 10 {
		t.Fatalf("100 idle polls of 3 conns read their sockets %d times", n)
	}
	buf := make([]byte, 8)
	mr := mustReg(t, devA, buf, rdma.AccessLocalWrite)
	must(t, as[1].PostRecv(5, buf, mr))
	must(t, bs[1].PostSend(6, []byte("ready"), nil, rdma.FlagInline))
	if wc := pollN(t, q, 1)[0]; wc.WRID != 5 || wc.Status != rdma.StatusSuccess || string(buf[:5]) != "ready" {
		t.Fatalf("wc %+v, buf %q", wc, buf[:5])
	}
	if !raceEnabled {
		if n := testing.AllocsPerRun(100, func() { q.Poll(wcs) }); n != 0 {
			t.Fatalf("a poll of 3 conns allocates %v times", n)
		}
	}
}
