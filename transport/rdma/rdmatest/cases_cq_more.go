package rdmatest

import (
	"context"
	"errors"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// caseCQGetComp: GetSendComp and GetRecvComp on a queue bound to a shared
// CQ return that CQ's next completion, whichever kind and conn it is; a
// queue left private (nil in QPInit) keeps its own completions out of the
// CQ.
func caseCQGetComp(e *env) {
	cq := e.newCQ()
	a := e.bind(rdma.QPInit{SendCQ: cq, RecvCQ: cq})
	h := e.bind(rdma.QPInit{SendCQ: cq}) // receive queue private
	src := e.alloc(64, lw, false)
	dst := e.peerBuf(64, lw|rw)
	get := func(c rdma.Conn, send bool) rdma.WC {
		e.t.Helper()
		ctx, cancel := context.WithTimeout(e.ctx, compWait)
		defer cancel()
		var wc rdma.WC
		var err error
		if send {
			wc, err = c.GetSendComp(ctx)
		} else {
			wc, err = c.GetRecvComp(ctx)
		}
		e.must(err, "Get*Comp on a bound queue")
		return wc
	}

	e.must(a.c.PostRecv(wrid(0, false, 0), nil, nil), "post_recv")
	e.must(a.p.Post(postReq{Op: "send", WRID: 1}), "peer post_send")
	e.expect(get(a.c, true), wrid(0, false, 0), rdma.OpRecv, rdma.StatusSuccess)
	e.must(a.c.PostWrite(wrid(0, true, 0), src.Bytes(), src, rdma.FlagSignaled, dst.Addr, dst.RKey), "post_write")
	e.expect(get(a.c, false), wrid(0, true, 0), rdma.OpWrite, rdma.StatusSuccess)
	// h's send queue shares the CQ: a's GetRecvComp hands out its write.
	e.must(h.c.PostWrite(wrid(1, true, 0), src.Bytes(), src, rdma.FlagSignaled, dst.Addr, dst.RKey), "post_write")
	e.expect(get(a.c, false), wrid(1, true, 0), rdma.OpWrite, rdma.StatusSuccess)

	// h's receive queue is private: its receive stays out of the CQ.
	e.must(h.c.PostRecv(wrid(1, false, 0), nil, nil), "post_recv")
	e.must(h.p.Post(postReq{Op: "send", WRID: 2}), "peer post_send")
	e.expect(get(h.c, false), wrid(1, false, 0), rdma.OpRecv, rdma.StatusSuccess)
	e.noMore(cq)
	e.must(h.c.PostWrite(wrid(1, true, 1), src.Bytes(), src, rdma.FlagSignaled, dst.Addr, dst.RKey), "post_write")
	e.expect(e.pollN(cq, 1)[0], wrid(1, true, 1), rdma.OpWrite, rdma.StatusSuccess)

	ctx, cancel := context.WithTimeout(e.ctx, 50*time.Millisecond)
	defer cancel()
	if wc, err := a.c.GetSendComp(ctx); !errors.Is(err, context.DeadlineExceeded) {
		e.fatalf("GetSendComp on an empty shared CQ: %+v %v, want deadline exceeded", wc, err)
	}
	// The private conn of the case is untouched by all this.
	e.fence(9)
}

// caseCQZeroLength: zero-length sends and writes-with-immediate, both
// ways, complete through the shared CQ with ByteLen 0 (and the immediate).
func caseCQZeroLength(e *env) {
	cq := e.newCQ()
	cc := e.bind(rdma.QPInit{SendCQ: cq, RecvCQ: cq})
	dst := e.alloc(64, lw|rw, false)
	e.must(cc.c.PostRecv(wrid(0, false, 0), nil, nil), "post_recv")
	e.must(cc.c.PostRecv(wrid(0, false, 1), dst.Bytes(), dst), "post_recv")
	e.must(cc.c.PostRecv(wrid(0, false, 2), nil, nil), "post_recv")
	e.must(cc.p.Post(
		postReq{Op: "send", WRID: 10},
		postReq{Op: "send", WRID: 11},
		postReq{Op: "writeimm", WRID: 12, RAddr: dst.Addr(), RKey: dst.RKey(), Imm: 0xfeedf00d},
	), "peer posts")
	got := e.pollN(cq, 3)
	for i, wc := range got {
		op := rdma.OpRecv
		if i == 2 {
			op = rdma.OpRecvWriteImm
		}
		e.expect(wc, wrid(0, false, i), op, rdma.StatusSuccess)
		if wc.ByteLen != 0 || wc.HasImm != (i == 2) || (i == 2 && wc.Imm != 0xfeedf00d) {
			e.fatalf("zero-length receive %+v", wc)
		}
	}
	pdst := e.peerBuf(64, lw|rw)
	e.must(cc.p.PostRecv(20, nil), "peer post_recv")
	e.must(cc.p.PostRecv(21, nil), "peer post_recv")
	e.must(cc.c.PostSend(wrid(0, true, 0), nil, nil, rdma.FlagSignaled), "post_send")
	e.must(cc.c.PostWriteImm(wrid(0, true, 1), nil, nil, rdma.FlagSignaled, pdst.Addr, pdst.RKey, 0xabcd), "post_write_imm")
	got = e.pollN(cq, 2)
	e.expect(got[0], wrid(0, true, 0), rdma.OpSend, rdma.StatusSuccess)
	e.expect(got[1], wrid(0, true, 1), rdma.OpWrite, rdma.StatusSuccess)
	e.expect(e.peerRecvCompOn(cc.p), 20, rdma.OpRecv, rdma.StatusSuccess)
	wc := e.peerRecvCompOn(cc.p)
	e.expect(wc, 21, rdma.OpRecvWriteImm, rdma.StatusSuccess)
	if wc.ByteLen != 0 || !wc.HasImm || wc.Imm != 0xabcd {
		e.fatalf("peer: zero-length write-imm receive %+v", wc)
	}
	e.noMore(cq)
}

func (e *env) peerRecvCompOn(p peer) rdma.WC {
	e.t.Helper()
	wc, err := p.RecvComp(compWait)
	e.must(err, "peer GetRecvComp")
	return wc
}

// caseCQClose: closing a CQ (its conns closed first) sends a token on
// Notify, so that a sleeper wakes, and Poll returns 0 after it. Neither a
// conn's end nor Close is a failure of the CQ: Err stays nil.
func caseCQClose(e *env) {
	cq, err := e.dev.CreateCQ(0)
	e.must(err, "create_cq")
	cc := e.bind(rdma.QPInit{SendCQ: cq, RecvCQ: cq})
	e.roundTrip(cq, cc, 0, 0)
	if err := cq.Err(); err != nil {
		e.fatalf("Err of a working CQ: %v", err)
	}
	e.must(cc.c.Close(), "close conn")
	select { // a stale token from the round trip, if any
	case <-cq.Notify():
	default:
	}
	woke := make(chan struct{})
	go func() {
		<-cq.Notify()
		close(woke)
	}()
	e.must(cq.Close(), "close cq")
	select {
	case <-woke:
	case <-time.After(compWait):
		e.fatalf("no token on Notify within %v of Close", compWait)
	}
	var wcs [4]rdma.WC
	if n := cq.Poll(wcs[:]); n != 0 {
		e.fatalf("Poll after Close: %d", n)
	}
	if err := cq.Err(); err != nil {
		e.fatalf("Err after Close: %v", err)
	}
}

// caseCQBulk moves large payloads both ways on a conn bound to a shared
// CQ, with the test side only polling it while it waits: a provider whose
// Poll drives its own progress (a socket written and read in pieces) must
// finish a transfer much larger than one step of it.
func caseCQBulk(e *env) {
	const big = 8<<20 + 5
	cq := e.newCQ()
	cc := e.bind(rdma.QPInit{SendCQ: cq, RecvCQ: cq})
	src := e.alloc(big, lw, false)
	fill(src.Bytes(), 91)
	dst := e.alloc(big, lw|rw, false)
	psrc := e.peerBuf(big, lw)
	e.must(e.b.Fill(psrc, 0, big, 92), "peer fill")
	pdst := e.peerBuf(big, lw|rw)

	// Test side → peer: a write, then a send of the same bytes into a
	// receive, each signaled.
	e.must(cc.p.PostRecv(1, []seg{{pdst.ID, 0, big}}), "peer post_recv")
	e.must(cc.c.PostWrite(wrid(0, true, 0), src.Bytes(), src, rdma.FlagSignaled, pdst.Addr, pdst.RKey), "post_write")
	e.must(cc.c.PostSend(wrid(0, true, 1), src.Bytes()[:big-1], src, rdma.FlagSignaled), "post_send")
	got := e.pollN(cq, 2)
	e.expect(got[0], wrid(0, true, 0), rdma.OpWrite, rdma.StatusSuccess)
	e.expect(got[1], wrid(0, true, 1), rdma.OpSend, rdma.StatusSuccess)
	wc := e.peerRecvCompOn(cc.p)
	e.expect(wc, 1, rdma.OpRecv, rdma.StatusSuccess)
	if wc.ByteLen != big-1 {
		e.fatalf("peer receive %+v: want %d bytes", wc, big-1)
	}
	e.peerSum(pdst, 0, src.Bytes()[:big-1], "bulk send")
	e.peerSum(pdst, big-1, src.Bytes()[big-1:], "bulk write (its last byte)")

	// Peer → test side: a write-with-immediate; the test side only polls.
	e.must(cc.c.PostRecv(wrid(0, false, 0), nil, nil), "post_recv")
	e.must(cc.p.Post(postReq{Op: "writeimm", WRID: 2, Segs: []seg{{psrc.ID, 0, big}}, RAddr: dst.Addr(), RKey: dst.RKey(), Imm: 9}), "peer post_write_imm")
	wc = e.pollN(cq, 1)[0]
	e.expect(wc, wrid(0, false, 0), rdma.OpRecvWriteImm, rdma.StatusSuccess)
	if wc.ByteLen != big || wc.Imm != 9 {
		e.fatalf("write-imm receive %+v: want %d bytes, imm 9", wc, big)
	}
	if checksum(dst.Bytes()) != checksum(pattern(big, 92)) {
		e.fatalf("bulk write-imm: data differs")
	}
	e.noMore(cq)
}
