package collectives

// Link: the wire protocol between two ranks over one rdma.Conn.
//
// Direct (zero-copy) messages: a large send whose matching receive only
// stores the data (Op.ToCopy) skips the staging area. When such a receive
// becomes ready (its deps are done, so nothing reads or writes that range
// any more), the receiver sends a clear-to-send with the address and rkey
// of the destination inside its registered working buffer; the sender
// writes the payload there directly, then the usual header (marked direct)
// with immediate into a staging slot. Both sides decide "direct" from the
// op's length alone (DirectMin), so they agree without negotiation.
//
// Each side allocates a receive staging area of Slots slots of SlotBytes
// (registered for remote write) and tells the peer its address and rkey in
// a hello message. A data message k (counted from 0 per direction) goes to
// slot k mod Slots: the sender first writes the payload (unsignaled,
// straight from the caller's registered buffer, no copy) to the slot after
// its 32-byte header area, then writes the header with immediate k
// (signaled). Writes on a connection land in post order, so when the
// receive completion with the immediate appears, header and payload are in
// place. The receiver applies the payload (copy or reduce into its working
// buffer) and returns a credit with a small inline send; the sender never
// has more than Slots messages unconsumed. Control messages (hello, credit,
// abort, bye) are inline sends that consume a posted receive; data
// notifications consume one too, so each side keeps 2·Slots+16 receives
// posted and reposts each as soon as it completes.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

const (
	hdrSize  = 32
	ctrlSize = 32
	hdrMagic = 0x67724e31 // "grN1"
)

// control message types
const (
	ctrlHello uint32 = iota + 1
	ctrlCredit
	ctrlAbort
	ctrlBye
	ctrlCTS      // clear to send: the next direct message goes to address b, rkey a
	ctrlMismatch // evidence: rank a (call hash b>>32) saw rank c send call hash b&0xffffffff
)

// ctsDepth bounds outstanding clear-to-send messages per link; the
// receiver clears at most this many direct receives ahead of the data.
const ctsDepth = 8

// Device is one opened provider with its registration cache.
type Device struct {
	Dev   rdma.Device
	Cache *RegCache
	cur   [2]*rdma.MR // the MRs of the running operation's Work and Input
}

// NewDevice wraps dev with a registration cache of cacheSize entries.
func NewDevice(dev rdma.Device, cacheSize int) *Device {
	return &Device{Dev: dev, Cache: NewRegCache(dev, cacheSize)}
}

// LinkParams size a link's staging area.
type LinkParams struct {
	Slots     int // messages in flight per direction
	SlotBytes int // bytes per slot, header included; payload is SlotBytes-32
}

// Link is the connection to one peer. Its progress goroutines update the
// atomic counters; everything else belongs to the engine's goroutine.
type Link struct {
	Peer int
	conn rdma.Conn
	dev  *Device

	stage    *rdma.MR // our receive staging
	slots    int
	slotSize int
	ctrlRecv *rdma.MR
	nrecv    int

	rAddr     uint64 // the peer's staging
	rKey      uint32
	rSlots    int
	rSlotSize int
	hdrs      *rdma.MR // header sources, one per remote slot

	arrived  atomic.Uint64 // data messages landed in our staging
	credits  atomic.Uint64 // our messages the peer has consumed
	sendDone atomic.Uint64 // our messages whose header write completed
	closed   atomic.Bool   // the peer said bye
	broken   atomic.Bool   // a progress loop saw the connection fail
	recvOut  atomic.Bool   // the receive loop has exited

	cts [ctsDepth]struct {
		addr uint64
		rkey uint32
	}
	ctsArrived atomic.Uint64 // clear-to-send messages received
	ctsUsed    uint64        // engine: clear-to-send messages used
	ctsSent    uint64        // engine: clear-to-sends sent to the peer
	directDone uint64        // engine: direct messages received (each used one)

	posted   uint64 // engine: data messages posted
	consumed uint64 // engine: data messages applied
	owed     uint32 // engine: credits not yet returned (flushCredits)
	ctrl     [ctrlSize]byte

	sendMu  sync.Mutex    // serialises control sends from several goroutines
	byeSent chan struct{} // closed when the signaled bye has completed
	sendOut chan struct{} // closed when the send loop exits
}

// wridBye marks the signaled bye among send completions.
const wridBye = 1 << 63

