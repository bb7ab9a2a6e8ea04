package tcp

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strings"
	"testing"

	"github.com/gorun-hpc/gorun/transport/rdma"
	"github.com/gorun-hpc/gorun/transport/rdma/faulty"
)

// proxied connects a dialing device (a) to an accepting one (b) through a
// faulty.Proxy that flips the low bit of the forward (a → b) byte at
// corruptAt, counted from 1 and including the handshake.
func proxied(t *testing.T, cfg rdma.Config, corruptAt int64) (a, b rdma.Conn, devA, devB rdma.Device, px *faulty.Proxy) {
	t.Helper()
	ctx := testCtx(t)
	heartbeatOff.Store(true) // offsets count from the first frame
	t.Cleanup(func() { heartbeatOff.Store(false) })
	devA, _ = rdma.OpenConfig("tcp", cfg)
	devB, _ = rdma.OpenConfig("tcp", cfg)
	t.Cleanup(func() { devA.Close(); devB.Close() })
	ln, err := devB.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	px = &faulty.Proxy{Target: ln.Addr().String(), CorruptAt: corruptAt}
	if err := px.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	ch := make(chan rdma.Conn, 1)
	go func() {
		c, err := ln.Accept(ctx)
		if err != nil {
			t.Error(err)
		}
		ch <- c
	}()
	if a, err = devA.Dial(ctx, px.Addr()); err != nil {
		t.Fatal(err)
	}
	if b = <-ch; b == nil {
		t.FailNow()
	}
	return a, b, devA, devB, px
}

// firstPayload is the forward offset of byte k of the payload of the
// dialer's first frame (no token: the handshake is one hello).
func firstPayload(cfg rdma.Config, k int) int64 {
	return int64(helloLen + maxHdr + k + 1)
}

// corruption is one place a flipped bit can land: byte k of the payload
// of the dialer's first frame, or (k < 0) the low byte of its header's
// addr. run posts the request that frame carries and returns its
// initiator. b, which receives the frame, must find the damage.
type corruption struct {
	name string
	k    int
	run  func(t *testing.T, a, b rdma.Conn, src, dst *rdma.MR) (init rdma.Conn)
}

func (c corruption) at(cfg rdma.Config) int64 {
	if c.k < 0 {
		return helloLen + 24 + 1
	}
	return firstPayload(cfg, c.k)
}

// corruptLen spans several CRC chunks (crcChunk) and proxy reads.
const corruptLen = 1 << 20

var corruptions = []corruption{
	{"write-payload", 700_000, func(t *testing.T, a, b rdma.Conn, src, dst *rdma.MR) rdma.Conn {
		must(t, a.PostWrite(1, src.Bytes(), src, rdma.FlagSignaled, dst.Addr(), dst.RKey()))
		return a
	}},
	{"write-imm-payload", corruptLen - 1, func(t *testing.T, a, b rdma.Conn, src, dst *rdma.MR) rdma.Conn {
		must(t, a.PostWriteImm(1, src.Bytes(), src, rdma.FlagSignaled, dst.Addr(), dst.RKey(), 77))
		return a
	}},
	{"send-payload", 0, func(t *testing.T, a, b rdma.Conn, src, dst *rdma.MR) rdma.Conn {
		must(t, a.PostSend(1, src.Bytes(), src, rdma.FlagSignaled))
		return a
	}},
	// Without a CRC the write would land one byte off, inside the region.
	{"header", -1, func(t *testing.T, a, b rdma.Conn, src, dst *rdma.MR) rdma.Conn {
		must(t, a.PostWrite(1, src.Bytes()[:100], src, rdma.FlagSignaled, dst.Addr()+8, dst.RKey()))
		return a
	}},
	// The proxy damages a → b bytes, so b reads from a: a's first frame
	// is the read response.
	{"read-response", 300_000, func(t *testing.T, a, b rdma.Conn, src, dst *rdma.MR) rdma.Conn {
		must(t, b.PostRead(1, dst.Bytes(), dst, rdma.FlagSignaled, src.Addr(), src.RKey()))
		return b
	}},
}

