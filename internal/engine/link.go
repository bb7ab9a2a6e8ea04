package engine

// Link: the wire protocol between two ranks over one rdma.Conn.
//
// Each side allocates a receive staging area of Slots slots of SlotBytes
// (registered for remote write) and tells the peer its address and rkey in
// a hello message. A data message k (counted from 0 per direction) goes to
// slot k mod Slots as a 32-byte header followed by its payload, and is
// announced by a write-with-immediate k: writes on a connection land in
// post order, so when the receive completion with the immediate appears,
// header and payload are in place. A small payload (up to smallMax) is
// copied behind the header and goes in that one write; a larger one is
// written first, unsignaled and straight from the caller's registered
// buffer, then the header with immediate. The receiver applies the payload
// (copy or reduce into its working buffer).
//
// Credits: the sender never has more than Slots messages the receiver has
// not consumed. Every header carries the sender's count of messages it has
// consumed from the peer (the credits it returns, piggybacked); an
// explicit credit message goes only when half the window is owed, when the
// engine has nothing else to do, and before a bye. So a ping-pong or a
// recursive-doubling exchange costs one write per message and nothing
// else.
//
// Direct (zero-copy) messages: a large send whose matching receive only
// stores the data (Op.ToCopy) skips the staging area. When such a receive
// becomes ready (its deps are done, so nothing reads or writes that range
// any more), the receiver sends a clear-to-send with the address and rkey
// of the destination inside its registered working buffer; the sender
// writes the payload there directly, then the usual header (marked direct)
// with immediate into a staging slot. Both sides decide "direct" from the
// op's length and call alone (Link.directMinOf: DirectMin, or
// tcpDirectMin for point-to-point messages and broadcasts on tcp), so
// they agree without negotiation.
//
// A data message whose header and payload fit a posted receive (recvSize:
// payloads up to sendMax) is a send instead of a write: it lands in the
// next receive buffer, and the receiver copies it into its slot. On shm a
// send this small travels in one ring record, so the receiver takes one
// cache miss for it, where a write costs the target slot's lines too.
//
// Where the connection has mailboxes (rdma.Mailbox: shm) and both hellos
// say so, a data message of at most mbMax bytes skips all of this: it is
// stored into a cell of the peer's mailbox and polled there (mailbox.go).
// Every data message carries its number on the link, so that the receiver
// takes them in order from either channel.
//
// Control messages (hello, credit, abort, bye, clear-to-send, mismatch
// evidence, wake) are inline sends that consume a posted receive; data
// notifications consume one too, so each side keeps 2·Slots+16 receives
// posted and reposts each as soon as it completes.
//
// Completions reach the link through its device's shared CQ (device.go):
// onRecv and onSend run under the device's pollMu, on whichever goroutine
// polled, and update the link's atomic counters; everything else belongs
// to the engine's goroutine.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/gorun-hpc/gorun/internal/release"
	"github.com/gorun-hpc/gorun/transport/rdma"
)

const (
	hdrSize  = 32
	ctrlSize = 32
	// hdrMagic is a hello's: "grN2" (2: a clear-to-send carries what the
	// receive wants, which an earlier build's does not, 2026-11-29); a
	// data header has its low half.
	hdrMagic = 0x67724e32
	// hdrMagic16 begins a data message's header; its next two bytes are
	// the message's number (message.go).
	hdrMagic16 = hdrMagic & 0xffff
	// smallMax is the largest payload copied behind its header and sent
	// in one unsignaled write, unless the device says otherwise
	// (Device.CopyMax). Such a message needs no completion: a payload
	// written from the caller's buffer does (it frees the buffer), and on
	// tcp that completion is the peer's acknowledgement frame, a round
	// trip the call waits for. 2 ranks over tcp, 4-16 KiB allreduce: 32-46
	// us with 2 KiB, 13-21 us with 16 KiB; shm level within the spread
	// (2026-11-24, interleaved allreduce_perf rounds).
	smallMax = 16 << 10
	// recvSize is a posted receive's buffer: a control message, or a data
	// message of up to sendMax payload bytes sent with its header.
	recvSize = 256
	sendMax  = recvSize - hdrSize
)

