package engine

// Messages: how one schedule op becomes staging-slot messages (or one
// direct write), and the header that carries the call's signature.

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/gorun-hpc/gorun/collectives"
	"github.com/gorun-hpc/gorun/internal/kernels"
	"github.com/gorun-hpc/gorun/transport/rdma"
)

func pieces(nbytes, payload int) int {
	if nbytes == 0 {
		return 1
	}
	return (nbytes + payload - 1) / payload
}

// post posts as many pieces of send o as the peer's credits allow. When o
// is complete, last is the message whose completion (or consumption)
// means the caller's buffer is no longer read: the last piece posted
// from the buffer itself, 0 when every piece was copied at post time. A
// piece copied at post time may be the unsignaled kind, which never
// completes: waiting for it would wait for the peer to consume it, and a
// peer that reduces into the range it sends from (recursive doubling)
// waits for this rank's consumption in turn.
func (e *Engine) post(l *Link, o *collectives.Op, call *Call, ps *peerState, es int) (moved, complete bool, last uint64, err error) {
	nbytes := o.Len * es
	payload := l.payload()
	np := pieces(nbytes, payload)
	buf := call.Work
	if o.Buf == collectives.Input {
		buf = call.Input
	}
	rs := uint64(l.rSlots)
	stride := l.hdrStride()
	direct := o.ToCopy && nbytes >= l.directMinOf(call)
	if direct {
		if ps.refused {
			return false, false, 0, nil // the peer decides (refuseDirect)
		}
		np = 1
	}
	sig := call.sig(o)
	if ps.sendPiece == 0 {
		ps.sendRead = 0
		// A few bytes go through the peer's mailbox (mailbox.go).
		if l.mb != nil && nbytes <= mbMax && !direct {
			ok, wake := l.mb.write(sig, l.number(), buf[o.Off*es:o.Off*es+nbytes])
			if ok {
				if wake {
					if err := l.sendCtrl(ctrlWake, 0, 0); err != nil && !l.closed.Load() {
						return true, false, 0, err
					}
				}
				ps.sendPiece = np
				return true, true, 0, nil
			}
		}
	}
	for ps.sendPiece < np {
		// The peer's credits bound the messages in flight, and also free
		// the header source of slot m: the message that used it last
		// (m-rs) has been consumed, so its send has completed.
		m := l.posted
		if m-l.credits.Load() >= rs {
			return moved, false, 0, nil
		}
		slot := m % rs
		hb := l.hdrs.Bytes()[int(slot)*stride : int(slot+1)*stride]
		raddr := l.rAddr + slot*uint64(l.rSlotSize)
		if direct {
			if l.ctsArrived.Load() <= l.ctsUsed {
				return moved, false, 0, nil
			}
			cts := &l.cts[l.ctsUsed%ctsDepth]
			ctsAddr, ctsKey := cts.addr.Load(), cts.rkey.Load()
			if cts.want.Load() != directWant(nbytes, sig) {
				return true, false, 0, e.refuseDirect(l, hb, raddr, sig, nbytes, ps)
			}
			src := buf[o.Off*es : o.Off*es+nbytes]
			mr, err := e.bufMR(l.dev, call, o.Buf)
			if err != nil {
				return moved, false, 0, err
			}
			for off := 0; off < nbytes; off += maxWrite {
				part := src[off:min(nbytes, off+maxWrite)]
				if err := l.conn.PostWrite(wrid(l.id, kindCtrl, 0), part, mr, 0, ctsAddr+uint64(off), ctsKey); err != nil {
					return moved, false, 0, err
				}
			}
			e.putHeader(l, hb, sig, nbytes, true)
			if err := l.conn.PostWriteImm(wrid(l.id, kindData, m), hb[:hdrSize], l.hdrs, rdma.FlagSignaled, raddr, l.rKey, uint32(m)); err != nil {
				return moved, false, 0, err
			}
			l.ctsUsed++
			l.posted++
			ps.sendPiece++
			return true, true, l.posted, nil
		}
		off := ps.sendPiece * payload
		n := min(payload, nbytes-off)
		src := buf[o.Off*es+off : o.Off*es+off+n]
		e.putHeader(l, hb, sig, n, false)
		h := hb[:hdrSize]
		if n <= sendMax {
			// Small: header and payload in one send (link.go), unsignaled:
			// the slot's header source is reused only once the peer has
			// consumed the message (credits), and nothing else waits for
			// its completion. Inline where the provider takes it: shm then
			// takes and drops no reference to l.hdrs (two locked
			// instructions of a message's ~25).
			copy(hb[hdrSize:], src)
			var flags rdma.Flags
			if hdrSize+n <= l.inline {
				flags = rdma.FlagInline
			}
			if err := l.conn.PostSend(wrid(l.id, kindCtrl, 0), hb[:hdrSize+n], l.hdrs, flags); err != nil {
				return moved, false, 0, err
			}
			l.posted++
			ps.sendPiece++
			moved = true
			continue
		}
		flags := rdma.FlagSignaled
		if n <= stride-hdrSize {
			// Small: the payload rides in the header's write, unsignaled
			// as a small send is: nothing waits for its completion (the
			// slot's header source is reused once the peer has consumed
			// the message), and on tcp a signaled write costs the peer an
			// acknowledgement frame and this rank the read of it.
			copy(hb[hdrSize:], src)
			h = hb[:hdrSize+n]
			flags = 0
		} else {
			mr, err := e.bufMR(l.dev, call, o.Buf)
			if err != nil {
				return moved, false, 0, err
			}
			if err := l.conn.PostWrite(wrid(l.id, kindCtrl, 0), src, mr, 0, raddr+hdrSize, l.rKey); err != nil {
				return moved, false, 0, err
			}
			ps.sendRead = m + 1 // the signaled header write after it completes after it
		}
		if err := l.conn.PostWriteImm(wrid(l.id, kindData, m), h, l.hdrs, flags, raddr, l.rKey, uint32(m)); err != nil {
			return moved, false, 0, err
		}
		l.posted++
		ps.sendPiece++
		moved = true
	}
	return moved, true, ps.sendRead, nil
}