// Establish runs the hello exchange on a connected conn and returns the
// link, which then knows its peer's rank.
func Establish(ctx context.Context, conn rdma.Conn, dev *Device, rank int, p LinkParams) (l *Link, err error) {
	if conn.MaxInline() < ctrlSize {
		return nil, fmt.Errorf("collectives: provider %s inlines only %d bytes, need %d", dev.Dev.Name(), conn.MaxInline(), ctrlSize)
	}
	p.SlotBytes = (max(p.SlotBytes, hdrSize+64) + 63) &^ 63
	l = &Link{Peer: -1, conn: conn, dev: dev, slots: max(p.Slots, 1), slotSize: p.SlotBytes, byeSent: make(chan struct{}), sendOut: make(chan struct{})}
	built := l // the error returns below set l to nil before this runs
	defer func() {
		if err != nil {
			built.free()
		}
	}()
	if l.stage, err = dev.Dev.Alloc(l.slots*l.slotSize, rdma.AccessLocalWrite|rdma.AccessRemoteWrite); err != nil {
		return nil, err
	}
	l.nrecv = 2*l.slots + ctsDepth + 8
	if l.ctrlRecv, err = dev.Dev.Alloc(l.nrecv*ctrlSize, rdma.AccessLocalWrite); err != nil {
		return nil, err
	}
	for i := range l.nrecv {
		if err = l.postRecv(uint64(i)); err != nil {
			return nil, err
		}
	}
	var hello [ctrlSize]byte
	binary.LittleEndian.PutUint32(hello[0:], ctrlHello)
	binary.LittleEndian.PutUint32(hello[4:], uint32(rank))
	binary.LittleEndian.PutUint64(hello[8:], l.stage.Addr())
	binary.LittleEndian.PutUint32(hello[16:], l.stage.RKey())
	binary.LittleEndian.PutUint32(hello[20:], uint32(l.slots))
	binary.LittleEndian.PutUint32(hello[24:], uint32(l.slotSize))
	binary.LittleEndian.PutUint32(hello[28:], hdrMagic)
	if err = conn.PostSend(0, hello[:], nil, rdma.FlagInline); err != nil {
		return nil, err
	}
	wc, err := conn.GetRecvComp(ctx)
	if err != nil {
		return nil, err
	}
	if err = wc.Err(); err != nil {
		return nil, err
	}
	m := l.ctrlMsg(wc.WRID)
	if wc.Opcode != rdma.OpRecv || binary.LittleEndian.Uint32(m[0:]) != ctrlHello || binary.LittleEndian.Uint32(m[28:]) != hdrMagic {
		return nil, fmt.Errorf("collectives: bad hello: %w", ErrProtocol)
	}
	l.Peer = int(binary.LittleEndian.Uint32(m[4:]))
	l.rAddr = binary.LittleEndian.Uint64(m[8:])
	l.rKey = binary.LittleEndian.Uint32(m[16:])
	l.rSlots = int(binary.LittleEndian.Uint32(m[20:]))
	l.rSlotSize = int(binary.LittleEndian.Uint32(m[24:]))
	if l.rSlots < 1 || l.rSlotSize < hdrSize+64 {
		return nil, fmt.Errorf("collectives: bad hello from rank %d: %w", l.Peer, ErrProtocol)
	}
	if err = l.postRecv(wc.WRID); err != nil {
		return nil, err
	}
	if l.hdrs, err = dev.Dev.Alloc(l.rSlots*hdrSize, rdma.AccessLocalWrite); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *Link) ctrlMsg(i uint64) []byte {
	b := l.ctrlRecv.Bytes()
	return b[int(i)*ctrlSize : int(i+1)*ctrlSize]
}

func (l *Link) postRecv(i uint64) error {
	return l.conn.PostRecv(i, l.ctrlMsg(i), l.ctrlRecv)
}

// payload is the largest data message the peer accepts.
func (l *Link) payload() int { return l.rSlotSize - hdrSize }

// sendCtrl posts an inline control message.
func (l *Link) sendCtrl(typ, a uint32, b uint64) error {
	l.sendMu.Lock()
	defer l.sendMu.Unlock()
	binary.LittleEndian.PutUint32(l.ctrl[0:], typ)
	binary.LittleEndian.PutUint32(l.ctrl[4:], a)
	binary.LittleEndian.PutUint64(l.ctrl[8:], b)
	flags, wrid := rdma.FlagInline, uint64(0)
	if typ == ctrlBye {
		flags, wrid = flags|rdma.FlagSignaled, wridBye
	}
	return l.conn.PostSend(wrid, l.ctrl[:16], nil, flags)
}

