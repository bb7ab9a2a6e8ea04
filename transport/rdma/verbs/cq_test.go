//go:build linux && cgo && rdma

package verbs

import (
	"context"
	"errors"
	"runtime"
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

// inflight is the CQ's count of CQEs that may still come.
func inflight(c rdma.CQ) int {
	q := c.(*cq)
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.inflight
}

// postUntilFull posts signaled inline sends on c (wrids from first on)
// until the CQ's room runs out (ErrQueueFull) and returns how many it
// posted.
func postUntilFull(t testing.TB, c rdma.Conn, first uint64) int {
	t.Helper()
	for n := 0; ; n++ {
		err := c.PostSend(first+uint64(n), []byte("x"), nil, rdma.FlagInline|rdma.FlagSignaled)
		if errors.Is(err, rdma.ErrQueueFull) {
			return n
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// recvN posts n receives on c and waits for their completions.
func recvN(t testing.TB, ctx context.Context, c rdma.Conn, rb *rdma.MR, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if err := c.PostRecv(uint64(i), rb.Bytes()[:8], rb); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i++ {
		wc, err := c.GetRecvComp(ctx)
		mustWC(t, wc, err, uint64(i), rdma.OpRecv)
	}
}

// TestSharedCQLateCompletions: requests the provider flushes while the
// device still holds them keep their room in a shared CQ until the device
// completes them, or the QP is destroyed and the CQ drained of it. Closing
// a connection flushes its queues and only then destroys the QP; the
// flush freed the room at once, another connection was given it, and the
// device's completions for the closing QP (its flushes, when they came
// after the provider's) overran the ibv_cq. Here the device completes
// them after the provider's flush (queue.close, the first step of Close,
// while their sends wait for a receive; the device flushes a closing QP's
// requests at rdma_disconnect, which leaves this order to chance): with
// the room freed, b was given all of it, and k of the CQEs were lost.
func TestSharedCQLateCompletions(t *testing.T) {
	const depth, k = 31, 8 // rxe's ibv_cq of 31 holds exactly 31 CQEs
	d := openDev(t, rdma.Config{SendQueueDepth: 64, RNRRetry: -1})
	shared := newCQ(t, d, depth)
	sq := shared.(*cq)
	t.Logf("CQ depth %d", sq.depth)
	a, a2 := pairQP(t, d, d, both(shared), rdma.QPInit{})
	b, b2 := pairQP(t, d, d, both(shared), rdma.QPInit{})
	ctx := ctxT(t)
	rb, _ := d.Alloc(64, rdma.AccessLocalWrite)

	// a's sends wait for receives (RNR, retried forever) while the
	// provider flushes them.
	for i := 0; i < k; i++ {
		if err := a.PostSend(uint64(i), []byte("a"), nil, rdma.FlagInline|rdma.FlagSignaled); err != nil {
			t.Fatal(err)
		}
	}
	a.(*conn).send.close()
	for i, wc := range pollN(t, ctx, shared, k) {
		if wc.WRID != uint64(i) || wc.Status != rdma.StatusFlushed {
			t.Fatalf("a's flush %d: %+v", i, wc)
		}
	}
	if n := inflight(shared); n != k {
		t.Errorf("after the provider's flush the CQ counts %d CQEs to come, want %d (the device holds them)", n, k)
	}
	// b takes what room is left, with sends that wait too.
	nb := postUntilFull(t, b, 100)
	if nb != sq.depth-k {
		t.Errorf("b posted %d requests into a CQ of %d with %d CQEs to come; want %d", nb, sq.depth, k, sq.depth-k)
	}
	// The device completes a's flushed sends, then b's: every CQE it
	// makes lands in the ibv_cq before anyone polls it.
	recvN(t, ctx, a2, rb, k)
	recvN(t, ctx, b2, rb, nb)
	for i, wc := range pollN(t, ctx, shared, nb) {
		if wc.WRID != 100+uint64(i) || wc.Status != rdma.StatusSuccess || wc.Opcode != rdma.OpSend {
			t.Fatalf("b's completion %d: %+v", i, wc)
		}
	}
	if err := b.Err(); err != nil {
		t.Fatal("b:", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if n := inflight(shared); n != 0 {
		t.Errorf("with a closed and b's requests complete the CQ counts %d CQEs to come, want 0", n)
	}
	var more [4]rdma.WC
	if n := shared.Poll(more[:]); n != 0 {
		t.Fatalf("extra completions %+v", more[:n])
	}
}

// TestSharedCQCloseWhileFull: connections with requests outstanding on a
// shared CQ close while another connection keeps the CQ full; every
// completion the other connection is owed comes, successful, and each
// closed connection's requests come back flushed, once. (Close moves the
// QP to the error state first, so the device's flushes usually come
// before the provider's; TestSharedCQLateCompletions fixes the other
// order.)
func TestSharedCQCloseWhileFull(t *testing.T) {
	const depth, k, rounds = 31, 6, 4
	d := openDev(t, rdma.Config{SendQueueDepth: 64, RNRRetry: -1})
	shared := newCQ(t, d, depth)
	b, _ := pairQP(t, d, d, both(shared), rdma.QPInit{})
	src, _ := d.Alloc(64, rdma.AccessLocalWrite)
	dst, _ := d.Alloc(64, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	ctx := ctxT(t)
	const bBase = 1 << 32
	var posted, done uint64 // b's signaled writes
	flushed := map[uint64]int{}
	wcs := make([]rdma.WC, 32)
	poll := func() {
		for _, wc := range wcs[:shared.Poll(wcs)] {
			switch {
			case wc.WRID >= bBase:
				if wc.Status != rdma.StatusSuccess || wc.WRID != bBase+done {
					t.Fatalf("b's completion %+v, want wrid %#x success", wc, bBase+done)
				}
				done++
			case wc.Status == rdma.StatusFlushed:
				flushed[wc.WRID]++
			default:
				t.Fatalf("closing connection's completion %+v, want flushed", wc)
			}
		}
	}
	fill := func() { // b posts until the CQ has no room (or depth more)
		for range depth {
			err := b.PostWrite(bBase+posted, src.Bytes()[:8], src, rdma.FlagSignaled, dst.Addr(), dst.RKey())
			if errors.Is(err, rdma.ErrQueueFull) {
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			posted++
		}
	}
	for r := 0; r < rounds; r++ {
		a, _ := pairQP(t, d, d, both(shared), rdma.QPInit{})
		// b's completions, polled or not, hold the room a needs.
		for done < posted && ctx.Err() == nil {
			poll()
			runtime.Gosched()
		}
		for i := 0; i < k; i++ { // wait for receives that never come
			id := uint64(r*k + i)
			if err := a.PostSend(id, []byte("a"), nil, rdma.FlagInline|rdma.FlagSignaled); err != nil {
				t.Fatal(err)
			}
		}
		fill()
		closed := make(chan error, 1)
		go func() { closed <- a.Close() }()
	loop:
		for {
			select {
			case err := <-closed:
				if err != nil {
					t.Fatal(err)
				}
				break loop
			default:
			}
			if ctx.Err() != nil {
				t.Fatal("Close did not return")
			}
			poll()
			fill()
			runtime.Gosched()
		}
	}
	for done < posted && ctx.Err() == nil {
		poll()
		runtime.Gosched()
	}
	if done != posted {
		t.Fatalf("b: %d of %d completions (lost to an overrun CQ?)", done, posted)
	}
	for r := 0; r < rounds*k; r++ {
		if flushed[uint64(r)] != 1 {
			t.Fatalf("closed connections' flushes %v: want each of 0..%d once", flushed, rounds*k-1)
		}
	}
	if err := b.Err(); err != nil {
		t.Fatal("b:", err)
	}
	if n := inflight(shared); n != 0 {
		t.Errorf("the CQ counts %d CQEs to come with nothing outstanding", n)
	}
	t.Logf("b: %d writes through a CQ of %d while %d connections closed", posted, depth, rounds)
}

// TestSharedCQReadyBounded: completions polled from the device but not
// yet handed out hold room in the CQ as CQEs do. With the CQ's depth of
// them waiting, a post fails with ErrQueueFull; it was accepted, and the
// list of waiting completions grew without bound while the caller did not
// poll. A caller that keeps some waiting while it polls one at a time
// never makes the list longer than the depth (it grew by one a round).
func TestSharedCQReadyBounded(t *testing.T) {
	const depth, k = 31, 8
	d := openDev(t, rdma.Config{SendQueueDepth: 64})
	shared := newCQ(t, d, depth)
	sq := shared.(*cq)
	cli, _ := pairQP(t, d, d, both(shared), rdma.QPInit{})
	src, _ := d.Alloc(64, rdma.AccessLocalWrite)
	dst, _ := d.Alloc(64, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	ctx := ctxT(t)
	write := func(id int) error {
		return cli.PostWrite(uint64(id), src.Bytes()[:8], src, rdma.FlagSignaled, dst.Addr(), dst.RKey())
	}
	// waitReady polls the device into the CQ's list, as a post that
	// finds no room does, until n completions wait there.
	waitReady := func(n int) {
		t.Helper()
		for {
			sq.mu.Lock()
			sq.pollLocked()
			got := sq.readyLen()
			sq.mu.Unlock()
			if got >= n {
				return
			}
			if ctx.Err() != nil {
				t.Fatalf("%d of %d completions came", got, n)
			}
			runtime.Gosched()
		}
	}
	for i := 0; i < sq.depth; i++ {
		if err := write(i); err != nil {
			t.Fatal(err)
		}
	}
	waitReady(sq.depth)
	if err := write(sq.depth); !errors.Is(err, rdma.ErrQueueFull) {
		t.Fatalf("a post with %d completions waiting in a CQ of %d: %v, want ErrQueueFull", sq.depth, sq.depth, err)
	}
	polled := 0
	for _, wc := range pollN(t, ctx, shared, sq.depth) {
		if wc.WRID != uint64(polled) || wc.Status != rdma.StatusSuccess {
			t.Fatalf("completion %+v, want wrid %d success", wc, polled)
		}
		polled++
	}
	next := polled
	for ; next < polled+k; next++ {
		if err := write(next); err != nil {
			t.Fatal(err)
		}
	}
	waitReady(k)
	for r := 0; r < 4*sq.depth; r++ {
		if err := write(next); err != nil {
			t.Fatal(err)
		}
		next++
		waitReady(k + 1)
		var one [1]rdma.WC
		if n := shared.Poll(one[:]); n != 1 || one[0].WRID != uint64(polled) {
			t.Fatalf("round %d: %d completions %+v, want wrid %d", r, n, one[:n], polled)
		}
		polled++
		sq.mu.Lock()
		n := len(sq.ready)
		sq.mu.Unlock()
		if n > sq.depth {
			t.Fatalf("round %d: with %d completions waiting the CQ keeps a list of %d, for a depth of %d", r, k, n, sq.depth)
		}
	}
}
