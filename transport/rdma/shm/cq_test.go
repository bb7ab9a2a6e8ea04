//go:build linux

package shm

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// cqPair connects two devices of this process; each side's send and
// receive queues are bound to one shared CQ of its device.
func cqPair(t testing.TB, cfg rdma.Config) (a, b rdma.Conn, qa, qb rdma.CQ, da, db rdma.Device) {
	t.Helper()
	ctx := testCtx(t)
	var err error
	if da, err = rdma.OpenConfig("shm", cfg); err != nil {
		t.Fatal(err)
	}
	if db, err = rdma.OpenConfig("shm", cfg); err != nil {
		t.Fatal(err)
	}
	qa, _ = da.CreateCQ(0)
	qb, _ = db.CreateCQ(0)
	t.Cleanup(func() { da.Close(); db.Close(); qa.Close(); qb.Close() })
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
		c, err := ln.AcceptQP(ctx, rdma.QPInit{SendCQ: qb, RecvCQ: qb})
		ch <- res{c, err}
	}()
	if a, err = da.DialQP(ctx, ln.Addr().String(), rdma.QPInit{SendCQ: qa, RecvCQ: qa}); err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	return a, r.c, qa, qb, da, db
}

// pollBuf is pollOne's batch: a slice passed to an interface method
// escapes, so a poller keeps one (as the engine does).
var pollBuf = make([]rdma.WC, 1)

// pollOne spins on q until one completion comes or ctx ends; it never
// arms, so it is also what a spinning engine does. One goroutine at a
// time (pollBuf).
func pollOne(ctx context.Context, q rdma.CQ) (rdma.WC, error) {
	wc := pollBuf
	for i := 0; ; i++ {
		if q.Poll(wc) == 1 {
			return wc[0], nil
		}
		if i%1024 == 1023 {
			if err := ctx.Err(); err != nil {
				return rdma.WC{}, err
			}
			runtime.Gosched()
		}
	}
}

func mustPoll(ctx context.Context, t testing.TB, q rdma.CQ, want rdma.WC) rdma.WC {
	t.Helper()
	wc, err := pollOne(ctx, q)
	if err != nil {
		t.Fatalf("poll: %v", err)
	}
	if wc.WRID != want.WRID || wc.Status != want.Status || wc.Opcode != want.Opcode || wc.Imm != want.Imm {
		t.Fatalf("completion %+v, want %+v", wc, want)
	}
	return wc
}

