package rdmatest

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// casePeerDiedMidTransfer: a second peer dies (a child process, killed
// with SIGKILL; in-process, its device closed at once) while a goroutine
// posts 256 writes of 1 MiB to it on a conn with queues of its own (no
// shared CQ), and a receive is posted. The peer dies once 8 posts have
// returned (a provider may move the data inside the post: rxe does); the
// poster stops at its first refused post. The posted writes complete in
// post order, successes and then failures; the receive completes flushed;
// then GetSendComp and GetRecvComp fail, as no completion can come.
// Nothing waits for its context: each call returns well within compWait,
// and the whole drain within deathBound.
func casePeerDiedMidTransfer(e *env) {
	p, kill, err := e.spawn()
	e.must(err, "second peer")
	e.t.Cleanup(func() { p.Close() })
	addr, err := p.Listen(e.cfg, e.opts.listenAddr())
	e.must(err, "second peer listen")
	c := e.dialQP(addr, rdma.QPInit{}, func() error { return p.Accept(10 * time.Second) })
	const n, sz, before = 256, 1 << 20, 8
	src := e.alloc(sz, lw, false)
	fill(src.Bytes(), 51)
	dst, err := p.Buf(sz, lw|rw, false)
	e.must(err, "second peer alloc")
	e.must(c.PostRecv(1000, nil, nil), "post_recv")
	var posted atomic.Int64
	under, done := make(chan struct{}), make(chan error, 1)
	go func() {
		var err error
		for i := range n {
			if err = c.PostWrite(uint64(i), src.Bytes(), src, rdma.FlagSignaled, dst.Addr, dst.RKey); err != nil {
				break
			}
			if posted.Add(1) == before {
				close(under)
			}
		}
		if posted.Load() < before {
			close(under)
		}
		done <- err
	}()
	<-under
	e.must(kill(), "kill the second peer")
	start := time.Now()
	perr := <-done
	total := int(posted.Load())
	if total < before {
		e.fatalf("post_write %d failed before the peer died: %v", total, perr)
	}
	next := func(get func(context.Context) (rdma.WC, error)) (rdma.WC, error) {
		ctx, cancel := context.WithTimeout(e.ctx, compWait)
		defer cancel()
		wc, err := get(ctx)
		if errors.Is(err, context.DeadlineExceeded) {
			e.fatalf("no completion and no error %v after the peer died (Conn.Err: %v)", time.Since(start), c.Err())
		}
		return wc, err
	}
	failed, got := -1, 0
	for {
		wc, err := next(c.GetSendComp)
		if err != nil {
			e.t.Logf("%d writes posted (then %v), %d completed, the first failure at %d; then %v", total, perr, got, failed, err)
			break
		}
		if got >= total || wc.WRID != uint64(got) {
			e.fatalf("send completion %+v: want wrid %d (of %d posted, in post order)", wc, got, total)
		}
		if wc.Status != rdma.StatusSuccess {
			if failed < 0 {
				failed = got
			}
		} else if failed >= 0 {
			e.fatalf("write %d succeeded after write %d failed", wc.WRID, failed)
		}
		got++
	}
	if got != total && failed < 0 {
		e.fatalf("%d of %d posted writes completed, none failed", got, total)
	}
	wc, err := next(c.GetRecvComp)
	if err == nil {
		e.expect(wc, 1000, 0, rdma.StatusFlushed)
		if _, err = next(c.GetRecvComp); err == nil {
			e.fatalf("GetRecvComp: a second completion for one posted receive")
		}
	}
	if d := time.Since(start); d > deathBound {
		e.fatalf("the conn to a dead peer drained after %v, want within %v", d, deathBound)
	}
}

// deathBound is how soon the completion calls of a conn whose peer died
// must have said so: a disconnect noticed (a reset, a dead process's
// goodbye, a killed queue pair), not a transport timeout.
const deathBound = 10 * time.Second
