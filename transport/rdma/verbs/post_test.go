//go:build linux && cgo && rdma

package verbs

import (
	"bytes"
	"errors"
	"strings"
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

// TestReadSGELimit: a read's local scatter list is held to the device's
// max_sge_rd, every other list to max_sge; beyond it the post fails with
// ErrInvalid, saying which limit. rxe reports 32 for both, so the read of
// max_sge_rd+1 entries is refused either way; on a device whose
// max_sge_rd is below max_sge (iWARP devices read into one entry) the
// provider checked reads against max_sge and handed the device a request
// it cannot execute. The second half gives the device such a limit.
func TestReadSGELimit(t *testing.T) {
	d := openDev(t, rdma.Config{})
	dev := d.(*device)
	t.Logf("max_sge %d, max_sge_rd %d", dev.maxSGE, dev.maxRdSGE)
	readInto := func(cli rdma.Conn, local, remote *rdma.MR, entries int) error {
		sgl := make([]rdma.SGE, entries)
		for i := range sgl {
			sgl[i] = rdma.SGE{Buf: local.Bytes()[i*8 : i*8+8], MR: local}
		}
		return cli.PostReadv(uint64(entries), sgl, rdma.FlagSignaled, remote.Addr(), remote.RKey())
	}
	check := func(d rdma.Device, limit int) {
		t.Helper()
		cli, _ := pair(t, d)
		ctx := ctxT(t)
		local, _ := d.Alloc(4096, rdma.AccessLocalWrite)
		remote, _ := d.Alloc(4096, rdma.AccessLocalWrite|rdma.AccessRemoteRead)
		for i := range remote.Bytes() {
			remote.Bytes()[i] = byte(i*7 + 1)
		}
		if err := readInto(cli, local, remote, limit); err != nil {
			t.Fatalf("read into %d entries (max_sge_rd): %v", limit, err)
		}
		wc, err := cli.GetSendComp(ctx)
		mustWC(t, wc, err, uint64(limit), rdma.OpRead)
		if !bytes.Equal(local.Bytes()[:limit*8], remote.Bytes()[:limit*8]) {
			t.Fatalf("read into %d entries: data differ", limit)
		}
		err = readInto(cli, local, remote, limit+1)
		if !errors.Is(err, rdma.ErrInvalid) || !strings.Contains(err.Error(), "max_sge_rd") {
			t.Fatalf("read into %d entries (max_sge_rd+1): %v; want ErrInvalid naming max_sge_rd", limit+1, err)
		}
		t.Logf("read into %d entries: %v", limit+1, err)
		if err := cli.Err(); err != nil {
			t.Fatalf("the refused read moved the conn to the error state: %v", err)
		}
	}
	check(d, dev.maxRdSGE)

	// A device whose reads take fewer entries than its other requests:
	// a write of as many entries as the refused read still goes.
	low := openDev(t, rdma.Config{})
	low.(*device).maxRdSGE = 2
	check(low, 2)
	cli, _ := pair(t, low)
	src, _ := low.Alloc(64, rdma.AccessLocalWrite)
	dst, _ := low.Alloc(64, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	sgl := []rdma.SGE{{Buf: src.Bytes()[:8], MR: src}, {Buf: src.Bytes()[8:16], MR: src}, {Buf: src.Bytes()[16:24], MR: src}}
	if err := cli.PostWritev(9, sgl, rdma.FlagSignaled, dst.Addr(), dst.RKey()); err != nil {
		t.Fatalf("write of 3 entries where reads take 2: %v", err)
	}
	wc, err := cli.GetSendComp(ctxT(t))
	mustWC(t, wc, err, 9, rdma.OpWrite)
}