// TestSharedCQSpin: a write-with-immediate ping-pong where both sides only
// Poll. It allocates nothing, and makes no doorbell sleep or write at all (the progress
// goroutines stay parked while nobody arms).
func TestSharedCQSpin(t *testing.T) {
	a, b, qa, qb, da, db := cqPair(t, rdma.Config{})
	abuf, _ := da.Alloc(4096, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	bbuf, _ := db.Alloc(4096, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	ctx := testCtx(t)
	var empty [4]rdma.WC
	if n := qa.Poll(empty[:]); n != 0 {
		t.Fatalf("empty poll: %d", n)
	}
	round := func(i uint32) {
		b.PostRecv(10, nil, nil)
		a.PostWriteImm(1, abuf.Bytes()[:8], abuf, rdma.FlagSignaled, bbuf.Addr(), bbuf.RKey(), i)
		mustPoll(ctx, t, qa, rdma.WC{WRID: 1, Opcode: rdma.OpWrite})
		mustPoll(ctx, t, qb, rdma.WC{WRID: 10, Opcode: rdma.OpRecvWriteImm, Imm: i})
		a.PostRecv(20, nil, nil)
		b.PostWriteImm(2, bbuf.Bytes()[:8], bbuf, 0, abuf.Addr(), abuf.RKey(), i+1)
		mustPoll(ctx, t, qa, rdma.WC{WRID: 20, Opcode: rdma.OpRecvWriteImm, Imm: i + 1})
	}
	for i := range uint32(50) {
		round(i) // warm up: the queues reach their size
	}
	waits, wakes := bellCalls[bellSleep].Load(), bellCalls[bellWake].Load()
	if allocs := testing.AllocsPerRun(500, func() { round(7) }); allocs > 0 {
		t.Errorf("%.1f allocations per round", allocs)
	}
	if n := bellCalls[bellSleep].Load() - waits; n != 0 {
		t.Errorf("%d doorbell sleeps while both sides spin", n)
	}
	if n := bellCalls[bellWake].Load() - wakes; n != 0 {
		t.Errorf("%d doorbell writes while both sides spin", n)
	}
	if allocs := testing.AllocsPerRun(1000, func() { qa.Poll(empty[:]) }); allocs > 0 {
		t.Errorf("empty poll: %.1f allocations", allocs)
	}
}

// TestSharedCQOrder: two connections share one CQ; each one's receive and
// send completions arrive in its post order.
func TestSharedCQOrder(t *testing.T) {
	ctx := testCtx(t)
	da, _ := rdma.OpenConfig("shm", rdma.Config{RNRRetry: -1})
	db, _ := rdma.OpenConfig("shm", rdma.Config{RNRRetry: -1})
	q, _ := da.CreateCQ(0)
	t.Cleanup(func() { da.Close(); db.Close(); q.Close() })
	ln, err := db.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const conns, msgs = 2, 300
	var as, bs [conns]rdma.Conn
	for i := range conns {
		if as[i], err = da.DialQP(ctx, ln.Addr().String(), rdma.QPInit{SendCQ: q, RecvCQ: q}); err != nil {
			t.Fatal(err)
		}
		if bs[i], err = ln.Accept(ctx); err != nil {
			t.Fatal(err)
		}
	}
	src, _ := db.Alloc(64, rdma.AccessLocalWrite)
	dst, _ := da.Alloc(conns*msgs*8, rdma.AccessLocalWrite)
	for i := range conns {
		for m := range msgs {
			as[i].PostRecv(uint64(i)<<32|uint64(m), dst.Bytes()[(i*msgs+m)*8:][:8], dst)
		}
	}
	var wg sync.WaitGroup
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m := range msgs {
				bs[i].PostSend(uint64(m), src.Bytes()[:8], src, 0)
				if m%7 == 0 {
					runtime.Gosched()
				}
			}
			as[i].PostSend(1<<40|uint64(i), nil, nil, rdma.FlagSignaled) // RNR until b posts
		}()
	}
	next := [conns]int{}
	for got := 0; got < conns*msgs; got++ {
		wc, err := pollOne(ctx, q)
		if err != nil {
			t.Fatalf("after %d completions: %v", got, err)
		}
		i, m := int(wc.WRID>>32), int(wc.WRID&0xffffffff)
		if wc.Status != rdma.StatusSuccess || wc.Opcode != rdma.OpRecv || i >= conns || m != next[i] {
			t.Fatalf("completion %+v, want conn %d message %d", wc, i, next[i])
		}
		next[i]++
	}
	wg.Wait()
	for i := range conns {
		bs[i].PostRecv(0, nil, nil)
	}
	seen := 0
	for range conns {
		wc, err := pollOne(ctx, q)
		if err != nil || wc.Opcode != rdma.OpSend || wc.Status != rdma.StatusSuccess || wc.WRID>>40 != 1 {
			t.Fatalf("send completion %+v %v", wc, err)
		}
		seen |= 1 << (wc.WRID & 0xff)
	}
	if seen != 1<<conns-1 {
		t.Fatalf("send completions of conns %b", seen)
	}
}

// waitCQ is the sleeping poller: poll, arm, poll, sleep on Notify. Unlike
// rdma.WaitComp it fails instead of waiting past limit.
func waitCQ(q rdma.CQ, limit time.Duration) (rdma.WC, error) {
	var wc [1]rdma.WC
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for {
		if q.Poll(wc[:]) == 1 {
			return wc[0], nil
		}
		q.Arm()
		if q.Poll(wc[:]) == 1 {
			return wc[0], nil
		}
		select {
		case <-q.Notify():
		case <-timer.C:
			return rdma.WC{}, errors.New("no token on Notify: a lost wake-up")
		}
	}
}

// TestSharedCQArmStress: the peer publishes a write-with-immediate at any
// moment around the poller's Arm; the poller must never sleep through it.
func TestSharedCQArmStress(t *testing.T) {
	a, b, qa, _, da, db := cqPair(t, rdma.Config{RNRRetry: -1})
	abuf, _ := da.Alloc(64, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	bbuf, _ := db.Alloc(64, rdma.AccessLocalWrite)
	rounds := 3000
	if testing.Short() {
		rounds = 500
	}
	goCh := make(chan int)
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case d := <-goCh:
				for range d {
					runtime.Gosched()
				}
				b.PostWriteImm(0, bbuf.Bytes()[:8], bbuf, 0, abuf.Addr(), abuf.RKey(), 5)
			case <-done:
				return
			}
		}
	}()
	for i := range rounds {
		a.PostRecv(uint64(i), nil, nil)
		goCh <- i % 5
		wc, err := waitCQ(qa, 10*time.Second)
		if err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		if wc.WRID != uint64(i) || wc.Opcode != rdma.OpRecvWriteImm || wc.Imm != 5 {
			t.Fatalf("round %d: %+v", i, wc)
		}
	}
}

