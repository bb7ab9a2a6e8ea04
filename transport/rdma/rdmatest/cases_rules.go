package rdmatest

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

func rnrForever(c *rdma.Config) { c.RNRRetry = -1 }
func rnrShort(c *rdma.Config)   { c.RNRRetry, c.RNRTimer = 2, 5*time.Millisecond }

// rnrPatient gives a late receiver a second (20 retries 50ms apart), so a
// loaded machine does not fail rnr-in-time, which posts after 75ms.
func rnrPatient(c *rdma.Config) { c.RNRRetry, c.RNRTimer = 20, 50*time.Millisecond }

// badKey is an rkey the peer did not hand out (barring a 2^-32 accident).
func badKey(k uint32) uint32 { return k ^ 0x5a5a5a5a }

func (e *env) wantErr(err, want error, what string) {
	e.t.Helper()
	if !errors.Is(err, want) {
		e.fatalf("%s: got error %v, want %v", what, err, want)
	}
}

func caseRegister(e *env) {
	buf := make([]byte, 1000)
	mr, err := e.dev.Register(buf, lw|rr)
	e.must(err, "register")
	if mr.Addr() != rdma.AddrOf(buf) || mr.Len() != len(buf) || &mr.Bytes()[0] != &buf[0] {
		e.fatalf("Register: MR %#x+%d does not describe the buffer %#x+%d", mr.Addr(), mr.Len(), rdma.AddrOf(buf), len(buf))
	}
	al := e.alloc(5000, lw, false)
	if al.Len() != 5000 || al.Addr()%uint64(os.Getpagesize()) != 0 {
		e.fatalf("Alloc(5000): MR %#x+%d, want page-aligned and 5000 bytes", al.Addr(), al.Len())
	}
	if al.RKey() == mr.RKey() {
		e.fatalf("two regions share rkey %#x", mr.RKey())
	}
	for _, c := range []struct {
		name string
		reg  func([]byte) (*rdma.MR, error)
		want rdma.Access
	}{{"RegMsgs", e.a.RegMsgs, lw}, {"RegWrite", e.a.RegWrite, lw | rw}, {"RegRead", e.a.RegRead, lw | rr}} {
		m, err := c.reg(make([]byte, 64))
		e.must(err, c.name)
		if m.Access() != c.want {
			e.fatalf("%s: access %v, want %v", c.name, m.Access(), c.want)
		}
		e.must(m.Deregister(), c.name+" deregister")
	}
	e.must(mr.Deregister(), "deregister")
	if err := mr.Deregister(); err == nil {
		e.fatalf("second Deregister succeeded")
	}
	// A region from RegWrite takes the peer's writes.
	dst, err := e.a.RegWrite(make([]byte, 4096))
	e.must(err, "RegWrite")
	src := e.peerBuf(4096, lw)
	e.must(e.b.Fill(src, 0, 4096, 3), "peer fill")
	e.must(e.a.PostRecv(1, nil, nil), "post_recv")
	e.must(e.b.Post(
		postReq{Op: "write", Segs: []seg{{src.ID, 0, 4096}}, RAddr: dst.Addr(), RKey: dst.RKey()},
		postReq{Op: "send", WRID: 1, Flags: rdma.FlagSignaled}), "peer posts")
	e.expect(e.recvComp(), 1, rdma.OpRecv, rdma.StatusSuccess)
	if checksum(dst.Bytes()) != checksum(pattern(4096, 3)) {
		e.fatalf("RegWrite region: the peer's write is not there")
	}
	e.expect(e.peerSendComp(), 1, rdma.OpSend, rdma.StatusSuccess)
}

