package rdmatest

import (
	"github.com/gorun-hpc/gorun/transport/rdma"
)

// caseBothDirections has both sides post writes and then sends to each
// other at the same time, then checks completions and data on both.
func caseBothDirections(e *env) {
	n, sz := min(200, e.outstanding()/2), 4096
	half := n * sz
	aSrc := e.alloc(2*half, lw, false)
	fill(aSrc.Bytes(), 51)
	aDst := e.alloc(2*half, lw|rw, false) // receives, then the peer's writes
	bSrc := e.peerBuf(2*half, lw)
	e.must(e.b.Fill(bSrc, 0, 2*half, 52), "peer fill")
	bDst := e.peerBuf(2*half, lw|rw)
	for i := 0; i < n; i++ {
		e.must(e.a.PostRecv(uint64(i), aDst.Bytes()[i*sz:(i+1)*sz], aDst), "post_recv")
		e.must(e.b.PostRecv(uint64(i), []seg{{bDst.ID, i * sz, sz}}), "peer post_recv")
	}
	done := make(chan error, 1)
	go func() {
		done <- e.b.Post(
			postReq{Op: "write", Segs: []seg{{bSrc.ID, half, sz}}, Flags: rdma.FlagSignaled,
				RAddr: aDst.Addr() + uint64(half), RKey: aDst.RKey(), Count: n, Stride: sz},
			postReq{Op: "send", WRID: uint64(n), Segs: []seg{{bSrc.ID, 0, sz}}, Flags: rdma.FlagSignaled,
				Count: n, Stride: sz})
	}()
	for i := 0; i < n; i++ {
		b := aSrc.Bytes()[half+i*sz : half+(i+1)*sz]
		e.must(e.a.PostWrite(uint64(i), b, aSrc, rdma.FlagSignaled, bDst.Addr+uint64(half+i*sz), bDst.RKey), "post_write")
	}
	for i := 0; i < n; i++ {
		e.must(e.a.PostSend(uint64(n+i), aSrc.Bytes()[i*sz:(i+1)*sz], aSrc, rdma.FlagSignaled), "post_send")
	}
	e.must(<-done, "peer posts")
	for i := 0; i < 2*n; i++ {
		op := rdma.OpWrite
		if i >= n {
			op = rdma.OpSend
		}
		e.expectSend(uint64(i), op, rdma.StatusSuccess)
	}
	for i := 0; i < n; i++ {
		e.expect(e.recvComp(), uint64(i), rdma.OpRecv, rdma.StatusSuccess)
	}
	for i := 0; i < 2*n; i++ {
		op := rdma.OpWrite
		if i >= n {
			op = rdma.OpSend
		}
		e.expect(e.peerSendComp(), uint64(i), op, rdma.StatusSuccess)
	}
	for i := 0; i < n; i++ {
		e.expect(e.peerRecvComp(), uint64(i), rdma.OpRecv, rdma.StatusSuccess)
	}
	if checksum(aDst.Bytes()) != checksum(pattern(2*half, 52)) {
		e.fatalf("test side: data from the peer differs")
	}
	e.peerSum(bDst, 0, aSrc.Bytes(), "peer side")
}

const orderRounds, orderSize = 20, 1 << 20

// caseOrderingToPeer: an unsignaled write then a send; when the peer sees
// the receive completion, the write's data must already be there. The
// written data alternates, so a send that overtakes its write shows.
func caseOrderingToPeer(e *env) {
	src := [2]*rdma.MR{e.alloc(orderSize, lw, false), e.alloc(orderSize, lw, false)}
	fill(src[0].Bytes(), 61)
	fill(src[1].Bytes(), 62)
	dst := e.peerBuf(orderSize, lw|rw)
	for i := uint64(0); i < orderRounds; i++ {
		s := src[i%2]
		e.must(e.b.PostRecv(i, nil), "peer post_recv")
		e.must(e.a.PostWrite(2*i, s.Bytes(), s, 0, dst.Addr, dst.RKey), "post_write")
		e.must(e.a.PostSend(2*i+1, nil, nil, rdma.FlagSignaled), "post_send")
		wc, sum, err := e.b.RecvCompSum(compWait, dst, 0, orderSize)
		e.must(err, "peer GetRecvComp")
		e.expect(wc, i, rdma.OpRecv, rdma.StatusSuccess)
		if sum != checksum(s.Bytes()) {
			e.fatalf("round %d: the send's receive completed before the earlier write's data was in place", i)
		}
		e.expectSend(2*i+1, rdma.OpSend, rdma.StatusSuccess)
	}
}

// caseOrderingFromPeer is the same with the peer writing and sending and
// the test side checking its memory at once on the receive completion.
func caseOrderingFromPeer(e *env) {
	src := [2]rbuf{e.peerBuf(orderSize, lw), e.peerBuf(orderSize, lw)}
	e.must(e.b.Fill(src[0], 0, orderSize, 71), "peer fill")
	e.must(e.b.Fill(src[1], 0, orderSize, 72), "peer fill")
	want := [2]uint32{checksum(pattern(orderSize, 71)), checksum(pattern(orderSize, 72))}
	dst := e.alloc(orderSize, lw|rw, false)
	for i := uint64(0); i < orderRounds; i++ {
		e.must(e.a.PostRecv(i, nil, nil), "post_recv")
		e.must(e.b.Post(
			postReq{Op: "write", WRID: 2 * i, Segs: []seg{{src[i%2].ID, 0, orderSize}}, RAddr: dst.Addr(), RKey: dst.RKey()},
			postReq{Op: "send", WRID: 2*i + 1, Flags: rdma.FlagSignaled},
		), "peer posts")
		e.expect(e.recvComp(), i, rdma.OpRecv, rdma.StatusSuccess)
		if checksum(dst.Bytes()) != want[i%2] {
			e.fatalf("round %d: the send's receive completed before the earlier write's data was in place", i)
		}
		e.expect(e.peerSendComp(), 2*i+1, rdma.OpSend, rdma.StatusSuccess)
	}
}