// TestSharedCQFlush: closing one of two connections that share a CQ
// flushes its posted receives and its queued send into the CQ, which
// stays usable for the other.
func TestSharedCQFlush(t *testing.T) {
	ctx := testCtx(t)
	da, _ := rdma.OpenConfig("shm", rdma.Config{RNRRetry: -1})
	db, _ := rdma.OpenConfig("shm", rdma.Config{RNRRetry: -1})
	q, _ := da.CreateCQ(0)
	t.Cleanup(func() { da.Close(); db.Close(); q.Close() })
	ln, err := db.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var as, bs [2]rdma.Conn
	for i := range as {
		if as[i], err = da.DialQP(ctx, ln.Addr().String(), rdma.QPInit{SendCQ: q, RecvCQ: q}); err != nil {
			t.Fatal(err)
		}
		if bs[i], err = ln.Accept(ctx); err != nil {
			t.Fatal(err)
		}
	}
	buf, _ := da.Alloc(64, rdma.AccessLocalWrite)
	for w := range 3 {
		as[0].PostRecv(uint64(w), buf.Bytes()[:8], buf)
	}
	as[0].PostSend(3, buf.Bytes()[:8], buf, rdma.FlagSignaled) // RNR: b posts nothing
	as[0].Close()
	// Receives in post order; the send, of the other kind, anywhere.
	next := 0
	for range 4 {
		wc, err := as[1].GetRecvComp(ctx) // the shared CQ: either kind
		switch {
		case err != nil || wc.Status != rdma.StatusFlushed:
			t.Fatalf("flush: %+v %v", wc, err)
		case wc.Opcode == rdma.OpSend && wc.WRID == 3:
		case wc.Opcode == rdma.OpRecv && wc.WRID == uint64(next):
			next++
		default:
			t.Fatalf("flush %+v, want receive %d or send 3", wc, next)
		}
	}
	// The peer sees the close; the other connection still works.
	if _, err := bs[0].GetRecvComp(ctx); !errors.Is(err, rdma.ErrClosed) {
		t.Fatalf("peer of the closed conn: %v", err)
	}
	bbuf, _ := db.Alloc(64, rdma.AccessLocalWrite)
	as[1].PostRecv(9, buf.Bytes()[8:16], buf)
	bs[1].PostSend(0, bbuf.Bytes()[:8], bbuf, 0)
	mustWC(t, as[1].GetRecvComp, rdma.WC{WRID: 9, Opcode: rdma.OpRecv})

	// A CQ of another device, or a closed one, is refused.
	other, _ := db.CreateCQ(0)
	defer other.Close()
	if _, err := da.DialQP(ctx, ln.Addr().String(), rdma.QPInit{RecvCQ: other}); !errors.Is(err, rdma.ErrInvalid) {
		t.Fatalf("DialQP with another device's CQ: %v", err)
	}
	// Close: Poll returns nothing, a sleeper wakes, a bound Get*Comp ends.
	as[1].PostRecv(10, buf.Bytes()[8:16], buf)
	errc := make(chan error, 1)
	go func() {
		_, err := as[1].GetRecvComp(ctx)
		errc <- err
	}()
	q.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, rdma.ErrCQClosed) {
			t.Fatalf("GetRecvComp after the CQ closed: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("GetRecvComp still waits after the CQ closed")
	}
	var wcs [4]rdma.WC
	if n := q.Poll(wcs[:]); n != 0 {
		t.Fatalf("Poll after Close: %d", n)
	}
}

// TestSharedCQManyConns: Poll over many bound connections, messages
// arriving on any of them.
func TestSharedCQManyConns(t *testing.T) {
	ctx := testCtx(t)
	da, _ := rdma.OpenConfig("shm", rdma.Config{RNRRetry: -1})
	db, _ := rdma.OpenConfig("shm", rdma.Config{RNRRetry: -1})
	q, _ := da.CreateCQ(0)
	t.Cleanup(func() { da.Close(); db.Close(); q.Close() })
	ln, err := db.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const n = 8
	var as, bs [n]rdma.Conn
	for i := range n {
		if as[i], err = da.DialQP(ctx, ln.Addr().String(), rdma.QPInit{RecvCQ: q}); err != nil {
			t.Fatal(err)
		}
		if bs[i], err = ln.Accept(ctx); err != nil {
			t.Fatal(err)
		}
	}
	src, _ := db.Alloc(64, rdma.AccessLocalWrite)
	for round := range 20 {
		for i := range n {
			as[i].PostRecv(uint64(i), nil, nil)
		}
		for i := n - 1; i >= 0; i-- {
			if err := bs[i].PostSend(uint64(i), nil, src, 0); err != nil {
				t.Fatal(err)
			}
		}
		got := 0
		for range n {
			wc, err := waitCQ(q, 10*time.Second)
			if err != nil || wc.Status != rdma.StatusSuccess {
				t.Fatalf("round %d: %+v %v", round, wc, err)
			}
			got |= 1 << wc.WRID
		}
		if got != 1<<n-1 {
			t.Fatalf("round %d: receives of conns %b", round, got)
		}
	}
	// The send queue stayed private.
	as[0].PostSend(5, nil, nil, rdma.FlagSignaled)
	bs[0].PostRecv(0, nil, nil)
	mustWC(t, as[0].GetSendComp, rdma.WC{WRID: 5, Opcode: rdma.OpSend})
}