// regions gives a a source (remote-readable, for the read case) and b a
// destination, page-aligned, and a receive buffer on each end.
func regions(t *testing.T, devA, devB rdma.Device) (src, dst, recvA, recvB *rdma.MR) {
	t.Helper()
	alloc := func(d rdma.Device, acc rdma.Access) *rdma.MR {
		mr, err := d.Alloc(corruptLen, acc)
		if err != nil {
			t.Fatal(err)
		}
		return mr
	}
	src = alloc(devA, rdma.AccessLocalWrite|rdma.AccessRemoteRead)
	fill(src.Bytes(), 5)
	dst = alloc(devB, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	return src, dst, alloc(devA, rdma.AccessLocalWrite), alloc(devB, rdma.AccessLocalWrite)
}

// With Checksum, a bit flipped anywhere in a frame is caught: the request
// fails on its initiator, both ends enter the error state, no receive
// completes successfully, and the end that found it counts it.
func TestChecksumDetectsCorruption(t *testing.T) {
	for _, tc := range corruptions {
		t.Run(tc.name, func(t *testing.T) {
			cfg := rdma.Config{Checksum: true}
			a, b, devA, devB, px := proxied(t, cfg, tc.at(cfg))
			src, dst, recvA, recvB := regions(t, devA, devB)
			must(t, a.PostRecv(8, recvA.Bytes(), recvA))
			must(t, b.PostRecv(9, recvB.Bytes(), recvB))
			init := tc.run(t, a, b, src, dst)
			if wc := sendComp(t, init); wc.WRID != 1 || wc.Status != rdma.StatusRetryExceeded {
				t.Fatalf("initiator's completion %+v, want %v", wc, rdma.StatusRetryExceeded)
			}
			for _, c := range []rdma.Conn{a, b} {
				if err := waitErr(t, c); !errors.Is(err, errChecksum) {
					t.Fatalf("Err() = %v, want a checksum error", err)
				}
				if wc := recvComp(t, c); wc.Status != rdma.StatusFlushed {
					t.Fatalf("receive %+v, want flushed", wc)
				}
			}
			if n := px.Corrupted.Load(); n != 1 {
				t.Fatalf("proxy corrupted %d bytes, want 1", n)
			}
			if got := counters(devA); got != (rdma.Counters{}) {
				t.Fatalf("dialer's counters %+v", got)
			}
			if got := counters(devB); got != (rdma.Counters{ChecksumErrors: 1}) {
				t.Fatalf("acceptor's counters %+v, want one checksum error", got)
			}
			if tc.name == "header" && !bytes.Equal(dst.Bytes(), make([]byte, corruptLen)) {
				t.Fatal("a write with a damaged header reached memory")
			}
			// Later requests are flushed, on both ends.
			must(t, a.PostSend(2, []byte("x"), nil, rdma.FlagInline|rdma.FlagSignaled))
			if wc := sendComp(t, a); wc.WRID != 2 || wc.Status != rdma.StatusFlushed {
				t.Fatalf("post after the error: %+v", wc)
			}
		})
	}
}

// Without Checksum the same flipped bit in a payload is delivered as good
// data: this is why the option exists. (A header is always checked:
// TestHeaderCRCAlwaysOn.)
func TestCorruptionLandsWithoutChecksum(t *testing.T) {
	for _, tc := range corruptions {
		if tc.name == "write-imm-payload" || tc.name == "header" {
			continue // the same path as write-payload; a header has its CRC
		}
		t.Run(tc.name, func(t *testing.T) {
			cfg := rdma.Config{}
			a, b, devA, devB, _ := proxied(t, cfg, tc.at(cfg))
			src, dst, _, recvB := regions(t, devA, devB)
			must(t, b.PostRecv(9, recvB.Bytes(), recvB))
			init := tc.run(t, a, b, src, dst)
			if wc := sendComp(t, init); wc.WRID != 1 || wc.Status != rdma.StatusSuccess {
				t.Fatalf("completion %+v", wc)
			}
			want := bytes.Clone(src.Bytes())
			got := dst.Bytes()
			switch tc.name {
			case "send-payload":
				if wc := recvComp(t, b); wc.Status != rdma.StatusSuccess {
					t.Fatalf("receive %+v", wc)
				}
				want[tc.k] ^= 1
				got = recvB.Bytes()
			default:
				want[tc.k] ^= 1
			}
			if !bytes.Equal(got, want) {
				t.Fatal("the corrupted data did not land as predicted")
			}
			if a.Err() != nil || b.Err() != nil {
				t.Fatalf("errors without checksums: %v / %v", a.Err(), b.Err())
			}
		})
	}
}

// Ends that disagree on checksums refuse each other at the handshake,
// saying so, rather than misreading each other's frames.
func TestChecksumHandshakeMismatch(t *testing.T) {
	on, off := rdma.Config{Checksum: true}, rdma.Config{}
	for _, tc := range []struct {
		name         string
		dial, accept rdma.Config
	}{{"dial-on", on, off}, {"accept-on", off, on}} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, errA, errB := handshakePair(t, tc.dial, tc.accept)
			for _, err := range []error{errA, errB} {
				if !errors.Is(err, rdma.ErrNotSupported) || !strings.Contains(fmt.Sprint(err), "checksums") {
					t.Fatalf("dial: %v; accept: %v; want a checksum mismatch on both", errA, errB)
				}
			}
		})
	}
	if _, _, errA, errB := handshakePair(t, on, on); errA != nil || errB != nil {
		t.Fatalf("matching configs refused: %v / %v", errA, errB)
	}
}

// sealedFrame is a frame as a checksumming peer sends it; damage spoils
// the payload CRC (the bytes as they would arrive after a flipped bit).
func sealedFrame(h header, payload []byte, damage bool) []byte {
	var b [maxHdr]byte
	h.length = uint32(len(payload))
	h.encode(head(&b))
	crc := crc32.Checksum(payload, castagnoli)
	if damage {
		crc ^= 1
	}
	seal(&b, crc)
	return append(b[:], payload...)
}