// sig is the signature o's messages carry: the call's own, or one of
// its Sigs (Op.Sig).
func (c *Call) sig(o *collectives.Op) *Call {
	if o.Sig != 0 {
		return &c.Sigs[o.Sig-1]
	}
	return c
}

func isDirectRecv(l *Link, call *Call, o *collectives.Op, es int) bool {
	return o.Kind == collectives.Recv && o.Len*es >= l.directMinOf(call)
}

// directWant is what a direct message of n bytes of call c is, as its
// receiver's clear-to-send and its sender's ctrlDirectWait say it: its
// length << 32 | its call's hash.
func directWant(n int, c *Call) uint64 { return uint64(uint32(n))<<32 | uint64(callHash(c)) }

// refuseDirect sends the header of a direct message whose receiver
// cleared another one (another length or call: a point-to-point call with
// another count, a collective with another count or root), without its
// data: a write past the receive's buffer would fail the connection with a
// remote access error, and one within it would overwrite the buffer with
// another call's data. The receiver checks the header (consume), finds
// the difference and names this rank, as for a staged message; this
// send waits for that decision (ps.refused), which fails the engine.
func (e *Engine) refuseDirect(l *Link, hb []byte, raddr uint64, sig *Call, nbytes int, ps *peerState) error {
	e.putHeader(l, hb, sig, nbytes, true)
	m := l.posted
	if err := l.conn.PostWriteImm(wrid(l.id, kindData, m), hb[:hdrSize], l.hdrs, rdma.FlagSignaled, raddr, l.rKey, uint32(m)); err != nil {
		return err
	}
	l.ctsUsed++
	l.posted++
	ps.refused = true
	return nil
}

// clearAhead sends clear-to-sends for the direct receives from pp's peer,
// in order, from the first not yet cleared on, as far as their deps are
// done and the peer has room (ctsDepth) — ahead of the data, so that a
// pipeline does not pay a round trip per chunk. A receive whose deps are
// done may be written at any time: nothing reads or writes its range.
func (e *Engine) clearAhead(l *Link, p *Plan, pp *planPeer, ps *peerState, call *Call, es int) (moved bool, err error) {
	for ps.ctsCur = max(ps.ctsCur, ps.recvCur); ps.ctsCur < len(pp.recvs); ps.ctsCur++ {
		o := &p.S.Ops[pp.recvs[ps.ctsCur]]
		if !isDirectRecv(l, call, o, es) {
			continue
		}
		if !e.st.ready(o) || l.ctsSent-l.directDone >= ctsDepth {
			return moved, nil
		}
		dst := call.Work[o.Off*es : o.Off*es+o.Len*es]
		mr, err := e.bufMR(l.dev, call, collectives.Work)
		if err != nil {
			return moved, err
		}
		if err := l.sendCtrl3(ctrlCTS, mr.RKey(), rdma.AddrOf(dst), directWant(len(dst), call.sig(o))); err != nil && !l.closed.Load() {
			e.blameLink(l, err)
			return moved, err
		}
		l.ctsSent++
		moved = true
	}
	return moved, nil
}