// caseLocalChecks: requests whose local buffers break the rules fail at
// post time, produce no completion, and leave the conn usable.
func caseLocalChecks(e *env) {
	src := e.alloc(4096, lw, false)
	dst := e.peerBuf(4096, lw|rw|rr)
	plain := make([]byte, 64)
	e.wantErr(e.a.PostSend(1, plain, nil, rdma.FlagSignaled), rdma.ErrNotRegistered, "send from unregistered memory")
	e.wantErr(e.a.PostSend(1, plain, src, rdma.FlagSignaled), rdma.ErrNotRegistered, "send from a buffer outside its MR")
	e.wantErr(e.a.PostWrite(1, plain, nil, rdma.FlagSignaled, dst.Addr, dst.RKey), rdma.ErrNotRegistered, "write from unregistered memory")
	e.wantErr(e.a.PostSendv(1, []rdma.SGE{{Buf: src.Bytes()[:8], MR: src}, {Buf: plain}}, rdma.FlagSignaled),
		rdma.ErrNotRegistered, "sendv with an unregistered entry")
	dev2, err := rdma.OpenConfig(e.opts.Provider, e.cfg)
	e.must(err, "open a second device")
	defer dev2.Close()
	other, err := dev2.Alloc(4096, lw|rw)
	e.must(err, "alloc on the second device")
	e.wantErr(e.a.PostWrite(1, other.Bytes(), other, rdma.FlagSignaled, dst.Addr, dst.RKey), rdma.ErrNotRegistered, "write from another device's MR")
	ro, err := e.dev.Register(make([]byte, 64), rr)
	e.must(err, "register without local write")
	e.wantErr(e.a.PostRecv(1, ro.Bytes(), ro), rdma.ErrAccess, "receive into a region without local write")
	e.wantErr(e.a.PostRead(1, ro.Bytes(), ro, rdma.FlagSignaled, dst.Addr, dst.RKey), rdma.ErrAccess, "read into a region without local write")
	gone := e.alloc(64, lw, true)
	e.must(gone.Deregister(), "deregister")
	e.wantErr(e.a.PostSend(1, gone.Bytes(), gone, rdma.FlagSignaled), rdma.ErrNotRegistered, "send from a deregistered MR")
	e.noSendComp(50 * time.Millisecond)
	if err := e.a.Err(); err != nil {
		e.fatalf("post-time errors moved the conn to the error state: %v", err)
	}
	e.fence(2)
}

// caseInline: FlagInline within MaxInline needs no MR and copies at post
// time; beyond MaxInline it is refused.
func caseInline(e *env) {
	maxIn := e.a.MaxInline()
	if maxIn <= 0 {
		e.t.Log("MaxInline is 0: checking only that inline requests are refused")
		if err := e.a.PostSend(1, make([]byte, 1), nil, rdma.FlagInline|rdma.FlagSignaled); err == nil {
			e.fatalf("inline send accepted with MaxInline 0")
		}
		return
	}
	payload := pattern(maxIn, 81)
	buf := append([]byte(nil), payload...)
	rb := e.peerBuf(maxIn+guard, lw)
	e.must(e.b.PostRecv(1, []seg{{rb.ID, 0, rb.Len}}), "peer post_recv")
	e.must(e.a.PostSend(1, buf, nil, rdma.FlagInline|rdma.FlagSignaled), "inline send of MaxInline bytes")
	clear(buf) // the payload was copied at post time
	wc := e.peerRecvComp()
	e.expect(wc, 1, rdma.OpRecv, rdma.StatusSuccess)
	if wc.ByteLen != maxIn {
		e.fatalf("inline send: ByteLen %d, want %d", wc.ByteLen, maxIn)
	}
	e.expectSend(1, rdma.OpSend, rdma.StatusSuccess)
	e.peerSum(rb, 0, payload, "inline send")

	n := min(maxIn, 64)
	wpay := pattern(n, 82)
	wbuf := append([]byte(nil), wpay...)
	dst := e.peerBuf(n, lw|rw)
	e.must(e.a.PostWrite(2, wbuf, nil, rdma.FlagInline|rdma.FlagSignaled, dst.Addr, dst.RKey), "inline write")
	clear(wbuf)
	e.expectSend(2, rdma.OpWrite, rdma.StatusSuccess)
	e.fence(3)
	e.peerSum(dst, 0, wpay, "inline write")

	err := e.a.PostSend(4, make([]byte, maxIn+1), nil, rdma.FlagInline|rdma.FlagSignaled)
	if !errors.Is(err, rdma.ErrInvalid) && !errors.Is(err, rdma.ErrNotRegistered) {
		e.fatalf("inline send of MaxInline+1 unregistered bytes: got %v, want ErrInvalid or ErrNotRegistered", err)
	}
	e.fence(5)
}

