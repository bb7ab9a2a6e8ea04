package tcp

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// The decoder fuzz target feeds arbitrary bytes, as a peer would send them,
// to the reader of a conn whose device has registered regions fenced by
// guard bytes. No input may crash it, write a guard byte, or write the
// region that only grants remote read.
//
// Inputs name regions symbolically so the fuzzer can reach valid requests:
// an rkey of 1 stands for the remote-write region and 2 for the
// remote-read region, and their addr fields are offsets from that region's
// start (wrapping), rewritten before the bytes reach the conn.

const (
	guardLen  = 64
	guardByte = 0xA5
	wLen      = 256 // remote write
	rLen      = 256 // remote read
	recvLen   = 128 // posted receives
	localLen  = 128 // destination of this end's own reads
)

type fuzzTarget struct {
	mem                   []byte
	w, r, recv, local     []byte
	wMR, rMR, recvMR, lMR *rdma.MR
	rBefore               []byte
	c                     *conn
}

func newFuzzTarget(t testing.TB, input []byte) *fuzzTarget {
	return newFuzzTargetConfig(t, input, false)
}

// newFuzzTargetConfig is newFuzzTarget with Config.Checksum set as given;
// with it, input is framed with CRCs already and used unpatched.
func newFuzzTargetConfig(t testing.TB, input []byte, checksum bool) *fuzzTarget {
	d := newDevice(rdma.Config{RNRRetry: 1, RNRTimer: time.Microsecond, SendQueueDepth: 16, RecvQueueDepth: 4, Checksum: checksum}.WithDefaults())
	ft := &fuzzTarget{mem: bytes.Repeat([]byte{guardByte}, 5*guardLen+wLen+rLen+recvLen+localLen)}
	off := guardLen
	cut := func(n int) []byte {
		b := ft.mem[off : off+n : off+n]
		clear(b)
		off += n + guardLen
		return b
	}
	ft.w, ft.r, ft.recv, ft.local = cut(wLen), cut(rLen), cut(recvLen), cut(localLen)
	for i := range ft.r {
		ft.r[i] = byte(i)
	}
	ft.rBefore = append([]byte(nil), ft.r...)
	ft.wMR = d.pd.Add(ft.w, rdma.AccessLocalWrite|rdma.AccessRemoteWrite, nil, nil)
	ft.rMR = d.pd.Add(ft.r, rdma.AccessRemoteRead, nil, nil)
	ft.recvMR = d.pd.Add(ft.recv, rdma.AccessLocalWrite, nil, nil)
	ft.lMR = d.pd.Add(ft.local, rdma.AccessLocalWrite, nil, nil)

	if !checksum {
		input = ft.patch(input)
	}
	ft.c = newConn(d, nil, bytes.NewReader(input), "fuzz")
	c := ft.c
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.PostRecv(100, ft.recv[:16], ft.recvMR))
	must(c.PostRecvv(101, []rdma.SGE{{Buf: ft.recv[16:20], MR: ft.recvMR}, {Buf: ft.recv[64:], MR: ft.recvMR}}))
	// This end's own requests, as if already on the wire, so responses
	// (ACK, NAK, read response) have something to complete.
	must(c.PostWrite(1, ft.local[:8], ft.lMR, rdma.FlagSignaled, 0x1000, 7))
	must(c.PostRead(2, ft.local[:32], ft.lMR, rdma.FlagSignaled, 0x2000, 7))
	must(c.PostReadv(3, []rdma.SGE{{Buf: ft.local[40:48], MR: ft.lMR}, {Buf: ft.local[100:], MR: ft.lMR}}, 0, 0x3000, 7))
	must(c.PostSend(4, []byte("hi"), nil, rdma.FlagInline))
	c.mu.Lock()
	c.takeRequests(nil)
	c.mu.Unlock()
	return ft
}

// serve runs the parser over the whole input, as read passes would. The
// input never runs dry, so parse stops only at an error or to wait for a
// receive; the wait is the RNR timer's (a microsecond here).
func (c *conn) serve() error {
	for {
		if err := c.parse(); err != nil {
			return err
		}
		if c.ps.state != psRNR {
			return fmt.Errorf("parse stopped in state %d", c.ps.state)
		}
		time.Sleep(time.Until(c.ps.retryAt))
	}
}