// control message types
const (
	ctrlHello      uint32 = iota + 1
	ctrlCredit            // b: messages consumed so far (cumulative)
	ctrlAbort             // rank a is the culprit, b the reason code; c: 0, or 1<<32 | the first collective it fails (Withdraw)
	ctrlBye               // the peer closed its communicator
	ctrlCTS               // clear to send: the next direct message goes to address b, rkey a; c: its length << 32 | its call's hash
	ctrlMismatch          // evidence: rank a (call hash b>>32, operation c>>32) saw rank c&0xffffffff send call hash b&0xffffffff
	ctrlReject            // the acceptor refuses the connection: reason a (connect.go)
	ctrlWake              // a message is in the mailbox of a receiver that sleeps (mailbox.go)
	ctrlWaiting           // rank a has waited in its operation c for this rank: its call's hash b (mismatch.go)
	ctrlDirectWait        // the peer waits for a clear-to-send for its data message number c: its length b >> 32, its call's hash b (mismatch.go)
	ctrlAbortText         // the words of the abort notice that follows, naming rank a: b bytes of text after the 24-byte header (failure.go)
	ctrlP2PWaiting        // a point-to-point Run of the peer's waits for this rank, having taken b&0xffffffff of its data messages and used b>>32&(1<<29-1) of its clear-to-sends, and waits for a message (bit 62) or a clear-to-send (bit 63), with a send to this rank left (bit 61); c: its own data messages to this rank (low half) and its call's hash; a: the number of the last label of this rank's it took (mismatch.go: p2pWaitWord)
	ctrlP2PLabel          // the peer's point-to-point Run waits, through a chain of such Runs, for rank a's (the highest rank it has heard of), whose Run is c&0xffffffff (Engine.runs), with its count c>>48, and which is c>>32&0xff ranks down the chain (at most 255); c>>40&0xff: the label's number; b: the receiver's word it answers (ctrlP2PWaiting's b), true when sent (mismatch.go: passLabels)
)

// ctrlJoinHello is a dialer's hello with its request (connect.go): the
// hello's fields packed to make room for the world and the rank dialed.
// Its high half is a magic number, since it replaces the hello's.
const ctrlJoinHello uint32 = 0x674a<<16 | 1

// ctsDepth bounds outstanding clear-to-send messages per link; the
// receiver clears at most this many direct receives ahead of the data.
const ctsDepth = 8

// LinkParams size a link's staging area.
type LinkParams struct {
	Slots     int // messages in flight per direction
	SlotBytes int // bytes per slot, header included; payload is SlotBytes-32
}