// caseDeregisterBusy: a region used by an outstanding request (a posted
// receive; a send waiting for a receive) cannot be deregistered.
func caseDeregisterBusy(e *env) {
	rb := e.peerBuf(128, lw)
	e.must(e.b.PostRecv(1, []seg{{rb.ID, 0, 128}}), "peer post_recv")
	e.wantErr(e.b.Deregister(rb), rdma.ErrBusy, "peer: deregister a region with a posted receive")
	src := e.alloc(64, lw, true)
	e.must(e.a.PostSend(1, src.Bytes(), src, rdma.FlagSignaled), "post_send")
	e.expectSend(1, rdma.OpSend, rdma.StatusSuccess)
	e.expect(e.peerRecvComp(), 1, rdma.OpRecv, rdma.StatusSuccess)
	e.must(e.b.Deregister(rb), "peer: deregister after the receive completed")

	// Several receives in one region, and in two regions interleaved: each
	// region is busy until its last receive has completed (a provider may
	// count them together: shm holds one reference per region).
	rx, ry := e.peerBuf(3*64, lw), e.peerBuf(64, lw)
	for i, r := range []struct {
		b   rbuf
		off int
	}{{rx, 0}, {ry, 0}, {rx, 64}, {rx, 128}} {
		e.must(e.b.PostRecv(uint64(10+i), []seg{{r.b.ID, r.off, 64}}), "peer post_recv")
	}
	for i := range 4 {
		e.must(e.a.PostSend(uint64(10+i), src.Bytes(), src, rdma.FlagSignaled), "post_send")
		e.expectSend(uint64(10+i), rdma.OpSend, rdma.StatusSuccess)
		e.expect(e.peerRecvComp(), uint64(10+i), rdma.OpRecv, rdma.StatusSuccess)
		switch i {
		case 0:
			e.wantErr(e.b.Deregister(rx), rdma.ErrBusy, "peer: deregister a region with two receives still posted")
		case 1:
			e.must(e.b.Deregister(ry), "peer: deregister the second region after its only receive completed")
		case 2:
			e.wantErr(e.b.Deregister(rx), rdma.ErrBusy, "peer: deregister a region with one receive still posted")
		}
	}
	e.must(e.b.Deregister(rx), "peer: deregister after its last receive completed")

	src2 := e.alloc(64, lw, false)
	e.must(e.a.PostSend(2, src2.Bytes(), src2, rdma.FlagSignaled), "post_send (no receive posted)")
	e.wantErr(src2.Deregister(), rdma.ErrBusy, "deregister the region of an outstanding send")
	rb2 := e.peerBuf(128, lw)
	e.must(e.b.PostRecv(2, []seg{{rb2.ID, 0, 128}}), "peer post_recv")
	e.expectSend(2, rdma.OpSend, rdma.StatusSuccess)
	e.must(src2.Deregister(), "deregister after the send completed")
}