// patch rewrites the symbolic rkeys and addresses of each frame header and
// seals it again (its CRC): the fuzzer reaches past the CRC check, which
// checksum_test.go tests.
func (ft *fuzzTarget) patch(in []byte) []byte {
	out := append([]byte(nil), in...)
	for b := out; len(b) >= maxHdr; {
		var mr *rdma.MR
		switch binary.LittleEndian.Uint32(b[8:]) {
		case 1:
			mr = ft.wMR
		case 2:
			mr = ft.rMR
		}
		if mr != nil {
			binary.LittleEndian.PutUint32(b[8:], mr.RKey())
			binary.LittleEndian.PutUint64(b[24:], mr.Addr()+binary.LittleEndian.Uint64(b[24:]))
		}
		seal((*[maxHdr]byte)(b[:maxHdr]), binary.LittleEndian.Uint32(b[hdrLen:]))
		n := maxHdr
		if h := (header{op: b[0]}); h.hasPayload() {
			n += int(binary.LittleEndian.Uint32(b[12:]))
		}
		if n > len(b) {
			break
		}
		b = b[n:]
	}
	return out
}

func (ft *fuzzTarget) check(t *testing.T) {
	for i, v := range ft.mem {
		inside := false
		for _, r := range [][]byte{ft.w, ft.r, ft.recv, ft.local} {
			if p := rdma.AddrOf(ft.mem[i:]); p >= rdma.AddrOf(r) && p < rdma.AddrOf(r)+uint64(len(r)) {
				inside = true
			}
		}
		if !inside && v != guardByte {
			t.Fatalf("guard byte at %d overwritten", i)
		}
	}
	if !bytes.Equal(ft.r, ft.rBefore) {
		t.Fatal("remote-read-only region was written")
	}
	ft.close(t)
}

// close flushes the queues as the reap would (after the read side's exit
// dropped the payload in flight) and deregisters every
// region: a region still acquired means a request leaked its reference.
// (Regions must be deregistered: the PD pins them.)
func (ft *fuzzTarget) close(t *testing.T) {
	c := ft.c
	c.dropPayload()
	c.mu.Lock()
	c.flushSQ()
	c.flushRQ()
	c.mu.Unlock()
	for _, mr := range []*rdma.MR{ft.wMR, ft.rMR, ft.recvMR, ft.lMR} {
		if err := mr.Deregister(); err != nil {
			t.Fatalf("deregister after the stream ended: %v", err)
		}
	}
}

func frame(h header, payload []byte) []byte {
	if h.length == 0 && h.op != opReadReq {
		h.length = uint32(len(payload))
	}
	return append(sealed(h), payload...)
}

// sealed is h encoded as on the wire: with its header CRC (no payload CRC).
func sealed(h header) []byte {
	var b [maxHdr]byte
	h.encode(head(&b))
	seal(&b, 0)
	return b[:]
}

func cat(frames ...[]byte) []byte { return bytes.Join(frames, nil) }