// TestSharedCQPeerDeath: the peer process dies; the posted receives and
// the send waiting for the peer's receive are flushed into the shared CQ,
// waking a poller asleep on it.
func TestSharedCQPeerDeath(t *testing.T) {
	dev, ln := listenOne(t, rdma.Config{Token: []byte(childToken), RNRRetry: -1})
	q, _ := dev.CreateCQ(0)
	defer q.Close()
	cmd, out := startChild(t, "hang", ln.Addr().String())
	c, err := ln.AcceptQP(testCtx(t), rdma.QPInit{SendCQ: q, RecvCQ: q})
	if err != nil {
		t.Fatalf("accept: %v\nchild:\n%s", err, out)
	}
	defer c.Close()
	buf, _ := dev.Alloc(64, rdma.AccessLocalWrite)
	c.PostRecv(1, buf.Bytes()[:8], buf)
	c.PostRecv(2, buf.Bytes()[8:16], buf)
	c.PostSend(3, buf.Bytes()[16:24], buf, rdma.FlagSignaled) // RNR: the child posts nothing
	go func() {
		time.Sleep(20 * time.Millisecond) // most likely, the poller sleeps by then
		cmd.Process.Kill()
	}()
	next := uint64(1)
	for range 3 {
		wc, err := waitCQ(q, 10*time.Second)
		switch {
		case err != nil || wc.Status != rdma.StatusFlushed:
			t.Fatalf("flush: %+v %v", wc, err)
		case wc.Opcode == rdma.OpSend && wc.WRID == 3:
		case wc.Opcode == rdma.OpRecv && wc.WRID == next:
			next++
		default:
			t.Fatalf("flush %+v, want receive %d or send 3", wc, next)
		}
	}
	if err := c.Err(); !errors.Is(err, rdma.ErrClosed) {
		t.Fatalf("Err() = %v", err)
	}
	// Later posts complete there too.
	c.PostRecv(4, buf.Bytes()[:8], buf)
	if wc, err := waitCQ(q, 10*time.Second); err != nil || wc.WRID != 4 || wc.Status != rdma.StatusFlushed {
		t.Fatalf("receive posted after the death: %+v %v", wc, err)
	}
}

// TestSharedCQCloseWhilePolling: connections bound to a CQ close while
// another goroutine polls it without pause (and a peer keeps publishing):
// Poll looks at rings without a lock, so a ring must stay mapped until no
// Poll can see it.
func TestSharedCQCloseWhilePolling(t *testing.T) {
	ctx := testCtx(t)
	da, _ := rdma.OpenConfig("shm", rdma.Config{})
	db, _ := rdma.OpenConfig("shm", rdma.Config{})
	q, _ := da.CreateCQ(0)
	t.Cleanup(func() { da.Close(); db.Close(); q.Close() })
	ln, err := db.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	stop := make(chan struct{})
	polled := make(chan int)
	go func() {
		wcs := make([]rdma.WC, 32)
		n := 0
		for {
			select {
			case <-stop:
				polled <- n
				return
			default:
			}
			n += q.Poll(wcs)
		}
	}()
	src, _ := db.Alloc(64, rdma.AccessLocalWrite)
	for i := range 30 {
		a, err := da.DialQP(ctx, ln.Addr().String(), rdma.QPInit{SendCQ: q, RecvCQ: q})
		if err != nil {
			t.Fatal(err)
		}
		b, err := ln.Accept(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for w := range 20 {
			a.PostRecv(uint64(w), nil, nil)
		}
		for range i % 20 {
			b.PostSend(0, nil, src, 0)
		}
		a.Close()
		b.Close()
	}
	close(stop)
	if n := <-polled; n == 0 {
		t.Fatal("the poller saw no completion")
	}
}