// The decoder with Checksum: a good frame is delivered and acknowledged;
// a damaged payload or header is answered with a checksum NAK, its
// receive is flushed, and a damaged header stops the parsing.
func TestDecodeChecksum(t *testing.T) {
	p := bytes.Repeat([]byte{7}, 16)
	good := sealedFrame(header{op: opSend, flags: fAck}, p, false)
	badHeader := sealedFrame(header{op: opSend, seq: 1, flags: fAck}, p, false)
	badHeader[12] ^= 4 // length 16 → 20
	for _, tc := range []struct {
		name string
		in   []byte
	}{
		{"payload", cat(good, sealedFrame(header{op: opSend, seq: 1, flags: fAck}, p, true), sealedFrame(header{op: opSend, seq: 2}, p, false))},
		{"header", cat(good, badHeader, good)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ft := newFuzzTargetConfig(t, tc.in, true)
			c := ft.c
			// The stream ends: cleanly, or inside what the damaged header
			// made the reader drop unparsed.
			if err := c.serve(); err != io.EOF && err != io.ErrUnexpectedEOF {
				t.Fatalf("serve: %v", err)
			}
			if wc, ok, _ := c.recvCQ.Next(); !ok || wc.WRID != 100 || wc.Status != rdma.StatusSuccess || wc.ByteLen != 16 {
				t.Fatalf("good send: %+v", wc)
			}
			if wc, ok, _ := c.recvCQ.Next(); !ok || wc.WRID != 101 || wc.Status != rdma.StatusFlushed {
				t.Fatalf("damaged send's receive: %+v, want flushed", wc)
			}
			if !errors.Is(c.Err(), errChecksum) {
				t.Fatalf("Err() = %v", c.Err())
			}
			if got := c.dev.Counters(); got != (rdma.Counters{ChecksumErrors: 1}) {
				t.Fatalf("counters %+v", got)
			}
			c.mu.Lock()
			resp := append([]response(nil), c.resp...)
			c.mu.Unlock()
			if len(resp) != 2 || resp[0].h.op != opAck || resp[0].h.seq != 0 ||
				resp[1].h != (header{op: opNak, seq: 1, status: uint16(rdma.StatusRetryExceeded), imm: nakChecksum}) {
				t.Fatalf("responses %+v, want ACK 0 then a checksum NAK at 1", resp)
			}
			for _, r := range resp {
				if !intact(&r.hdr) {
					t.Fatal("a response went out without its CRC")
				}
			}
			ft.check(t)
		})
	}
}

// Without Checksum, a bit flipped in a frame header's op, rkey, length or
// address is still caught by the header's CRC, at once: the request fails
// on its initiator, both ends enter the error state, nothing reaches
// memory, and the acceptor counts it. (Before the header CRC, a damaged
// length made the target wait for bytes that never came.)
func TestHeaderCRCAlwaysOn(t *testing.T) {
	for _, f := range []struct {
		name string
		off  int
	}{{"op", 0}, {"rkey", 8}, {"length", 12}, {"addr", 24}} {
		t.Run(f.name, func(t *testing.T) {
			a, b, devA, devB, px := proxied(t, rdma.Config{}, int64(helloLen+f.off+1))
			src, dst, _, _ := regions(t, devA, devB)
			must(t, a.PostWrite(1, src.Bytes()[:100], src, rdma.FlagSignaled, dst.Addr()+8, dst.RKey()))
			if wc := sendComp(t, a); wc.WRID != 1 || wc.Status != rdma.StatusRetryExceeded {
				t.Fatalf("initiator's completion %+v, want %v", wc, rdma.StatusRetryExceeded)
			}
			for _, c := range []rdma.Conn{a, b} {
				if err := waitErr(t, c); !errors.Is(err, errChecksum) {
					t.Fatalf("Err() = %v, want a checksum error", err)
				}
			}
			if n := px.Corrupted.Load(); n != 1 {
				t.Fatalf("proxy corrupted %d bytes, want 1", n)
			}
			if got := counters(devB); got != (rdma.Counters{ChecksumErrors: 1}) {
				t.Fatalf("acceptor's counters %+v, want one checksum error", got)
			}
			if !bytes.Equal(dst.Bytes(), make([]byte, corruptLen)) {
				t.Fatal("a write with a damaged header reached memory")
			}
		})
	}
}

// BenchmarkHeaderCRC is what the always-on header CRC adds per frame: seal
// on the sender, intact on the receiver.
func BenchmarkHeaderCRC(b *testing.B) {
	var buf [maxHdr]byte
	h := header{op: opWriteImm, flags: fAck, imm: 7, rkey: 0x1234, length: 8, seq: 99, addr: 0xdeadbeef}
	h.encode(head(&buf))
	for b.Loop() {
		seal(&buf, 0)
		if !intact(&buf) {
			b.Fatal("sealed header not intact")
		}
	}
}
