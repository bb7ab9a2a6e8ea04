package tcp

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Every frame starts with a fixed header; frames that carry data (writes,
// sends, read responses) are followed by exactly Length payload bytes.
//
//	off size field
//	  0    1 op
//	  1    1 flags   (fAck: the initiator wants an acknowledgement)
//	  2    2 status  (NAK only: the rdma.Status of the failed request)
//	  4    4 imm     (write-with-immediate)
//	  8    4 rkey
//	 12    4 length  (payload bytes, or bytes to read for opReadReq)
//	 16    8 seq     (request number on the initiator's send queue)
//	 24    8 addr    (remote address)
//
// Requests travel initiator → target; responses (ACK, NAK, read response)
// travel back on the same socket. Both ends are initiator and target.
const hdrLen = 32

const (
	opWrite    uint8 = 1 + iota // payload into [addr, addr+length) under rkey
	opWriteImm                  // as opWrite, then consumes a receive with imm
	opSend                      // payload into the next posted receive
	opReadReq                   // target answers with opReadResp (no payload)
	opAck                       // every request up to and including seq succeeded
	opNak                       // requests before seq succeeded; seq failed with status
	opReadResp                  // payload is the data of read seq (acks all before it)
	opPing                      // heartbeat on an idle connection (heartbeat.go): no payload, no answer
	opMax
)

const (
	fAck      uint8 = 1 << iota
	fAllFlags       = fAck
)

// maxMsg bounds one request's payload, as a verbs port's max_msg_sz does;
// it also bounds how much an invalid request makes the target drain.
const maxMsg = 1 << 30

var errProtocol = errors.New("protocol violation")

type header struct {
	op     uint8
	flags  uint8
	status uint16
	imm    uint32
	rkey   uint32
	length uint32
	seq    uint64
	addr   uint64
	crc    uint32 // payload CRC32C (Config.Checksum); not in encode
}

func (h *header) encode(b *[hdrLen]byte) {
	b[0] = h.op
	b[1] = h.flags
	binary.LittleEndian.PutUint16(b[2:], h.status)
	binary.LittleEndian.PutUint32(b[4:], h.imm)
	binary.LittleEndian.PutUint32(b[8:], h.rkey)
	binary.LittleEndian.PutUint32(b[12:], h.length)
	binary.LittleEndian.PutUint64(b[16:], h.seq)
	binary.LittleEndian.PutUint64(b[24:], h.addr)
}

// decode parses and validates a header. It never trusts the peer: an
// unknown op, unknown flags or an oversized length are protocol errors.
func (h *header) decode(b *[hdrLen]byte) error {
	h.op = b[0]
	h.flags = b[1]
	h.status = binary.LittleEndian.Uint16(b[2:])
	h.imm = binary.LittleEndian.Uint32(b[4:])
	h.rkey = binary.LittleEndian.Uint32(b[8:])
	h.length = binary.LittleEndian.Uint32(b[12:])
	h.seq = binary.LittleEndian.Uint64(b[16:])
	h.addr = binary.LittleEndian.Uint64(b[24:])
	if h.op == 0 || h.op >= opMax {
		return fmt.Errorf("%w: unknown op %d", errProtocol, h.op)
	}
	if h.flags&^fAllFlags != 0 {
		return fmt.Errorf("%w: unknown flags %#x", errProtocol, h.flags)
	}
	if h.length > maxMsg {
		return fmt.Errorf("%w: length %d over %d", errProtocol, h.length, maxMsg)
	}
	if (h.op == opAck || h.op == opPing) && h.length != 0 {
		return fmt.Errorf("%w: op %d (ack or ping) with payload", errProtocol, h.op)
	}
	return nil
}

// hasPayload reports whether length payload bytes follow the header.
func (h *header) hasPayload() bool {
	switch h.op {
	case opWrite, opWriteImm, opSend, opReadResp:
		return true
	}
	return false
}
