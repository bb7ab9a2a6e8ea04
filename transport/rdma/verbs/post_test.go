//go:build linux && cgo && rdma

package verbs

import (
	"errors"
	"testing"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// TestLongRequestRefused: a request longer than a message can be (maxMsg)
// fails at post time with ErrInvalid. ibv_sge and the work request hold
// 32-bit lengths: 32 entries of 128 MiB (one region, gathered 32 times)
// add up to 2^32, which the device took for 0 bytes and completed with
// success, having moved nothing.
func TestLongRequestRefused(t *testing.T) {
	d := openDev(t, rdma.Config{})
	cli, _ := pair(t, d)
	src, err := d.Alloc(128<<20, rdma.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := d.Alloc(4096, rdma.AccessLocalWrite|rdma.AccessRemoteWrite|rdma.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	sgl := make([]rdma.SGE, 32)
	for i := range sgl {
		sgl[i] = rdma.SGE{Buf: src.Bytes(), MR: src}
	}
	for _, p := range []struct {
		name string
		post func() error
	}{
		{"writev", func() error { return cli.PostWritev(1, sgl, rdma.FlagSignaled, dst.Addr(), dst.RKey()) }},
		{"readv", func() error { return cli.PostReadv(2, sgl, rdma.FlagSignaled, dst.Addr(), dst.RKey()) }},
		{"sendv", func() error { return cli.PostSendv(3, sgl, rdma.FlagSignaled) }},
	} {
		if err := p.post(); !errors.Is(err, rdma.ErrInvalid) {
			wc, werr := cli.GetSendComp(ctxT(t))
			t.Fatalf("%s of 32 x 128 MiB: post returned %v, want ErrInvalid (then completion %+v %v)", p.name, err, wc, werr)
		}
	}
	// The conn is usable.
	if err := cli.Err(); err != nil {
		t.Fatalf("refused posts moved the conn to the error state: %v", err)
	}
	if err := cli.PostWrite(4, src.Bytes()[:64], src, rdma.FlagSignaled, dst.Addr(), dst.RKey()); err != nil {
		t.Fatal(err)
	}
	wc, err := cli.GetSendComp(ctxT(t))
	mustWC(t, wc, err, 4, rdma.OpWrite)
}

// TestLongReceive: a receive longer than any message (maxMsg) takes
// messages as one of maxMsg bytes would. Its 32-bit lengths wrapped: 32
// entries of 128 MiB (2^32 bytes) became a receive of 0 bytes, and a
// 64-byte send failed it with a local length error (the conn in error).
// (rxe fails a receive of 16 such entries, 2^31 bytes, the same way.)
func TestLongReceive(t *testing.T) {
	d := openDev(t, rdma.Config{})
	cli, srv := pair(t, d)
	ctx := ctxT(t)
	rb, err := d.Alloc(128<<20, rdma.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	sgl := make([]rdma.SGE, 32)
	for i := range sgl {
		sgl[i] = rdma.SGE{Buf: rb.Bytes(), MR: rb}
	}
	if err := srv.PostRecvv(1, sgl); err != nil {
		t.Fatal(err)
	}
	msg := []byte("sixty-four bytes, or near enough, into a receive of four GiB....")
	if err := cli.PostSend(2, msg, nil, rdma.FlagInline|rdma.FlagSignaled); err != nil {
		t.Fatal(err)
	}
	wc, err := srv.GetRecvComp(ctx)
	if err != nil || wc.Status != rdma.StatusSuccess || wc.ByteLen != len(msg) {
		t.Fatalf("receive of 32 x 128 MiB: %+v %v (Conn.Err %v); want success, ByteLen %d", wc, err, srv.Err(), len(msg))
	}
	if string(rb.Bytes()[:len(msg)]) != string(msg) {
		t.Fatalf("received %q", rb.Bytes()[:len(msg)])
	}
	wc, err = cli.GetSendComp(ctx)
	mustWC(t, wc, err, 2, rdma.OpSend)
}