// Link is the connection to one peer.
type Link struct {
	Peer int
	conn rdma.Conn
	dev  *Device
	id   uint32 // the device's name for it in wrids

	stage    *rdma.MR // our receive staging
	slots    int
	slotSize int
	ctrlRecv *rdma.MR
	nrecv    int

	rAddr     uint64 // the peer's staging
	rKey      uint32
	rSlots    int
	rSlotSize int
	hdrs      *rdma.MR // header (and small payload) sources, one per remote slot
	inline    int      // conn.MaxInline(): a data send this long is posted FlagInline
	directMin int      // the smallest direct point-to-point message or broadcast (directMinFor)

	// The mailboxes (mailbox.go): mbConn is conn's, if it has them; mb is
	// set when the peer's hello says it has them too. Engine only.
	mbConn rdma.Mailbox
	mb     *mailbox

	// set by dispatch (onRecv, onSend)
	arrived  atomic.Uint64 // data messages landed in our staging
	credits  atomic.Uint64 // our messages the peer has consumed
	sendDone atomic.Uint64 // our messages whose header write completed
	closed   atomic.Bool   // the peer said bye
	broken   atomic.Bool   // the connection failed or ended
	recvOut  atomic.Bool   // the receive queue ended (flushed)
	recvEnd  chan struct{} // closed when recvOut is set (failure.go waits on it)

	// cts is a ring the watcher fills and the engine reads; atomic, since
	// what orders the engine's read of a slot before the watcher's next
	// write to it is the peer (the slot is reused only after the peer
	// consumed the message it cleared), which the race detector cannot see.
	cts [ctsDepth]struct {
		addr atomic.Uint64
		rkey atomic.Uint32
		want atomic.Uint64 // the receive's length << 32 | its call's hash (directWant)
	}
	ctsArrived atomic.Uint64 // clear-to-send messages received
	// peerDirect is the peer's last word that a Run of its waits for a
	// clear-to-send from this rank (ctrlDirectWait), nil if none: set by
	// the watcher, read by the engine (checkDirect).
	peerDirect atomic.Pointer[directWait]
	ctsUsed    uint64 // engine: clear-to-send messages used
	ctsSent    uint64 // engine: clear-to-sends sent to the peer
	directDone uint64 // engine: direct messages received (each used one)

	posted      uint64 // engine: data messages posted
	consumed    uint64 // engine: data messages applied
	creditsSent uint64 // engine: consumed as last told to the peer
	ctrl        [ctrlSize]byte
	// abortText is the text of the peer's next abort notice (ctrlAbortText),
	// which it sends just before that notice.
	abortText atomic.Pointer[abortText]

	sendMu  sync.Mutex    // serialises control sends from several goroutines
	byeSent chan struct{} // closed when the signaled bye has completed
	byeOnce sync.Once
	sendOut chan struct{} // closed when the send queue has ended
	outOnce sync.Once

	// Setup: ready is closed when the peer's hello has arrived or the
	// connection failed first (setupErr).
	ready    chan struct{}
	setupErr error
	hello    [ctrlSize]byte
	// On-demand connections (connect.go): joined is closed when the
	// dialer's join request has arrived, or the connection failed first
	// (joinErr, written before the close: setupErr may be written after a
	// join, by a failure that comes later).
	joined  chan struct{}
	join    [ctrlSize]byte
	joinErr error

	// The engine the link belongs to; events that need it before it is
	// attached wait in early (rare: failures, aborts during setup).
	eng   atomic.Pointer[Engine]
	engMu sync.Mutex
	early []func(*Engine)

	added bool    // in dev's dispatch table
	waker *Engine // woken by completions before the link is attached (connect.go)
}

// Establish runs the hello exchange on a connected conn, which must have
// been made with dev.QPInit(), and returns the link, which then knows its
// peer's rank.
func Establish(ctx context.Context, conn rdma.Conn, dev *Device, rank int, p LinkParams) (l *Link, err error) {
	if l, err = newLink(conn, dev, p, nil); err != nil {
		return nil, err
	}
	defer l.disposeIf(&err)
	if err = l.sendHello(rank); err != nil {
		return nil, err
	}
	return l, l.awaitHello(ctx)
}