// caseUnsignaled: successful unsignaled requests produce no completion.
func caseUnsignaled(e *env) {
	const n, sz = 10, 64
	src := e.alloc((n+1)*sz, lw, false)
	fill(src.Bytes(), 7)
	dst := e.peerBuf((n+1)*sz, lw|rw)
	for i := 0; i <= n; i++ {
		f := rdma.Flags(0)
		if i == n {
			f = rdma.FlagSignaled
		}
		e.must(e.a.PostWrite(uint64(i), src.Bytes()[i*sz:(i+1)*sz], src, f, dst.Addr+uint64(i*sz), dst.RKey), "post_write")
	}
	e.expectSend(n, rdma.OpWrite, rdma.StatusSuccess)
	rb := e.peerBuf(5*sz, lw)
	for i := 0; i < 5; i++ {
		e.must(e.b.PostRecv(uint64(i), []seg{{rb.ID, i * sz, sz}}), "peer post_recv")
	}
	for i := 0; i < 5; i++ {
		e.must(e.a.PostSend(uint64(100+i), src.Bytes()[i*sz:(i+1)*sz], src, 0), "unsignaled send")
	}
	for i := 0; i < 5; i++ {
		e.expect(e.peerRecvComp(), uint64(i), rdma.OpRecv, rdma.StatusSuccess)
	}
	e.noSendComp(100 * time.Millisecond)
	e.peerSum(dst, 0, src.Bytes(), "unsignaled writes")
	e.peerSum(rb, 0, src.Bytes()[:5*sz], "unsignaled sends")
}

// caseUnsignaledFailure: an unsignaled request that fails completes.
func caseUnsignaledFailure(e *env) {
	src := e.alloc(64, lw, false)
	dst := e.peerBuf(64, lw|rw)
	e.must(e.a.PostWrite(1, src.Bytes(), src, 0, dst.Addr, badKey(dst.RKey)), "post_write")
	e.expect(e.sendComp(), 1, rdma.OpWrite, rdma.StatusRemoteAccessError)
	e.stateErr("unsignaled write with a bad rkey")
}

// caseErrorState: after a failed request every later request, signaled
// or not, and every posted receive completes flushed, in order.
func caseErrorState(e *env) {
	rbuf := e.alloc(128, lw, false)
	e.must(e.a.PostRecv(100, rbuf.Bytes()[:64], rbuf), "post_recv")
	e.must(e.a.PostRecv(101, rbuf.Bytes()[64:], rbuf), "post_recv")
	src := e.alloc(64, lw, false)
	dst := e.peerBuf(64, lw|rw|rr)
	e.must(e.b.PostRecv(1, []seg{{dst.ID, 0, 64}}), "peer post_recv")
	e.must(e.a.PostWrite(1, src.Bytes(), src, rdma.FlagSignaled, dst.Addr, badKey(dst.RKey)), "post_write")
	e.must(e.a.PostWrite(2, src.Bytes(), src, rdma.FlagSignaled, dst.Addr, dst.RKey), "post_write")
	e.must(e.a.PostSend(3, src.Bytes(), src, rdma.FlagSignaled), "post_send")
	e.must(e.a.PostRead(4, src.Bytes(), src, rdma.FlagSignaled, dst.Addr, dst.RKey), "post_read")
	e.expect(e.sendComp(), 1, rdma.OpWrite, rdma.StatusRemoteAccessError)
	for w := uint64(2); w <= 4; w++ {
		e.expect(e.sendComp(), w, 0, rdma.StatusFlushed)
	}
	e.stateErr("after a remote access error")
	e.must(e.a.PostWrite(5, src.Bytes(), src, 0, dst.Addr, dst.RKey), "unsignaled write in the error state")
	e.expect(e.sendComp(), 5, 0, rdma.StatusFlushed)
	e.expect(e.recvComp(), 100, 0, rdma.StatusFlushed)
	e.expect(e.recvComp(), 101, 0, rdma.StatusFlushed)
	if err := e.a.PostRecv(102, rbuf.Bytes()[:64], rbuf); err == nil {
		e.expect(e.recvComp(), 102, 0, rdma.StatusFlushed)
	}
}