// consume applies arrived messages to receive o.
func (e *Engine) consume(l *Link, o *collectives.Op, call *Call, ps *peerState, es int) (moved, complete bool, err error) {
	nbytes := o.Len * es
	payload := l.slotSize - hdrSize
	np := pieces(nbytes, payload)
	direct := isDirectRecv(l, call, o, es)
	if direct {
		np = 1 // its clear-to-send went out from clearAhead
	}
	stage := l.stage.Bytes()
	sig := call.sig(o)
	for ps.recvPiece < np {
		// The next message, from the mailbox or the staged channel,
		// whichever has it (mailbox.go).
		staged := l.consumed < l.arrived.Load()
		off := ps.recvPiece * payload
		want := min(payload, nbytes-off)
		if direct {
			want = nbytes
		}
		var h, src []byte
		cell := l.mb.next()
		base := int(l.consumed%uint64(l.slots)) * l.slotSize
		if cell != nil && headerNumber(cell[cellHdr:]) != l.nextNumber() {
			cell = nil // a later one: the next is staged
		}
		if staged && l.mb != nil && cell == nil && headerNumber(stage[base:]) != l.nextNumber() {
			staged = false // a later one: the next is in the mailbox
		}
		switch {
		case cell != nil:
			h, src = cell[cellHdr:cellPayload], cell[cellPayload:]
			if want > len(src) && !direct && checkHeader(h, sig, want, direct) == "" {
				// A cell holds mbMax bytes: no writer says more.
				e.fail(&PeerError{Rank: l.Peer, Err: fmt.Errorf("%d-byte mailbox message: %w", want, ErrProtocol)}, 0)
				return moved, false, ErrProtocol
			}
		case staged:
			h, src = stage[base:base+hdrSize], stage[base+hdrSize:base+l.slotSize]
		default:
			return moved, false, nil
		}
		if diff := checkHeader(h, sig, want, direct); diff != "" {
			return moved, false, e.mismatched(l, h, sig, diff)
		}
		var t int64
		if statsBuilt && call.Stats != nil {
			t = call.Stats.message()
		}
		if want > 0 && !direct {
			dst := call.Work[o.Off*es+off : o.Off*es+off+want]
			src := src[:want]
			if o.Kind == collectives.RecvReduce {
				if o.FromInput { // the range's first write (collectives.ReadInput)
					kernels.ReduceBytesTo(call.DType, call.Op, dst, call.Input[o.Off*es+off:o.Off*es+off+want], src)
				} else {
					kernels.ReduceBytes(call.DType, call.Op, dst, src)
				}
				if statsBuilt && call.Stats != nil {
					call.Stats.reduceDone(t)
				}
			} else {
				copy(dst, src)
			}
		}
		ps.recvPiece++
		moved = true
		if cell != nil {
			l.mb.took()
			continue
		}
		l.consumed++
		if direct {
			l.directDone++
		}
		if l.consumed-l.creditsSent >= uint64(max(1, l.slots/2)) {
			if err := e.sendCredits(l); err != nil {
				return moved, false, err
			}
		}
	}
	return moved, true, nil
}

// mismatched fails the engine with ErrMismatch: h, the header of l's next
// message, belongs to another call than sig (diff says how). It gives the
// evidence to every rank and waits for their decision of which rank is
// the odd one out (mismatch.go); an abort notice may also overtake it.
// Meanwhile this goroutine keeps dispatching, or the others' evidence
// would not be read.
func (e *Engine) mismatched(l *Link, h []byte, sig *Call, diff string) error {
	return e.mismatchedHash(l, headerHash(h), sig, e.nameRoots(h, sig, diff))
}

// nameRoots is checkHeader's diff with the roots of a rooted collective
// in the engine's names (NameRanks); checkHeader, on every message's
// path, leaves them as numbers.
func (e *Engine) nameRoots(h []byte, c *Call, diff string) string {
	switch c.Coll {
	case collectives.Reduce, collectives.Broadcast, collectives.Gather, collectives.Scatter, collectives.GatherV, collectives.ScatterV:
	default:
		return diff
	}
	theirs := int(int32(binary.LittleEndian.Uint32(h[12:])))
	if words := fmt.Sprintf("root %d, this rank %d", theirs, c.Root); e.names.Load() == nil || diff != words {
		return diff
	}
	return fmt.Sprintf("root %d, this rank %d", e.Name(theirs), e.Name(c.Root))
}