// newLink allocates a link's staging and receive ring on conn, enters it
// in dev's dispatch table and posts its receives; waker (or nil) is the
// engine it is made for (connect.go). On error nothing stays allocated.
func newLink(conn rdma.Conn, dev *Device, p LinkParams, waker *Engine) (l *Link, err error) {
	if conn.MaxInline() < ctrlSize {
		return nil, fmt.Errorf("collectives: provider %s inlines only %d bytes, need %d", dev.Dev.Name(), conn.MaxInline(), ctrlSize)
	}
	p.SlotBytes = (max(p.SlotBytes, hdrSize+64) + 63) &^ 63
	l = &Link{Peer: -1, conn: conn, dev: dev, slots: max(p.Slots, 1), slotSize: p.SlotBytes, inline: conn.MaxInline(), directMin: directMinFor(dev.Dev.Name()),
		byeSent: make(chan struct{}), sendOut: make(chan struct{}), ready: make(chan struct{}), joined: make(chan struct{}), recvEnd: make(chan struct{}), waker: waker}
	defer l.disposeIf(&err)
	if l.stage, err = dev.Dev.Alloc(l.slots*l.slotSize, rdma.AccessLocalWrite|rdma.AccessRemoteWrite); err != nil {
		return nil, err
	}
	if mb, ok := conn.(rdma.Mailbox); ok {
		if in, _ := mb.Mailbox(); len(in) > 0 {
			l.mbConn = mb
		}
	}
	l.nrecv = 2*l.slots + ctsDepth + 8
	if l.ctrlRecv, err = dev.Dev.Alloc(l.nrecv*recvSize, rdma.AccessLocalWrite); err != nil {
		return nil, err
	}
	if err = dev.addLink(l); err != nil {
		return nil, err
	}
	l.added = true
	for i := range l.nrecv {
		if err = l.postRecv(uint64(i)); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// dispose undoes newLink after a failed setup. It closes the conn first:
// the flushed completions that the close produces must reach this link,
// not one that reuses its id once it is out of dispatch.
func (l *Link) dispose() {
	l.conn.Close()
	if l.added {
		l.dev.removeLink(l)
	}
	l.free()
}

// disposeIf disposes of l if *err is set (the setups defer it).
func (l *Link) disposeIf(err *error) {
	if *err != nil {
		l.dispose()
	}
}

// sendHello tells the peer this rank and where its staging is.
func (l *Link) sendHello(rank int) error {
	var hello [ctrlSize]byte
	binary.LittleEndian.PutUint32(hello[0:], ctrlHello)
	binary.LittleEndian.PutUint32(hello[4:], uint32(rank))
	binary.LittleEndian.PutUint64(hello[8:], l.stage.Addr())
	binary.LittleEndian.PutUint32(hello[16:], l.stage.RKey())
	slots := uint32(l.slots)
	if l.mbConn != nil {
		slots |= helloMailbox
	}
	binary.LittleEndian.PutUint32(hello[20:], slots)
	binary.LittleEndian.PutUint32(hello[24:], uint32(l.slotSize))
	binary.LittleEndian.PutUint32(hello[28:], hdrMagic)
	return l.conn.PostSend(wrid(l.id, kindCtrl, 0), hello[:], nil, rdma.FlagInline)
}

// takeHello takes the peer's rank and staging from a hello.
func (l *Link) takeHello(m []byte) error {
	if binary.LittleEndian.Uint32(m[28:]) != hdrMagic {
		return fmt.Errorf("collectives: bad hello (a peer of another gorun version?): %w", ErrProtocol)
	}
	l.Peer = int(binary.LittleEndian.Uint32(m[4:]))
	l.rAddr = binary.LittleEndian.Uint64(m[8:])
	l.rKey = binary.LittleEndian.Uint32(m[16:])
	slots := binary.LittleEndian.Uint32(m[20:])
	l.rSlots = int(slots &^ helloMailbox)
	l.rSlotSize = int(binary.LittleEndian.Uint32(m[24:]))
	if slots&helloMailbox != 0 && l.mbConn != nil && l.slots+l.rSlots+mbCells < 1<<15 {
		// (The header's message number is 16 bits: fewer messages than
		// that are ever in flight on a link.)
		l.mb = newMailbox(l.mbConn)
	}
	return nil
}

// helloMailbox, in a hello's slot count, says that the sender's connection
// has mailboxes (mailbox.go): both sides use them if both say so.
const helloMailbox = 1 << 31

// awaitHello waits for the peer's hello and takes its rank and staging.
func (l *Link) awaitHello(ctx context.Context) (err error) {
	select {
	case <-l.ready:
	case <-ctx.Done():
		return ctx.Err()
	}
	if l.setupErr != nil {
		return l.setupErr
	}
	if err = l.takeHello(l.hello[:]); err != nil {
		return err
	}
	if l.rSlots < 1 || l.rSlotSize < hdrSize+64 {
		name := l.Peer
		if l.waker != nil {
			name = l.waker.Name(l.Peer)
		}
		return fmt.Errorf("collectives: bad hello from rank %d: %w", name, ErrProtocol)
	}
	l.hdrs, err = l.dev.Dev.Alloc(l.rSlots*l.hdrStride(), rdma.AccessLocalWrite)
	return err
}

// hdrStride is the size of one remote slot's header source: the header and
// a small payload.
func (l *Link) hdrStride() int { return hdrSize + min(l.dev.copyMax(), l.rSlotSize-hdrSize) }

func (l *Link) ctrlMsg(i uint64) []byte {
	b := l.ctrlRecv.Bytes()
	return b[int(i)*recvSize : int(i+1)*recvSize]
}

func (l *Link) postRecv(i uint64) error {
	return l.conn.PostRecv(wrid(l.id, kindRecv, i), l.ctrlMsg(i), l.ctrlRecv)
}

// payload is the largest data message the peer accepts.
func (l *Link) payload() int { return l.rSlotSize - hdrSize }

// sendCtrl posts an inline control message.
func (l *Link) sendCtrl(typ, a uint32, b uint64) error {
	return l.sendCtrl3(typ, a, b, 0)
}

// sendCtrl3 posts an inline control message with a third field.
func (l *Link) sendCtrl3(typ, a uint32, b, c uint64) error {
	l.sendMu.Lock()
	defer l.sendMu.Unlock()
	binary.LittleEndian.PutUint32(l.ctrl[0:], typ)
	binary.LittleEndian.PutUint32(l.ctrl[4:], a)
	binary.LittleEndian.PutUint64(l.ctrl[8:], b)
	binary.LittleEndian.PutUint64(l.ctrl[16:], c)
	flags, id := rdma.FlagInline, wrid(l.id, kindCtrl, 0)
	if typ == ctrlBye {
		flags, id = flags|rdma.FlagSignaled, wrid(l.id, kindBye, 0)
	}
	return l.conn.PostSend(id, l.ctrl[:24], nil, flags)
}

// abortText is the text a peer sent ahead of its abort notice naming
// culprit.
type abortText struct {
	culprit int
	text    string
}

// sendAbort posts an abort notice naming culprit, of reason code and, if
// text is not empty, in those words (ctrlAbortText, first), cut to what
// one inline message holds; from as in ctrlAbort's c. Best effort.
func (l *Link) sendAbort(culprit int, code uint32, text string, from uint64) {
	n := min(len(text), min(l.inline, recvSize)-24)
	for n > 0 && n < len(text) && !utf8.RuneStart(text[n]) {
		n-- // not in the middle of a character
	}
	if n > 0 {
		var m [recvSize]byte
		binary.LittleEndian.PutUint32(m[0:], ctrlAbortText)
		binary.LittleEndian.PutUint32(m[4:], uint32(int32(culprit)))
		binary.LittleEndian.PutUint64(m[8:], uint64(n))
		copy(m[24:], text[:n])
		l.sendMu.Lock()
		l.conn.PostSend(wrid(l.id, kindCtrl, 0), m[:24+n], nil, rdma.FlagInline) // best effort
		l.sendMu.Unlock()
	}
	l.sendCtrl3(ctrlAbort, uint32(int32(culprit)), uint64(code), from) // best effort
}

// withEngine runs f with the link's engine, or when it is attached.
func (l *Link) withEngine(f func(*Engine)) {
	if e := l.eng.Load(); e != nil {
		f(e)
		return
	}
	l.engMu.Lock()
	if e := l.eng.Load(); e != nil {
		l.engMu.Unlock()
		f(e)
		return
	}
	l.early = append(l.early, f)
	l.engMu.Unlock()
}

// attach makes e the link's engine and replays what waited for it.
func (l *Link) attach(e *Engine) {
	l.engMu.Lock()
	l.eng.Store(e)
	early := l.early
	l.early = nil
	l.engMu.Unlock()
	for _, f := range early {
		f(e)
	}
}

// wakeEngine wakes the link's engine if it sleeps. self is the engine
// whose poll dispatched the completion (nil: the watcher, or a failure):
// that engine looks at its links again after its poll, so it needs no
// wake-up, and the link's counters need no locked store for it (the
// release stores of onRecv and onSend: a Run that polls its own
// messages pays no locked instruction for them).
func (l *Link) wakeEngine(self *Engine) {
	e := l.eng.Load()
	if e == nil {
		// Not attached yet (connect.go): the engine it will join may be
		// asleep on the CQ arm that this completion used up.
		e = l.waker
	}
	if e == nil || e == self {
		return
	}
	// Dekker's fence (fence_norace.go): the counters were published with
	// release stores, which a load of sleeping may pass.
	fullFence()
	if e.sleeping.Load() {
		e.poke()
	}
}

// setupFailed ends a pending Establish with err.
func (l *Link) setupFailed(err error) {
	select {
	case <-l.ready:
	default:
		l.setupErr = err
		close(l.ready)
	}
	select {
	case <-l.joined:
	default:
		l.joinErr = err
		close(l.joined)
	}
}

// onRecv handles a receive completion (slot is the control slot); self
// is the engine that polled, or nil (wakeEngine).
func (l *Link) onRecv(wc *rdma.WC, slot uint64, self *Engine) {
	if wc.Status != rdma.StatusSuccess {
		err := wc.Err()
		if cerr := l.conn.Err(); cerr != nil {
			err = cerr
		}
		l.recvFailed(err)
		return
	}
	switch wc.Opcode {
	case rdma.OpRecvWriteImm:
		n := l.arrived.Load()
		if uint32(n) != wc.Imm {
			l.fail(fmt.Errorf("message %d arrived out of order: %w", wc.Imm, ErrProtocol), true)
			return
		}
		h := l.stage.Bytes()[int(n%uint64(l.slots))*l.slotSize:]
		if binary.LittleEndian.Uint16(h[0:]) == hdrMagic16 {
			l.noteCredits(binary.LittleEndian.Uint32(h[20:]))
		}
		release.Store64(&l.arrived, n+1)
	case rdma.OpRecv:
		m := l.ctrlMsg(slot)
		a, b := binary.LittleEndian.Uint32(m[4:]), binary.LittleEndian.Uint64(m[8:])
		typ := binary.LittleEndian.Uint32(m[0:])
		if uint16(typ) == hdrMagic16 {
			typ = hdrMagic
		}
		switch typ {
		case hdrMagic: // a small data message: into its slot
			n := l.arrived.Load()
			if wc.ByteLen < hdrSize || wc.ByteLen > min(recvSize, l.slotSize) {
				l.fail(fmt.Errorf("%d-byte data message: %w", wc.ByteLen, ErrProtocol), true)
				return
			}
			copy(l.stage.Bytes()[int(n%uint64(l.slots))*l.slotSize:], m[:wc.ByteLen])
			l.noteCredits(binary.LittleEndian.Uint32(m[20:]))
			release.Store64(&l.arrived, n+1)
		case ctrlHello:
			select {
			case <-l.ready:
			default:
				copy(l.hello[:], m)
				close(l.ready)
			}
		case ctrlJoinHello:
			select {
			case <-l.joined:
			default:
				copy(l.join[:], m)
				close(l.joined)
			}
		case ctrlReject:
			l.setupFailed(rejectErr(a))
		case ctrlCredit:
			l.noteCredits(uint32(b))
		case ctrlAbortText:
			if wc.ByteLen >= 24 && b <= uint64(wc.ByteLen-24) { // ByteLen <= recvSize: the posted buffer
				l.abortText.Store(&abortText{culprit: int(int32(a)), text: string(m[24 : 24+b])})
			}
		case ctrlAbort:
			culprit, from := int(int32(a)), binary.LittleEndian.Uint64(m[16:])
			err := reasonErr(uint32(b))
			if t := l.abortText.Swap(nil); t != nil && t.culprit == culprit {
				err = &givenReason{kind: err, text: t.text}
			}
			l.withEngine(func(e *Engine) {
				if from == 0 {
					e.Abort(culprit, err)
				} else {
					e.deferAbort(culprit, err, uint32(from))
				}
			})
		case ctrlMismatch:
			c := binary.LittleEndian.Uint64(m[16:])
			l.withEngine(func(e *Engine) {
				e.evidence(int(int32(a)), uint32(b>>32), int(int32(uint32(c))), uint32(b), uint32(c>>32), "")
			})
		case ctrlWaiting:
			op := binary.LittleEndian.Uint64(m[16:])
			l.withEngine(func(e *Engine) { e.waitedOn(int(int32(a)), uint32(b), uint32(op)) })
		case ctrlP2PWaiting:
			c := binary.LittleEndian.Uint64(m[16:])
			l.withEngine(func(e *Engine) { e.p2pWaitedOn(l.Peer, uint8(a), b, c) })
		case ctrlP2PLabel:
			c := binary.LittleEndian.Uint64(m[16:])
			l.withEngine(func(e *Engine) { e.p2pLabeled(l.Peer, a, b, c) })
		case ctrlBye:
			l.closed.Store(true)
		case ctrlWake:
			// wakeEngine, below, wakes the engine if it sleeps.
		case ctrlCTS:
			n := l.ctsArrived.Load()
			l.cts[n%ctsDepth].addr.Store(b)
			l.cts[n%ctsDepth].rkey.Store(a)
			l.cts[n%ctsDepth].want.Store(binary.LittleEndian.Uint64(m[16:]))
			l.ctsArrived.Store(n + 1)
		case ctrlDirectWait:
			l.peerDirect.Store(&directWait{number: binary.LittleEndian.Uint64(m[16:]), want: b})
		}
	}
	if err := l.postRecv(slot); err != nil && !errors.Is(err, rdma.ErrClosed) {
		// The connection ended if ErrClosed: its flushes follow.
		l.fail(err, true)
		return
	}
	l.wakeEngine(self)
}

// noteCredits takes the peer's cumulative consumed count (its low 32
// bits); credits only grow.
func (l *Link) noteCredits(v uint32) {
	cur := l.credits.Load()
	if d := v - uint32(cur); d != 0 && d < 1<<31 {
		release.Store64(&l.credits, cur+uint64(d)) // under pollMu: one writer at a time
	}
}

// onSend handles a send-queue completion; self as for onRecv.
func (l *Link) onSend(wc *rdma.WC, kind, value uint64, self *Engine) {
	if wc.Status != rdma.StatusSuccess {
		l.broken.Store(true)
		l.outOnce.Do(func() { close(l.sendOut) })
		// A connection that ended (flushed) is judged by the receive
		// side, which sees the peer's bye, if it said one, first.
		if wc.Status != rdma.StatusFlushed {
			err := error(&rdma.WCError{WC: *wc})
			if cerr := l.conn.Err(); cerr != nil {
				err = cerr
			}
			l.fail(err, false)
		}
		l.wakeEngine(nil)
		return
	}
	switch kind {
	case kindData:
		release.Store64(&l.sendDone, value+1)
	case kindBye:
		l.byeOnce.Do(func() { close(l.byeSent) })
	}
	l.wakeEngine(self)
}

// recvFailed ends the receive queue with err, the connection's failure
// (a flushed receive, or the CQ's, Device.failCQ); pollMu is held.
func (l *Link) recvFailed(err error) {
	l.broken.Store(true)
	if l.recvOut.CompareAndSwap(false, true) {
		close(l.recvEnd)
	}
	// Wake the engine either way: a link not yet attached has used up
	// the CQ arm it may sleep on (an attached one that failed wakes it
	// through the abort).
	l.recvEnded(err)
	l.wakeEngine(nil)
}

// recvEnded handles the end of the receive queue (the first flushed
// receive). It reports whether the engine should look again.
func (l *Link) recvEnded(err error) bool {
	if l.closed.Load() {
		// The peer said bye: everything it sent arrived before.
		return true
	}
	l.fail(err, true)
	return false
}

// fail reports the connection broken: a pending Establish fails, and the
// engine (once attached) blames the peer unless it said bye.
func (l *Link) fail(err error, fromRecv bool) {
	l.broken.Store(true)
	l.setupFailed(err)
	l.withEngine(func(e *Engine) {
		if fromRecv {
			e.linkFailed(l, err, true)
		} else {
			go e.linkFailed(l, err, false) // waits a moment for a bye
		}
	})
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
	l.dev.removeLink(l)
	l.free()
}

// Window is the payload bytes a peer with staging p accepts before it must
// return credits: a schedule op larger than this is split across credit
// round trips, so chunks should not exceed it.
func Window(p LinkParams) int {
	p.SlotBytes = (max(p.SlotBytes, hdrSize+64) + 63) &^ 63
	return max(1, p.Slots) * (p.SlotBytes - hdrSize)
}