func caseRNRExceeded(e *env) {
	src := e.alloc(64, lw, false)
	start := time.Now()
	e.must(e.a.PostSend(1, src.Bytes(), src, rdma.FlagSignaled), "post_send")
	e.expect(e.sendComp(), 1, rdma.OpSend, rdma.StatusRNRRetryExceeded)
	if d := time.Since(start); d < e.cfg.RNRTimer {
		e.fatalf("RNR retries exhausted after %v, less than one RNRTimer (%v)", d, e.cfg.RNRTimer)
	}
	e.stateErr("after RNR retries exceeded")
	rb := e.peerBuf(64, lw)
	e.must(e.b.PostRecv(1, []seg{{rb.ID, 0, 64}}), "peer post_recv")
	e.must(e.a.PostSend(2, src.Bytes(), src, rdma.FlagSignaled), "post_send in the error state")
	e.expect(e.sendComp(), 2, 0, rdma.StatusFlushed)
}

func caseRNRWriteImm(e *env) {
	src := e.alloc(64, lw, false)
	dst := e.peerBuf(64, lw|rw)
	e.must(e.a.PostWriteImm(1, src.Bytes(), src, rdma.FlagSignaled, dst.Addr, dst.RKey, 5), "post_write_imm")
	e.expect(e.sendComp(), 1, rdma.OpWrite, rdma.StatusRNRRetryExceeded)
	e.stateErr("write-with-immediate without a receive")
}

// caseRNRInTime: a receive posted while the sender is retrying is found.
func caseRNRInTime(e *env) {
	src := e.alloc(64, lw, false)
	fill(src.Bytes(), 8)
	e.must(e.a.PostSend(1, src.Bytes(), src, rdma.FlagSignaled), "post_send")
	time.Sleep(e.cfg.RNRTimer * 3 / 2)
	rb := e.peerBuf(64, lw)
	e.must(e.b.PostRecv(1, []seg{{rb.ID, 0, 64}}), "peer post_recv")
	e.expectSend(1, rdma.OpSend, rdma.StatusSuccess)
	e.expect(e.peerRecvComp(), 1, rdma.OpRecv, rdma.StatusSuccess)
	e.peerSum(rb, 0, src.Bytes(), "late receive")
	if err := e.a.Err(); err != nil {
		e.fatalf("Conn.Err after a recovered RNR: %v", err)
	}
}

// caseRecvTooSmall: the receiver gets StatusLocalLengthError and enters
// the error state (its next receive is flushed); the sender's request
// fails with some non-success status.
func caseRecvTooSmall(e *env) {
	rb := e.peerBuf(64, lw)
	e.must(e.b.PostRecv(1, []seg{{rb.ID, 0, 16}}), "peer post_recv")
	e.must(e.b.PostRecv(2, []seg{{rb.ID, 16, 48}}), "peer post_recv")
	src := e.alloc(64, lw, false)
	e.must(e.a.PostSend(1, src.Bytes(), src, rdma.FlagSignaled), "post_send")
	e.expect(e.peerRecvComp(), 1, rdma.OpRecv, rdma.StatusLocalLengthError)
	e.expect(e.peerRecvComp(), 2, rdma.OpRecv, rdma.StatusFlushed)
	cerr, err := e.b.ConnErr()
	e.must(err, "peer Conn.Err")
	if cerr == nil {
		e.fatalf("receiver: Conn.Err is nil after a local length error")
	}
	if wc := e.sendComp(); wc.WRID != 1 || wc.Status == rdma.StatusSuccess {
		e.fatalf("sender: completion %+v, want wrid 1 failed", wc)
	}
}

// drain reads completions until the error that says none can come,
// checking each is flushed; it returns their wrids.
func (e *env) drain(get func(context.Context) (rdma.WC, error), what string) []uint64 {
	e.t.Helper()
	var wrids []uint64
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(e.ctx, compWait)
		wc, err := get(ctx)
		cancel()
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				e.fatalf("%s: no error within %v once drained", what, compWait)
			}
			return wrids
		}
		if wc.Status != rdma.StatusFlushed || i > 100 {
			e.fatalf("%s: completion %+v, want flushed", what, wc)
		}
		wrids = append(wrids, wc.WRID)
	}
}

