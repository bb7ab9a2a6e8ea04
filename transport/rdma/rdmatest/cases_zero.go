package rdmatest

import (
	"errors"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// caseZeroLengthRegions: no provider registers an empty region. Register
// and RegMsgs/RegWrite/RegRead of an empty buffer, and Alloc of zero or
// fewer bytes, fail with rdma.ErrInvalid in an *rdma.OpError, because
// ibv_reg_mr refuses a zero length on real hardware and a program that
// relied on it elsewhere would fail only there. A zero-byte transfer needs
// no region: a send and a write-with-immediate of nil with a nil MR
// complete with ByteLen 0.
func caseZeroLengthRegions(e *env) {
	backing := make([]byte, 64)
	for _, c := range []struct {
		name string
		reg  func() (*rdma.MR, error)
	}{
		{"Register(nil)", func() (*rdma.MR, error) { return e.dev.Register(nil, lw) }},
		{"Register(buf[:0])", func() (*rdma.MR, error) { return e.dev.Register(backing[:0], lw|rw) }},
		{"Register(buf[len:])", func() (*rdma.MR, error) { return e.dev.Register(backing[64:], lw|rr) }},
		{"Alloc(0)", func() (*rdma.MR, error) { return e.dev.Alloc(0, lw) }},
		{"Alloc(-1)", func() (*rdma.MR, error) { return e.dev.Alloc(-1, lw) }},
		{"RegMsgs(nil)", func() (*rdma.MR, error) { return e.a.RegMsgs(nil) }},
		{"RegWrite(buf[:0])", func() (*rdma.MR, error) { return e.a.RegWrite(backing[:0]) }},
		{"RegRead(buf[:0])", func() (*rdma.MR, error) { return e.a.RegRead(backing[:0]) }},
	} {
		mr, err := c.reg()
		if err == nil {
			e.fatalf("%s succeeded (MR %#x+%d); want rdma.ErrInvalid, as on verbs", c.name, mr.Addr(), mr.Len())
		}
		e.wantErr(err, rdma.ErrInvalid, c.name)
		var oe *rdma.OpError
		if !errors.As(err, &oe) || oe.Provider != e.dev.Name() {
			e.fatalf("%s: error %v is not an *rdma.OpError naming provider %s", c.name, err, e.dev.Name())
		}
	}

	dst := e.peerBuf(64, lw|rw)
	e.must(e.b.PostRecv(9, nil), "peer post_recv")
	e.must(e.a.PostWriteImm(1, nil, nil, rdma.FlagSignaled, dst.Addr, dst.RKey, 0x5eed), "zero-byte post_write_imm without an MR")
	wc := e.peerRecvComp()
	e.expect(wc, 9, rdma.OpRecvWriteImm, rdma.StatusSuccess)
	if !wc.HasImm || wc.Imm != 0x5eed || wc.ByteLen != 0 {
		e.fatalf("zero-byte write-imm receive %+v: want HasImm, Imm 0x5eed, ByteLen 0", wc)
	}
	e.expectSend(1, rdma.OpWrite, rdma.StatusSuccess)

	e.must(e.b.PostRecv(10, nil), "peer post_recv")
	e.must(e.a.PostSend(2, nil, nil, rdma.FlagSignaled), "zero-byte post_send without an MR")
	wc = e.peerRecvComp()
	e.expect(wc, 10, rdma.OpRecv, rdma.StatusSuccess)
	if wc.ByteLen != 0 {
		e.fatalf("zero-byte send received as %+v", wc)
	}
	e.expectSend(2, rdma.OpSend, rdma.StatusSuccess)
}