// mismatchedHash is mismatched for a peer's call known by its hash.
func (e *Engine) mismatchedHash(l *Link, theirs uint32, sig *Call, diff string) error {
	why := fmt.Sprintf("rank %d disagrees with rank %d: %s", e.Name(l.Peer), e.Name(e.Rank), diff)
	e.evidence(e.Rank, callHash(sig), l.Peer, theirs, opOf(sig), why)
	wait, stop := context.WithTimeout(context.Background(), (mismatchWaits+1)*mismatchWindow)
	for e.Err() == nil && wait.Err() == nil {
		e.pollOrSleep(wait)
		if e.pending.Load() != nil && e.admit(sig) != nil {
			break // a withdrawal that reaches this call (Withdraw): its sender's own failure
		}
	}
	stop()
	e.fail(&PeerError{Rank: l.Peer, Err: fmt.Errorf("%w: %s", ErrMismatch, why)}, 0)
	return ErrMismatch
}

// peek returns the header of l's next data message if it has arrived
// (from the mailbox or the staged channel, as consume takes it), else nil.
func (l *Link) peek() []byte {
	if cell := l.mb.next(); cell != nil && headerNumber(cell[cellHdr:]) == l.nextNumber() {
		return cell[cellHdr:cellPayload]
	}
	if l.consumed < l.arrived.Load() {
		base := int(l.consumed%uint64(l.slots)) * l.slotSize
		if h := l.stage.Bytes()[base : base+hdrSize]; l.mb == nil || headerNumber(h) == l.nextNumber() {
			return h
		}
	}
	return nil
}

// stray looks for a message of the running collective call from another
// call: the next message of any link, with call's operation number but
// another signature (a root, count, type, op or collective of its own). A
// receive checks the header of the message it takes (consume), but a
// rank given another root or count may wait on links that never carry
// anything, while the message that shows the disagreement waits on a
// link its schedule does not read now, or ever: a broadcast whose ranks
// disagree on the root would time out naming the wrong rank. Run calls
// it where it has waited strayAfter (wait.go), never on its fast path.
func (e *Engine) stray(call *Call) error {
	if call.Coll == collectives.SendRecv {
		return nil // point-to-point messages have operation numbers per peer
	}
	var want uint32
	hashed := false
	for _, l := range *e.linkList.Load() {
		h := l.peek()
		if h == nil || collectives.Collective(h[8]) == collectives.SendRecv || binary.LittleEndian.Uint32(h[4:]) != call.Seq {
			continue
		}
		if !hashed {
			want, hashed = callHash(call), true
		}
		if headerHash(h) != want {
			return e.mismatched(l, h, call, checkHeader(h, call, int(binary.LittleEndian.Uint32(h[16:])), h[11] == 1))
		}
	}
	return nil
}

// sendCredits tells l's peer how many of its messages have been consumed.
// Headers carry the count too, so this goes only when half the window is
// owed, when the engine is idle (flushOwed) and before a bye.
func (e *Engine) sendCredits(l *Link) error {
	if l.consumed == l.creditsSent {
		return nil
	}
	l.creditsSent = l.consumed
	if err := l.sendCtrl(ctrlCredit, 0, l.consumed); err != nil && !l.closed.Load() {
		// A peer that has closed wants no credits: it took the last of
		// this rank's messages it needed and said bye, and that notice may
		// be among the completions not yet handled (drain). Only a peer
		// that has not said so has failed.
		e.drain()
		if l.closed.Load() {
			return nil
		}
		e.blameLink(l, err)
		return err
	}
	return nil
}

// flushOwed returns every credit owed to p's peers: an engine with nothing
// to do might otherwise wait on a peer that waits for credits.
func (e *Engine) flushOwed(p *Plan) error {
	for i := range p.peers {
		l := e.links[p.peers[i].peer].Load()
		l.mb.tell()
		if err := e.sendCredits(l); err != nil {
			return e.Err()
		}
	}
	return nil
}

// Header layout (little endian): magic u16, number u16, seq u32, coll u8,
// dtype u8, op u8, direct u8, root i32, len u32, credits u32, count u64.
// number is the message's on its link, staged and mailbox messages
// counted together (Link.number), mod 2^16: the receiver takes the next
// one from whichever channel has it (mailbox.go). credits is the sender's
// count of the receiver's staged messages it has consumed (a mailbox
// message carries none).
func (e *Engine) putHeader(l *Link, h []byte, c *Call, n int, direct bool) {
	putHeader(h, c, n, direct)
	binary.LittleEndian.PutUint16(h[2:], uint16(l.number()))
	binary.LittleEndian.PutUint32(h[20:], uint32(l.consumed))
	l.creditsSent = l.consumed
}

