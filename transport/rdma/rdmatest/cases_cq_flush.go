package rdmatest

import (
	"context"
	"errors"
	"sort"
	"sync"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// caseCQOnce: after Arm, a completion sends a token on Notify (for a
// receive and for a send-queue completion); the CQ hands each completion
// out once, also to two goroutines polling it at the same time, each of
// which sees its share in post order.
func caseCQOnce(e *env) {
	cq := e.newCQ()
	cc := e.bind(rdma.QPInit{SendCQ: cq, RecvCQ: cq})
	const n = 400
	for i := 0; i < n; i++ {
		e.must(cc.c.PostRecv(wrid(0, false, i), nil, nil), "post_recv")
	}
	token := func(what string) {
		e.t.Helper()
		select {
		case <-cq.Notify():
		case <-time.After(compWait):
			e.fatalf("%s: no token on Notify within %v after Arm", what, compWait)
		}
	}
	// Drain a stale token, if the provider left one, before arming.
	select {
	case <-cq.Notify():
	default:
	}
	cq.Arm()
	e.must(cc.p.Post(postReq{Op: "send", WRID: 0}), "peer post_send")
	token("receive")
	got := e.pollN(cq, 1)
	e.expect(got[0], wrid(0, false, 0), rdma.OpRecv, rdma.StatusSuccess)
	e.noMore(cq)

	dst := e.peerBuf(64, lw|rw)
	src := e.alloc(64, lw, false)
	select {
	case <-cq.Notify():
	default:
	}
	cq.Arm()
	e.must(cc.c.PostWrite(wrid(0, true, 0), src.Bytes(), src, rdma.FlagSignaled, dst.Addr, dst.RKey), "post_write")
	token("signaled write")
	e.expect(e.pollN(cq, 1)[0], wrid(0, true, 0), rdma.OpWrite, rdma.StatusSuccess)
	e.noMore(cq)

	// Two pollers, batches of 1 and of 32.
	peerDone := make(chan error, 1)
	go func() {
		var err error
		for i := 1; i < n && err == nil; i += 50 {
			err = cc.p.Post(postReq{Op: "send", WRID: uint64(i), Count: min(50, n-i)})
		}
		peerDone <- err
	}()
	var mu sync.Mutex
	total, done := 1, make(chan struct{})
	seen := make([][]uint64, 2)
	errs := make([]string, 2)
	var wg sync.WaitGroup
	for p, batch := range []int{1, 32} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wcs := make([]rdma.WC, batch)
			take := func(k int) {
				for _, wc := range wcs[:k] {
					seen[p] = append(seen[p], wc.WRID)
				}
				mu.Lock()
				total += k
				if total == n {
					close(done)
				}
				mu.Unlock()
			}
			for {
				if k := cq.Poll(wcs); k > 0 {
					take(k)
					continue
				}
				cq.Arm()
				if k := cq.Poll(wcs); k > 0 {
					take(k)
					continue
				}
				select {
				case <-cq.Notify():
				case <-done:
					return
				case <-time.After(lostWakeup):
					errs[p] = "no completion and no token"
					return
				}
			}
		}()
	}
	wg.Wait()
	e.must(<-peerDone, "peer posts")
	var all []uint64
	for p := range seen {
		if errs[p] != "" {
			e.fatalf("poller %d: %s", p, errs[p])
		}
		if !sort.SliceIsSorted(seen[p], func(i, j int) bool { return seen[p][i] < seen[p][j] }) {
			e.fatalf("poller %d got its share out of post order: %v", p, seen[p])
		}
		all = append(all, seen[p]...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	if len(all) != n-1 {
		e.fatalf("two pollers got %d completions, want %d", len(all), n-1)
	}
	for i, w := range all {
		if w != wrid(0, false, i+1) {
			e.fatalf("two pollers: completion %#x where %#x was due (lost or handed out twice)", w, wrid(0, false, i+1))
		}
	}
	e.noMore(cq)
	ctx, cancel := context.WithTimeout(e.ctx, 50*time.Millisecond)
	defer cancel()
	if wc, err := cc.c.GetRecvComp(ctx); !errors.Is(err, context.DeadlineExceeded) {
		e.fatalf("GetRecvComp on a drained CQ: %+v %v, want deadline exceeded", wc, err)
	}
}

// flushCheck polls n completions, all of conn k, and checks they failed
// in post order, the receives with StatusFlushed.
func (e *env) flushCheck(cq rdma.CQ, k, n int, what string) {
	e.t.Helper()
	o := newOrderCheck()
	for _, wc := range e.pollN(cq, n) {
		kk, send, _ := unwrid(wc.WRID)
		if msg := o.see(wc); kk != k || msg != "" {
			e.fatalf("%s: completion %+v: %s", what, wc, msg)
		}
		if wc.Status == rdma.StatusSuccess || !send && wc.Status != rdma.StatusFlushed {
			e.fatalf("%s: completion %+v (send %v): %v, want a failure (StatusFlushed for a receive)", what, wc, send, wc.Status)
		}
	}
}

// postStuck posts nr receives on cc, then a signaled send the peer has no
// receive for (RNR retries forever) and ns-1 signaled writes behind it.
func (e *env) postStuck(cc cqConn, k, nr, ns int) {
	e.t.Helper()
	for i := 0; i < nr; i++ {
		e.must(cc.c.PostRecv(wrid(k, false, i), nil, nil), "post_recv")
	}
	src := e.alloc(64, lw, false)
	dst := e.peerBuf(64, lw|rw)
	e.must(cc.c.PostSend(wrid(k, true, 0), src.Bytes(), src, rdma.FlagSignaled), "post_send")
	for i := 1; i < ns; i++ {
		e.must(cc.c.PostWrite(wrid(k, true, i), src.Bytes(), src, rdma.FlagSignaled, dst.Addr, dst.RKey), "post_write")
	}
}

// caseCQFlushClose: closing a conn bound to a shared CQ completes its
// posted receives (StatusFlushed) and its outstanding send-queue requests
// (a failure) in the CQ, in post order; another conn bound to the CQ keeps
// working, so Close did not close the CQ.
func caseCQFlushClose(e *env) {
	cq := e.newCQ()
	init := rdma.QPInit{SendCQ: cq, RecvCQ: cq}
	a, b := e.bind(init), e.bind(init)
	e.roundTrip(cq, a, 0, 100)
	e.postStuck(a, 0, 5, 3)
	e.must(a.c.Close(), "close")
	e.flushCheck(cq, 0, 8, "after close")
	e.roundTrip(cq, b, 1, 0)
	e.noMore(cq)
}

// caseCQFlushPeerClosed: the peer closing its end flushes a bound conn's
// receives and outstanding requests into the shared CQ.
func caseCQFlushPeerClosed(e *env) {
	cq := e.newCQ()
	init := rdma.QPInit{SendCQ: cq, RecvCQ: cq}
	a, b := e.bind(init), e.bind(init)
	e.roundTrip(cq, a, 0, 100)
	e.postStuck(a, 0, 5, 3)
	e.must(a.p.CloseConn(), "peer close")
	e.flushCheck(cq, 0, 8, "after the peer closed")
	e.roundTrip(cq, b, 1, 0)
	e.noMore(cq)
}

// caseCQFlushBothClose: both ends close at once, and when Close returns
// every completion of the conn is in the shared CQ already, even where
// the peer's close is flushing it at that moment: a Poll right after
// Close finds them all. An engine that has closed a conn and polled its CQ
// reuses the conn's wrids for the next one, and a flush arriving later
// fails the wrong conn (mem did this: comm's 64-rank tests saw "recv
// flushed" on a healthy new connection).
func caseCQFlushBothClose(e *env) {
	cq := e.newCQ()
	init := rdma.QPInit{SendCQ: cq, RecvCQ: cq}
	for k := range 5 {
		a := e.bind(init)
		e.postStuck(a, k, 5, 3)
		peer := make(chan error, 1)
		go func() { peer <- a.p.CloseConn() }()
		e.must(a.c.Close(), "close")
		var wcs [16]rdma.WC
		if n := cq.Poll(wcs[:]); n != 8 {
			e.fatalf("round %d: %d completions in the CQ when Close returned, want 8", k, n)
		}
		e.must(<-peer, "peer close")
		e.noMore(cq)
	}
}

// caseCQFlushPeerDied: a second peer (a child process, killed with
// SIGKILL; in-process, its device closed at once) dies while a conn bound
// to the shared CQ has receives and requests outstanding: they complete in
// the CQ with failures, and a conn to the other peer keeps working.
func caseCQFlushPeerDied(e *env) {
	p, kill, err := e.spawn()
	e.must(err, "second peer")
	e.t.Cleanup(func() { p.Close() })
	addr, err := p.Listen(e.cfg, e.opts.listenAddr())
	e.must(err, "second peer listen")
	cq := e.newCQ()
	init := rdma.QPInit{SendCQ: cq, RecvCQ: cq}
	a := cqConn{c: e.dialQP(addr, init, func() error { return p.Accept(10 * time.Second) }), p: p}
	b := e.bind(init)
	e.roundTrip(cq, a, 0, 100)
	e.postStuck(cqConn{c: a.c, p: p}, 0, 5, 1)
	e.must(kill(), "kill the second peer")
	e.flushCheck(cq, 0, 6, "after the peer died")
	e.roundTrip(cq, b, 1, 0)
	e.noMore(cq)
}
