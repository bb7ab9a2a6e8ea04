package tcp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"sync/atomic"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// Every frame header carries two CRC32Cs after its 32 bytes:
//
//	off size field
//	 32    4 CRC32C of the payload (0 without Config.Checksum, or no payload)
//	 36    4 CRC32C of bytes [0, 36): always
//
// The receiver checks the header's CRC before it acts on any field, so a
// damaged op, rkey, address or length is never used: the connection fails
// at once instead of, say, waiting for the payload of a damaged length.
// It costs a CRC of 36 bytes per frame at each end (a few ns). The
// payload's CRC is Config.Checksum's, negotiated in the handshake (both
// ends must set it): the receiver checks it after
// reading it into place and before anything makes it visible: a request is
// acknowledged, a receive completes, a read completes. Since the payload
// goes straight into the registered region, damaged bytes may already be
// there when the check fails; the connection then fails on both ends (a
// NAK with nakChecksum tells the peer) and nothing is reported as success.
// The CRCs are computed in place over the regions (hash/crc32 uses SSE4.2
// or the ARM CRC instructions for Castagnoli): no copy is added.
const (
	crcLen = 8
	maxHdr = hdrLen + crcLen

	// crcChunk is how much payload is read before it is checksummed, so
	// the CRC reads bytes still in cache.
	crcChunk = 256 << 10

	// nakChecksum in a NAK's imm field says the receiver found a CRC32C
	// mismatch. At seq equal to the initiator's next request it names no
	// request of its own: the damaged frame was a response or a header.
	nakChecksum = 1
)

var (
	castagnoli  = crc32.MakeTable(crc32.Castagnoli)
	errChecksum = errors.New("CRC32C mismatch (data damaged on the way)")
)

// head is the part of a frame buffer the header codec works on.
func head(b *[maxHdr]byte) *[hdrLen]byte { return (*[hdrLen]byte)(b[:hdrLen]) }

// seal stores the payload CRC and the header CRC after an encoded header.
func seal(b *[maxHdr]byte, payloadCRC uint32) {
	binary.LittleEndian.PutUint32(b[hdrLen:], payloadCRC)
	binary.LittleEndian.PutUint32(b[hdrLen+4:], crc32.Checksum(b[:hdrLen+4], castagnoli))
}

// intact reports whether a received header matches its CRC.
func intact(b *[maxHdr]byte) bool {
	return binary.LittleEndian.Uint32(b[hdrLen+4:]) == crc32.Checksum(b[:hdrLen+4], castagnoli)
}

func crcOf(bufs [][]byte) uint32 {
	var crc uint32
	for _, b := range bufs {
		crc = crc32.Update(crc, castagnoli, b)
	}
	return crc
}

// badCRC reports whether a payload, folded into crc as it arrived, failed
// its check.
func (c *conn) badCRC(h *header, crc uint32) bool {
	return c.cfg.Checksum && crc != h.crc
}

// checksumError counts a mismatch found by this end, moves the conn to
// the error state and tells the peer with a NAK at seq (once). Only the
// reader calls it.
func (c *conn) checksumError(seq uint64, err error) {
	c.dev.counts.checksum.Add(1)
	first := !c.discard
	c.setError(err)
	if first {
		c.queueResp(header{op: opNak, seq: seq, status: uint16(rdma.StatusRetryExceeded), imm: nakChecksum}, nil, nil)
	}
}

// corruptHeader handles a header that failed its CRC: nothing in it can
// be trusted, not even the length, so the rest of the stream is dropped
// unread until the peer closes. The NAK names the peer's next request,
// which is the damaged frame if it was a request.
func (c *conn) corruptHeader() {
	c.checksumError(c.expect, opErr("serve", &peerError{peer: c.peer, err: fmt.Errorf("frame header: %w", errChecksum)}))
	c.ps.state = psDrop
}

// counts are a device's refusals (rdma.Counters), kept where they happen.
type counts struct {
	auth, access, checksum, protocol atomic.Uint64
}

// Counters implements rdma.CounterSource.
func (d *device) Counters() rdma.Counters {
	return rdma.Counters{
		AuthFailures:     d.counts.auth.Load(),
		AccessViolations: d.counts.access.Load(),
		ChecksumErrors:   d.counts.checksum.Load(),
		ProtocolErrors:   d.counts.protocol.Load(),
	}
}