func fuzzSeeds() [][]byte {
	p16 := bytes.Repeat([]byte{0x11}, 16)
	return [][]byte{
		frame(header{op: opWrite, rkey: 1, addr: 8, flags: fAck}, p16),
		cat(frame(header{op: opWrite, rkey: 1, addr: 250}, p16), frame(header{op: opSend, seq: 1}, p16)),
		frame(header{op: opWrite, rkey: 2, addr: 0}, p16),
		frame(header{op: opWrite, rkey: 99, addr: 0}, p16),
		cat(frame(header{op: opWriteImm, rkey: 1, imm: 5}, p16), frame(header{op: opWriteImm, rkey: 1, seq: 1}, p16),
			frame(header{op: opWriteImm, rkey: 1, seq: 2}, p16)),
		cat(frame(header{op: opSend}, p16), frame(header{op: opSend, seq: 1}, bytes.Repeat([]byte{1}, 70))),
		frame(header{op: opSend}, bytes.Repeat([]byte{2}, 40)),
		cat(frame(header{op: opReadReq, rkey: 2, addr: 16, length: 64}, nil), frame(header{op: opReadReq, rkey: 2, addr: 250, length: 64, seq: 1}, nil)),
		frame(header{op: opReadReq, rkey: 1, length: 8}, nil),
		cat(frame(header{op: opAck, seq: 0}, nil), frame(header{op: opReadResp, seq: 1, length: 32}, p16), p16),
		cat(frame(header{op: opAck, seq: 0}, nil), frame(header{op: opReadResp, seq: 1, length: 32}, bytes.Repeat([]byte{3}, 32)),
			frame(header{op: opReadResp, seq: 2}, bytes.Repeat([]byte{4}, 8+28)), frame(header{op: opAck, seq: 3}, nil)),
		frame(header{op: opNak, seq: 0, status: uint16(rdma.StatusRemoteAccessError)}, nil),
		frame(header{op: opAck, seq: 3}, nil),
		frame(header{op: opWrite, rkey: 1, length: maxMsg}, nil),
		frame(header{op: opWrite, rkey: 1, length: maxMsg + 1}, nil),
		{0xff, 0, 0},
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		ft := newFuzzTarget(t, in)
		done := make(chan struct{})
		go func() {
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				buf := make([]byte, 1<<20)
				n := runtime.Stack(buf, true)
				panic(fmt.Sprintf("HANG %q\n%s", in, buf[:n]))
			}
		}()
		err := ft.c.serve()
		close(done)
		if err == nil {
			t.Fatal("serve returned without an error")
		}
		ft.check(t)
	})
}

// TestDecodeSeeds checks what the seeds must do, beyond not crashing.
func TestDecodeSeeds(t *testing.T) {
	seeds := fuzzSeeds()
	ft := newFuzzTarget(t, seeds[0])
	if err := ft.c.serve(); err != io.EOF {
		t.Fatalf("valid write: %v", err)
	}
	if !bytes.Equal(ft.w[8:24], bytes.Repeat([]byte{0x11}, 16)) || ft.c.Err() != nil {
		t.Fatal("valid write not applied")
	}
	ft.check(t)
	for _, i := range []int{1, 2, 3} {
		ft := newFuzzTarget(t, seeds[i])
		ft.c.serve()
		ft.check(t)
		if ft.c.Err() == nil || !bytes.Equal(ft.w, make([]byte, wLen)) {
			t.Fatalf("seed %d: invalid write accepted", i)
		}
		if wc, ok, _ := ft.c.recvCQ.Next(); !ok || wc.Status != rdma.StatusFlushed {
			t.Fatalf("seed %d: receives not flushed: %+v", i, wc)
		}
	}
	ft = newFuzzTarget(t, seeds[10])
	if err := ft.c.serve(); err != io.EOF {
		t.Fatalf("responses: %v", err)
	}
	for _, id := range []uint64{1, 2} {
		if wc, ok, _ := ft.c.sendCQ.Next(); !ok || wc.WRID != id || wc.Status != rdma.StatusSuccess {
			t.Fatalf("completion %d: %+v", id, wc)
		}
	}
	if !bytes.Equal(ft.local[:32], bytes.Repeat([]byte{3}, 32)) || ft.local[40] != 4 || ft.local[127] != 4 {
		t.Fatal("read responses not placed")
	}
	ft.check(t)
}

func FuzzHandshake(f *testing.F) {
	f.Add([]byte("gorunTCP\x01\x00\x01\x00" + string(make([]byte, 32+32+1))))
	f.Add([]byte("gorunTCP\x01\x00\x00\x00" + string(make([]byte, 32))))
	f.Fuzz(func(t *testing.T, in []byte) {
		rw := struct {
			io.Reader
			io.Writer
		}{bytes.NewReader(in), io.Discard}
		if exchange(rw, []byte("token"), false, roleAccept) == nil {
			t.Fatal("authenticated without the token")
		}
	})
}