func caseClosedPosts(e *env) {
	rb := e.alloc(192, lw, false)
	for i := 0; i < 3; i++ {
		e.must(e.a.PostRecv(uint64(i+1), rb.Bytes()[i*64:(i+1)*64], rb), "post_recv")
	}
	src := e.alloc(64, lw, false)
	e.must(e.a.PostSend(10, src.Bytes(), src, rdma.FlagSignaled), "post_send (no receive posted)")
	e.must(e.a.Close(), "close")
	if got := e.drain(e.a.GetSendComp, "send queue after Close"); len(got) != 1 || got[0] != 10 {
		e.fatalf("send queue after Close: flushed wrids %v, want [10]", got)
	}
	if got := e.drain(e.a.GetRecvComp, "receive queue after Close"); len(got) != 3 || got[0] != 1 || got[2] != 3 {
		e.fatalf("receive queue after Close: flushed wrids %v, want [1 2 3]", got)
	}
	dst := e.peerBuf(64, lw|rw|rr)
	sgl := []rdma.SGE{{Buf: src.Bytes(), MR: src}}
	for name, err := range map[string]error{
		"post_send":      e.a.PostSend(1, src.Bytes(), src, rdma.FlagSignaled),
		"post_sendv":     e.a.PostSendv(1, sgl, rdma.FlagSignaled),
		"post_recv":      e.a.PostRecv(1, src.Bytes(), src),
		"post_recvv":     e.a.PostRecvv(1, sgl),
		"post_write":     e.a.PostWrite(1, src.Bytes(), src, rdma.FlagSignaled, dst.Addr, dst.RKey),
		"post_writev":    e.a.PostWritev(1, sgl, rdma.FlagSignaled, dst.Addr, dst.RKey),
		"post_write_imm": e.a.PostWriteImm(1, src.Bytes(), src, rdma.FlagSignaled, dst.Addr, dst.RKey, 1),
		"post_read":      e.a.PostRead(1, src.Bytes(), src, rdma.FlagSignaled, dst.Addr, dst.RKey),
		"post_readv":     e.a.PostReadv(1, sgl, rdma.FlagSignaled, dst.Addr, dst.RKey),
	} {
		e.wantErr(err, rdma.ErrClosed, name+" after Close")
	}
}

// casePeerClosed: when the test side closes, the peer's receives flush,
// its completion calls then fail, and its later posts fail.
func casePeerClosed(e *env) {
	e.fence(3)
	rb := e.peerBuf(128, lw)
	e.must(e.b.PostRecv(1, []seg{{rb.ID, 0, 64}}), "peer post_recv")
	e.must(e.b.PostRecv(2, []seg{{rb.ID, 64, 64}}), "peer post_recv")
	e.must(e.a.Close(), "close")
	for i := 0; ; i++ {
		wc, err := e.b.RecvComp(compWait)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				e.fatalf("peer: GetRecvComp did not fail within %v after its peer closed", compWait)
			}
			break
		}
		if wc.Status != rdma.StatusFlushed || i > 10 {
			e.fatalf("peer: completion %+v after its peer closed, want flushed", wc)
		}
	}
	if _, err := e.b.SendComp(compWait); err == nil || errors.Is(err, context.DeadlineExceeded) {
		e.fatalf("peer: GetSendComp after its peer closed: %v, want an error at once", err)
	}
	// A later post fails at once or completes unsuccessfully (an RC queue
	// pair after a disconnect accepts posts and flushes them).
	if err := e.b.Post(postReq{Op: "send", WRID: 4, Segs: []seg{{rb.ID, 0, 8}}, Flags: rdma.FlagSignaled}); err == nil {
		if wc, err := e.b.SendComp(compWait); errors.Is(err, context.DeadlineExceeded) || (err == nil && wc.Status == rdma.StatusSuccess) {
			e.fatalf("peer: post_send after its peer closed neither failed nor completed unsuccessfully (%+v, %v)", wc, err)
		}
	}
	if err := e.b.PostRecv(5, []seg{{rb.ID, 0, 8}}); err == nil {
		if wc, err := e.b.RecvComp(compWait); errors.Is(err, context.DeadlineExceeded) || (err == nil && wc.Status == rdma.StatusSuccess) {
			e.fatalf("peer: post_recv after its peer closed neither failed nor completed unsuccessfully (%+v, %v)", wc, err)
		}
	}
}