// sendCtrl3 posts an inline control message with a third field.
func (l *Link) sendCtrl3(typ, a uint32, b, c uint64) error {
	l.sendMu.Lock()
	defer l.sendMu.Unlock()
	binary.LittleEndian.PutUint32(l.ctrl[0:], typ)
	binary.LittleEndian.PutUint32(l.ctrl[4:], a)
	binary.LittleEndian.PutUint64(l.ctrl[8:], b)
	binary.LittleEndian.PutUint64(l.ctrl[16:], c)
	return l.conn.PostSend(0, l.ctrl[:24], nil, rdma.FlagInline)
}

// recvLoop and sendLoop are the link's progress: they drain the completion
// queues until ctx ends or the connection fails, reporting to e.
func (l *Link) recvLoop(ctx context.Context, e *Engine) {
	defer e.loops.Done()
	defer l.recvOut.Store(true)
	for {
		wc, err := l.conn.GetRecvComp(ctx)
		if err == nil {
			err = wc.Err()
		}
		if err != nil {
			l.broken.Store(true)
			if ctx.Err() == nil {
				e.linkFailed(l, err, true)
			}
			return
		}
		switch wc.Opcode {
		case rdma.OpRecvWriteImm:
			if uint32(l.arrived.Load()) != wc.Imm {
				e.linkFailed(l, fmt.Errorf("message %d arrived out of order: %w", wc.Imm, ErrProtocol), true)
				return
			}
			l.arrived.Add(1)
		case rdma.OpRecv:
			m := l.ctrlMsg(wc.WRID)
			a, b := binary.LittleEndian.Uint32(m[4:]), binary.LittleEndian.Uint64(m[8:])
			switch binary.LittleEndian.Uint32(m[0:]) {
			case ctrlCredit:
				l.credits.Add(uint64(a))
			case ctrlAbort:
				e.remoteAbort(l, int(int32(a)), uint32(b))
			case ctrlMismatch:
				c := binary.LittleEndian.Uint64(m[16:])
				e.evidence(int(int32(a)), uint32(b>>32), int(int32(c)), uint32(b), "")
			case ctrlBye:
				l.closed.Store(true)
			case ctrlCTS:
				n := l.ctsArrived.Load()
				l.cts[n%ctsDepth].addr, l.cts[n%ctsDepth].rkey = b, a
				l.ctsArrived.Store(n + 1)
			}
		}
		if err := l.postRecv(wc.WRID); err != nil {
			if errors.Is(err, rdma.ErrClosed) {
				// The connection ended: keep draining what already
				// arrived (the peer's bye may be next); the loop ends on
				// the receive queue's own error.
				e.poke()
				continue
			}
			if ctx.Err() == nil {
				e.linkFailed(l, err, true)
			}
			return
		}
		e.poke()
	}
}

func (l *Link) sendLoop(ctx context.Context, e *Engine) {
	defer e.loops.Done()
	defer close(l.sendOut)
	for {
		wc, err := l.conn.GetSendComp(ctx)
		if err == nil {
			err = wc.Err()
		}
		if err != nil {
			l.broken.Store(true)
			// A connection that ended (closed, or flushed) is judged by the
			// receive loop, which sees the peer's bye, if it said one, first:
			// it always ends with an error of its own then.
			var wce *rdma.WCError
			ended := errors.Is(err, rdma.ErrClosed) || (errors.As(err, &wce) && wce.WC.Status == rdma.StatusFlushed)
			if ctx.Err() == nil && !ended {
				e.linkFailed(l, err, false)
			}
			e.poke()
			return
		}
		if wc.WRID == wridBye {
			close(l.byeSent)
			continue
		}
		l.sendDone.Store(wc.WRID + 1)
		e.poke()
	}
}

// free releases the link's memory (the conn is closed by the caller).
func (l *Link) free() {
	for _, mr := range []*rdma.MR{l.stage, l.ctrlRecv, l.hdrs} {
		if mr != nil {
			mr.Deregister()
		}
	}
}

// Close closes a link that was never handed to an engine.
func (l *Link) Close() {
	l.conn.Close()
	l.free()
}

// Window is the payload bytes a peer with staging p accepts before it must
// return credits: a schedule op larger than this is split across credit
// round trips, so chunks should not exceed it.
func Window(p LinkParams) int {
	p.SlotBytes = (max(p.SlotBytes, hdrSize+64) + 63) &^ 63
	return max(1, p.Slots) * (p.SlotBytes - hdrSize)
}
