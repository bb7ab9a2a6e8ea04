package rdmatest

import (
	"fmt"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// Helpers of the shared-CQ cases (cases_cq.go).

// cqConn is a test-side connection made with DialQP, and the peer driven
// on its far end.
type cqConn struct {
	c rdma.Conn
	p peer
}

// newCQ creates a CQ on the test side's device. It is closed after every
// conn the case binds to it afterwards (Cleanup runs in reverse order).
func (e *env) newCQ() rdma.CQ {
	e.t.Helper()
	cq, err := e.dev.CreateCQ(0)
	e.must(err, "create_cq")
	e.t.Cleanup(func() { cq.Close() })
	return cq
}

// bind dials one more connection to the case's peer with init's CQs.
func (e *env) bind(init rdma.QPInit) cqConn {
	e.t.Helper()
	addr, err := e.b.ListenMore(e.opts.listenAddr())
	e.must(err, "peer listen (more)")
	var k int
	c := e.dialQP(addr, init, func() (err error) {
		k, err = e.b.AcceptMore(10 * time.Second)
		return err
	})
	return cqConn{c: c, p: e.b.On(k)}
}

// dialQP dials addr with init while accept runs on the peer; the conn is
// closed by Cleanup.
func (e *env) dialQP(addr string, init rdma.QPInit, accept func() error) rdma.Conn {
	e.t.Helper()
	type dialed struct {
		c   rdma.Conn
		err error
	}
	ch := make(chan dialed, 1)
	go func() {
		c, err := e.dev.DialQP(e.ctx, addr, init)
		ch <- dialed{c, err}
	}()
	aerr := accept()
	d := <-ch
	if d.err != nil {
		e.fatalf("dial_qp %s: %v", addr, d.err)
	}
	e.t.Cleanup(func() { d.c.Close() })
	if aerr != nil {
		e.fatalf("peer accept: %v", aerr)
	}
	return d.c
}

// wrid tags a request of the test side's conn k: its kind (a send-queue
// request or a receive) and its sequence number in that kind's post order.
func wrid(k int, send bool, seq int) uint64 {
	w := uint64(k)<<32 | uint64(seq)
	if send {
		w |= 1 << 31
	}
	return w
}

func unwrid(w uint64) (k int, send bool, seq int) {
	return int(w >> 32), w&(1<<31) != 0, int(w & (1<<31 - 1))
}

// orderCheck checks that every conn's completions come in its post order,
// sends among sends and receives among receives, each exactly once.
type orderCheck struct {
	next map[[2]int]int // (conn, kind) → next sequence number
}

func newOrderCheck() *orderCheck { return &orderCheck{next: map[[2]int]int{}} }

// see takes one completion; it returns a description of the violation, or "".
func (o *orderCheck) see(wc rdma.WC) string {
	k, send, seq := unwrid(wc.WRID)
	kind := 0
	if send {
		kind = 1
	}
	key := [2]int{k, kind}
	if want := o.next[key]; seq != want {
		return fmt.Sprintf("conn %d send=%v: completion #%d came where #%d was due (post order broken, or one lost or repeated)", k, send, seq, want)
	}
	o.next[key]++
	return ""
}

// pollN takes n completions from cq as a poller does: Poll in batches of
// 32, and when it finds nothing, Arm, Poll again, then wait on Notify. No
// token within compWait fails the case (a lost wake-up or a lost
// completion), as does a completion beyond n.
func (e *env) pollN(cq rdma.CQ, n int) []rdma.WC {
	e.t.Helper()
	var got []rdma.WC
	var wcs [32]rdma.WC
	for len(got) < n {
		if k := cq.Poll(wcs[:]); k > 0 {
			got = append(got, wcs[:k]...)
			continue
		}
		cq.Arm()
		if k := cq.Poll(wcs[:]); k > 0 {
			got = append(got, wcs[:k]...)
			continue
		}
		select {
		case <-cq.Notify():
		case <-time.After(compWait):
			e.fatalf("%d of %d completions, then none and no token on Notify for %v", len(got), n, compWait)
		}
	}
	if len(got) > n {
		e.fatalf("%d completions, want %d: %+v", len(got), n, got[n:])
	}
	return got
}

// noMore checks that cq has nothing left.
func (e *env) noMore(cq rdma.CQ) {
	e.t.Helper()
	var wcs [8]rdma.WC
	if k := cq.Poll(wcs[:]); k != 0 {
		e.fatalf("unexpected completions %+v", wcs[:k])
	}
}

// roundTrip checks that cc works in both directions: the peer sends to
// it, and it sends to the peer; both its completions come through cq.
func (e *env) roundTrip(cq rdma.CQ, cc cqConn, k, seq int) {
	e.t.Helper()
	e.must(cc.c.PostRecv(wrid(k, false, seq), nil, nil), "post_recv")
	e.must(cc.p.Post(postReq{Op: "send", WRID: 77}), "peer post_send")
	wc := e.pollN(cq, 1)[0]
	e.expect(wc, wrid(k, false, seq), rdma.OpRecv, rdma.StatusSuccess)
	e.must(cc.p.PostRecv(78, nil), "peer post_recv")
	e.must(cc.c.PostSend(wrid(k, true, seq), nil, nil, rdma.FlagSignaled), "post_send")
	e.expect(e.pollN(cq, 1)[0], wrid(k, true, seq), rdma.OpSend, rdma.StatusSuccess)
	wc, err := cc.p.RecvComp(compWait)
	e.must(err, "peer GetRecvComp")
	e.expect(wc, 78, rdma.OpRecv, rdma.StatusSuccess)
}