// number is the number of l's next data message (header's number field).
func (l *Link) number() uint64 {
	if l.mb != nil {
		return l.posted + l.mb.sent
	}
	return l.posted
}

// nextNumber is the number of the data message l's receiver takes next.
func (l *Link) nextNumber() uint16 {
	if l.mb != nil {
		return uint16(l.consumed + l.mb.read)
	}
	return uint16(l.consumed)
}

// nextFull is nextNumber to 64 bits: the count of l's data messages
// this rank has taken.
func (l *Link) nextFull() uint64 {
	if l.mb != nil {
		return l.consumed + l.mb.read
	}
	return l.consumed
}

// headerNumber is a header's number field.
func headerNumber(h []byte) uint16 { return binary.LittleEndian.Uint16(h[2:]) }

func putHeader(h []byte, c *Call, n int, direct bool) {
	binary.LittleEndian.PutUint16(h[0:], hdrMagic16)
	binary.LittleEndian.PutUint32(h[4:], c.Seq)
	var d byte
	if direct {
		d = 1
	}
	h[8], h[9], h[10], h[11] = byte(c.Coll), byte(c.DType), byte(c.Op), d
	binary.LittleEndian.PutUint32(h[12:], uint32(int32(c.Root)))
	binary.LittleEndian.PutUint32(h[16:], uint32(n))
	binary.LittleEndian.PutUint64(h[24:], uint64(c.Count))
}

// checkHeader returns "" if h matches c and a payload of want bytes, or
// what differs.
func checkHeader(h []byte, c *Call, want int, direct bool) string {
	if binary.LittleEndian.Uint16(h[0:]) != hdrMagic16 {
		return "corrupt header"
	}
	coll := collectives.Collective(h[8])
	switch {
	case coll != c.Coll:
		return fmt.Sprintf("it called %s, this rank %s", coll, c.Coll)
	case binary.LittleEndian.Uint32(h[4:]) != c.Seq:
		return fmt.Sprintf("it is at operation %d, this rank at %d", binary.LittleEndian.Uint32(h[4:]), c.Seq)
	case kernels.DType(h[9]) != c.DType:
		return fmt.Sprintf("element type %s, this rank %s", kernels.DType(h[9]), c.DType)
	case kernels.Op(h[10]) != c.Op:
		return fmt.Sprintf("op %s, this rank %s", kernels.Op(h[10]), c.Op)
	case int(int32(binary.LittleEndian.Uint32(h[12:]))) != c.Root:
		what := "root"
		if c.Coll == collectives.SendRecv {
			what = "tag"
		}
		return fmt.Sprintf("%s %d, this rank %d", what, int32(binary.LittleEndian.Uint32(h[12:])), c.Root)
	case binary.LittleEndian.Uint64(h[24:]) != uint64(c.Count):
		return fmt.Sprintf("count %d, this rank %d", binary.LittleEndian.Uint64(h[24:]), c.Count)
	case (h[11] == 1) != direct:
		return "it sent a direct message where this rank expects a staged one, or the reverse"
	case int(binary.LittleEndian.Uint32(h[16:])) != want:
		return fmt.Sprintf("message of %d bytes, this rank expects %d", binary.LittleEndian.Uint32(h[16:]), want)
	}
	return ""
}

// headerHash identifies the call a header belongs to (everything but the
// message's own length and direct flag): seq, coll, dtype and op, root,
// count, each word through a 64-bit finalizer (murmur3's fmix64). Every
// Run hashes its call (callHash): three multiplications per word cost a
// few nanoseconds, where the byte-wise FNV-1a it replaces cost ~25.
func headerHash(h []byte) uint32 {
	a := binary.LittleEndian.Uint64(h[4:]) &^ (0xff << 56) // bytes 4-10
	b := uint64(binary.LittleEndian.Uint32(h[12:]))
	c := binary.LittleEndian.Uint64(h[24:])
	return uint32(fmix64(fmix64(fmix64(c)^b)^a) >> 16)
}

func fmix64(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	return x ^ x>>33
}

// callHash is headerHash of c's own header.
func callHash(c *Call) uint32 {
	var h [hdrSize]byte
	putHeader(h[:], c, 0, false)
	return headerHash(h[:])
}
