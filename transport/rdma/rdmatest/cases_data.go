package rdmatest

import (
	"bytes"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

const (
	lw = rdma.AccessLocalWrite
	rw = rdma.AccessRemoteWrite
	rr = rdma.AccessRemoteRead
)

// guard is the margin around a remote range that must stay untouched.
const guard = 32

// payload returns an n-byte buffer at the start of a fresh region of at
// least one byte (some providers refuse empty registrations).
func (e *env) payload(n int, access rdma.Access) (*rdma.MR, []byte) {
	e.t.Helper()
	mr := e.alloc(max(n, 1), access, heapFor(n))
	return mr, mr.Bytes()[:n]
}

// heapFor alternates Go memory (Register) and mmap'd memory (Alloc) by
// size, so both kinds are covered; large buffers are always mmap'd.
func heapFor(n int) bool { return n%2 == 1 && n < 1<<20 }

// caseWrite writes n bytes into the middle of a peer region and checks the
// region, guards included, after a fence.
func caseWrite(e *env, n int) {
	src, sb := e.payload(n, lw)
	fill(sb, 11)
	dst := e.peerBuf(n+2*guard, lw|rw)
	e.must(e.b.Fill(dst, 0, dst.Len, 12), "peer fill")
	want := pattern(n+2*guard, 12)
	copy(want[guard:], sb)
	e.must(e.a.PostWrite(1, sb, src, rdma.FlagSignaled, dst.Addr+guard, dst.RKey), "post_write")
	e.expectSend(1, rdma.OpWrite, rdma.StatusSuccess)
	e.fence(2)
	e.peerSum(dst, 0, want, "write")
}

// caseRead reads n bytes from the middle of a peer region.
func caseRead(e *env, n int) {
	src := e.peerBuf(n+2*guard, lw|rr)
	e.must(e.b.Fill(src, 0, src.Len, 21), "peer fill")
	dst, db := e.payload(n, lw)
	e.must(e.a.PostRead(1, db, dst, rdma.FlagSignaled, src.Addr+guard, src.RKey), "post_read")
	e.expectSend(1, rdma.OpRead, rdma.StatusSuccess)
	if want := pattern(n+2*guard, 21)[guard : guard+n]; !bytes.Equal(db, want) {
		e.fatalf("read: local data differs from the peer's")
	}
}

// caseSend sends n bytes into a larger posted receive.
func caseSend(e *env, n int) {
	src, sb := e.payload(n, lw)
	fill(sb, 31)
	rb := e.peerBuf(n+guard, lw)
	e.must(e.b.PostRecv(7, []seg{{rb.ID, 0, rb.Len}}), "peer post_recv")
	e.must(e.a.PostSend(1, sb, src, rdma.FlagSignaled), "post_send")
	wc := e.peerRecvComp()
	e.expect(wc, 7, rdma.OpRecv, rdma.StatusSuccess)
	if wc.ByteLen != n || wc.HasImm {
		e.fatalf("receive completion %+v: want ByteLen %d, no immediate", wc, n)
	}
	e.expectSend(1, rdma.OpSend, rdma.StatusSuccess)
	e.peerSum(rb, 0, sb, "send")
}

// caseWriteImm writes n bytes with an immediate; the peer's receive
// completion carries it, and the data is in place by then.
func caseWriteImm(e *env, n int) {
	src, sb := e.payload(n, lw)
	fill(sb, 41)
	dst := e.peerBuf(n+guard, lw|rw)
	imm := uint32(0xdead0000) ^ uint32(n)
	e.must(e.b.PostRecv(9, nil), "peer post_recv")
	e.must(e.a.PostWriteImm(1, sb, src, rdma.FlagSignaled, dst.Addr, dst.RKey, imm), "post_write_imm")
	wc := e.peerRecvComp()
	e.expect(wc, 9, rdma.OpRecvWriteImm, rdma.StatusSuccess)
	if !wc.HasImm || wc.Imm != imm || wc.ByteLen != n {
		e.fatalf("write-imm receive completion %+v: want HasImm, Imm %#x, ByteLen %d", wc, imm, n)
	}
	e.expectSend(1, rdma.OpWrite, rdma.StatusSuccess)
	e.peerSum(dst, 0, sb, "write-imm")
}

// sglLens are the entry lengths of a k-entry list: uneven, none empty.
func sglLens(k int) []int {
	l := make([]int, k)
	for i := range l {
		l[i] = 1 + (i*131+k*17)%700
	}
	return l
}

// localSGL builds a k-entry list alternating between an mmap'd and a Go
// heap region, with gaps, and returns it with its concatenated bytes.
func (e *env) localSGL(k int, access rdma.Access, seed uint64) ([]rdma.SGE, []byte) {
	regions := [2]*rdma.MR{e.alloc(64<<10, access, false), e.alloc(64<<10, access, true)}
	fill(regions[0].Bytes(), seed)
	fill(regions[1].Bytes(), seed+1)
	var sgl []rdma.SGE
	var all []byte
	offs := [2]int{5, 9}
	for i, n := range sglLens(k) {
		r := regions[i%2]
		b := r.Bytes()[offs[i%2] : offs[i%2]+n]
		offs[i%2] += n + 3
		sgl = append(sgl, rdma.SGE{Buf: b, MR: r})
		all = append(all, b...)
	}
	return sgl, all
}

func caseWritev(e *env) {
	for k := 1; k <= 16; k++ {
		sgl, want := e.localSGL(k, lw, uint64(k))
		dst := e.peerBuf(len(want), lw|rw)
		e.must(e.a.PostWritev(uint64(k), sgl, rdma.FlagSignaled, dst.Addr, dst.RKey), "post_writev")
		e.expectSend(uint64(k), rdma.OpWrite, rdma.StatusSuccess)
		e.fence(100 + uint64(k))
		e.peerSum(dst, 0, want, "writev")
	}
}

func caseSendv(e *env) {
	for k := 1; k <= 16; k++ {
		sgl, want := e.localSGL(k, lw, uint64(k))
		rb := e.peerBuf(len(want)+guard, lw)
		e.must(e.b.PostRecv(uint64(k), []seg{{rb.ID, 0, rb.Len}}), "peer post_recv")
		e.must(e.a.PostSendv(uint64(k), sgl, rdma.FlagSignaled), "post_sendv")
		wc := e.peerRecvComp()
		e.expect(wc, uint64(k), rdma.OpRecv, rdma.StatusSuccess)
		if wc.ByteLen != len(want) {
			e.fatalf("sendv %d entries: ByteLen %d, want %d", k, wc.ByteLen, len(want))
		}
		e.expectSend(uint64(k), rdma.OpSend, rdma.StatusSuccess)
		e.peerSum(rb, 0, want, "sendv")
	}
}

func caseReadv(e *env) {
	for k := 1; k <= 16; k++ {
		sgl, _ := e.localSGL(k, lw, uint64(k))
		total := 0
		for _, s := range sgl {
			total += len(s.Buf)
		}
		src := e.peerBuf(total, lw|rr)
		e.must(e.b.Fill(src, 0, total, uint64(1000+k)), "peer fill")
		e.must(e.a.PostReadv(uint64(k), sgl, rdma.FlagSignaled, src.Addr, src.RKey), "post_readv")
		e.expectSend(uint64(k), rdma.OpRead, rdma.StatusSuccess)
		want := pattern(total, uint64(1000+k))
		for _, s := range sgl {
			if !bytes.Equal(s.Buf, want[:len(s.Buf)]) {
				e.fatalf("readv %d entries: scattered data differs", k)
			}
			want = want[len(s.Buf):]
		}
	}
}

func caseRecvv(e *env) {
	for k := 1; k <= 16; k++ {
		rb := e.peerBuf(16<<10, lw)
		var segs []seg
		total, off := 0, 3
		for _, n := range sglLens(k) {
			segs = append(segs, seg{rb.ID, off, n})
			total += n
			off += n + 5
		}
		src := e.alloc(total, lw, k%2 == 0)
		fill(src.Bytes(), uint64(k))
		e.must(e.b.PostRecv(uint64(k), segs), "peer post_recvv")
		e.must(e.a.PostSend(uint64(k), src.Bytes(), src, rdma.FlagSignaled), "post_send")
		wc := e.peerRecvComp()
		e.expect(wc, uint64(k), rdma.OpRecv, rdma.StatusSuccess)
		if wc.ByteLen != total {
			e.fatalf("recvv %d entries: ByteLen %d, want %d", k, wc.ByteLen, total)
		}
		e.expectSend(uint64(k), rdma.OpSend, rdma.StatusSuccess)
		rest := src.Bytes()
		for _, s := range segs {
			e.peerSum(rb, s.Off, rest[:s.Len], "recvv entry")
			rest = rest[s.Len:]
		}
	}
}

// outstanding is how many requests the many-outstanding cases keep in
// flight: 1000, or less if the configured queues are shallower.
func (e *env) outstanding() int {
	c := e.cfg.WithDefaults()
	return min(1000, c.SendQueueDepth-1, c.RecvQueueDepth-1)
}

func caseManyWrites(e *env) {
	n, sz := e.outstanding(), 64
	src := e.alloc(n*sz, lw, false)
	fill(src.Bytes(), 5)
	dst := e.peerBuf(n*sz, lw|rw)
	for i := 0; i < n; i++ {
		b := src.Bytes()[i*sz : (i+1)*sz]
		e.must(e.a.PostWrite(uint64(i), b, src, rdma.FlagSignaled, dst.Addr+uint64(i*sz), dst.RKey), "post_write")
	}
	for i := 0; i < n; i++ {
		e.expectSend(uint64(i), rdma.OpWrite, rdma.StatusSuccess)
	}
	e.fence(uint64(n))
	e.peerSum(dst, 0, src.Bytes(), "many writes")
}

func caseManySends(e *env) {
	n, sz := e.outstanding(), 32
	rb := e.peerBuf(n*sz, lw)
	for i := 0; i < n; i++ {
		e.must(e.b.PostRecv(uint64(i), []seg{{rb.ID, i * sz, sz}}), "peer post_recv")
	}
	src := e.alloc(n*sz, lw, true)
	fill(src.Bytes(), 6)
	for i := 0; i < n; i++ {
		e.must(e.a.PostSend(uint64(i), src.Bytes()[i*sz:(i+1)*sz], src, rdma.FlagSignaled), "post_send")
	}
	for i := 0; i < n; i++ {
		e.expect(e.peerRecvComp(), uint64(i), rdma.OpRecv, rdma.StatusSuccess)
	}
	for i := 0; i < n; i++ {
		e.expectSend(uint64(i), rdma.OpSend, rdma.StatusSuccess)
	}
	e.peerSum(rb, 0, src.Bytes(), "many sends")
}