func caseDialRefused(e *env) {
	ln, err := e.dev.Listen(e.ctx, e.opts.listenAddr())
	e.must(err, "listen")
	addr := ln.Addr().String()
	e.must(ln.Close(), "close listener")
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	c, err := e.dev.Dial(ctx, addr)
	if err == nil {
		c.Close()
		e.fatalf("dial %s after its listener closed succeeded", addr)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		e.fatalf("dial %s after its listener closed: no answer within 10s", addr)
	}
}

type remoteAccessCase struct {
	name   string
	access rdma.Access // of the peer's region
	op     string      // "write", "read", "writeimm"
	off    int         // from the region's start
	n      int
	badKey bool
	dereg  bool
}

var remoteAccessCases = []remoteAccessCase{
	{name: "write-wrong-rkey", access: lw | rw, op: "write", n: 64, badKey: true},
	{name: "read-wrong-rkey", access: lw | rr, op: "read", n: 64, badKey: true},
	{name: "write-past-end", access: lw | rw, op: "write", off: 4096 - 32, n: 64},
	{name: "write-before-start", access: lw | rw, op: "write", off: -1, n: 64},
	{name: "read-past-end", access: lw | rr, op: "read", off: 4096 - 32, n: 64},
	{name: "write-read-only", access: lw | rr, op: "write", n: 64},
	{name: "write-local-only", access: lw, op: "write", n: 64},
	{name: "read-write-only", access: lw | rw, op: "read", n: 64},
	{name: "writeimm-read-only", access: lw | rr, op: "writeimm", n: 64},
	{name: "write-deregistered", access: lw | rw, op: "write", n: 64, dereg: true},
}

// caseRemoteAccess: a request the target must refuse completes with
// StatusRemoteAccessError, the conn enters the error state, and the
// target's memory is untouched.
func caseRemoteAccess(e *env, c remoteAccessCase) {
	b := e.peerBuf(4096, c.access)
	e.must(e.b.Fill(b, 0, 4096, 91), "peer fill")
	if c.dereg {
		e.must(e.b.Deregister(b), "peer deregister")
	}
	if c.op == "writeimm" {
		e.must(e.b.PostRecv(1, nil), "peer post_recv")
	}
	src := e.alloc(c.n, lw, false)
	fill(src.Bytes(), 92)
	addr, key := b.Addr+uint64(c.off), b.RKey
	if c.off < 0 {
		addr = b.Addr - uint64(-c.off)
	}
	if c.badKey {
		key = badKey(key)
	}
	var err error
	switch c.op {
	case "write":
		err = e.a.PostWrite(1, src.Bytes(), src, rdma.FlagSignaled, addr, key)
	case "read":
		err = e.a.PostRead(1, src.Bytes(), src, rdma.FlagSignaled, addr, key)
	case "writeimm":
		err = e.a.PostWriteImm(1, src.Bytes(), src, rdma.FlagSignaled, addr, key, 1)
	}
	e.must(err, "post_"+c.op)
	e.expect(e.sendComp(), 1, 0, rdma.StatusRemoteAccessError)
	e.stateErr(c.name)
	e.must(e.a.PostSend(2, nil, nil, rdma.FlagSignaled), "post_send in the error state")
	e.expect(e.sendComp(), 2, 0, rdma.StatusFlushed)
	if !c.dereg {
		e.peerSum(b, 0, pattern(4096, 91), "target region after a refused request")
	}
}
