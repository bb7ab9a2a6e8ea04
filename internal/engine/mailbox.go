package engine

// Mailboxes: the fast path of a message of a few bytes between two ranks
// whose connection maps memory of both (rdma.Mailbox: shm).
//
// A data message of at most mbMax payload bytes (472) is written with
// plain stores into the next cell of the peer's mailbox: its number plus
// one (stored last, a release store), the usual 32-byte header, the
// payload; one cache line for up to 24 payload bytes. The receiver polls
// the cell of the next number it expects in its own mailbox, on the
// goroutine that runs the collective: no post, no ring record, no
// completion, no dispatch, no repost, where a send costs all of them
// (shm, 2 ranks, 8 B allreduce, README). Cells are
// reused in turn; the receiver publishes how many it has read every
// mbCells/2 messages and when it goes idle, and a writer whose next cell
// may still be unread looks at that count again, then sends through the
// queues instead.
//
// Cells have their own sequence (a cell is full when its word holds the
// next cell number plus one), and every data message, staged or in a cell,
// also carries its number on the link (the header's number field,
// message.go): a receiver takes the next number from whichever channel
// has it, so the two sides need not agree on the channel, and a writer
// whose mailbox is full goes on through the queues without waiting. A
// mismatched call (another length) is still found by the header check, on
// whichever channel its message came.
//
// Sleep: a receiver about to sleep raises the flag in its mailbox, runs
// the sleeper's barrier (rdma.Mailbox.SleepFence) and looks at its cells
// once more; a writer stores its cell, then (after a full barrier, unless
// the sleeper's membarrier reaches its CPU) loads the flag, and if it is
// raised takes it down and sends a wake-up through the queues (ctrlWake),
// whose completion wakes the sleeper as any message does. Dekker's
// argument: one of the two sees the other's store.

import (
	"encoding/binary"
	"sync/atomic"
	"unsafe"

	"github.com/gorun-hpc/gorun/internal/release"
	"github.com/gorun-hpc/gorun/transport/rdma"
)

// The mailbox's layout (the reader's In, the writer's Out).
const (
	mbFlag     = 0  // u64: 1 while the reader is about to sleep or sleeps
	mbRead     = 8  // u64: messages the reader has read (published every mbCells/2)
	mbCellsOff = 64 // the first cell
	// mbCellSize bounds a cell, and so mbMax: a 2-rank allreduce of up
	// to 472 bytes moves the whole buffer in one cell (its cost is the
	// lines it writes: one for up to 24 payload bytes).
	mbCellSize = 512
	mbCells    = (rdma.MailboxBytes - mbCellsOff) / mbCellSize

	cellSeq     = 0 // u64: the message's number + 1, stored last
	cellHdr     = 8 // the header (hdrSize bytes)
	cellPayload = cellHdr + hdrSize
	// mbMax is the largest payload that travels in a mailbox cell.
	mbMax = mbCellSize - cellPayload
)

// mailbox is one link's pair of mailboxes.
type mailbox struct {
	conn    rdma.Mailbox
	in, out []byte
	fenced  bool // the reader's barrier reaches this CPU: the writer's side is plain

	sent     uint64 // messages written into out
	freeSeen uint64 // the peer's read count, as last loaded
	read     uint64 // messages read from in
	told     uint64 // read, as last published
	flagged  bool   // this side's flag is raised
}

func newMailbox(c rdma.Mailbox) *mailbox {
	in, out := c.Mailbox()
	if len(in) < mbCellsOff+mbCells*mbCellSize || len(out) < len(in) {
		return nil
	}
	return &mailbox{conn: c, in: in, out: out, fenced: c.MailboxFenced()}
}

func word(b []byte, off int) *atomic.Uint64 { return (*atomic.Uint64)(unsafe.Pointer(&b[off])) }

// write puts a message with header sig and payload into the peer's next
// cell, as the link's message number. It reports false, having written
// nothing, when that cell may still be unread, and wake when the peer is
// about to sleep (the caller sends ctrlWake).
func (m *mailbox) write(sig *Call, number uint64, payload []byte) (ok, wake bool) {
	k := m.sent
	if k-m.freeSeen >= mbCells {
		if m.freeSeen = word(m.out, mbRead).Load(); k-m.freeSeen >= mbCells {
			return false, false
		}
	}
	c := m.out[mbCellsOff+int(k%mbCells)*mbCellSize:][:mbCellSize]
	putHeader(c[cellHdr:cellPayload], sig, len(payload), false)
	binary.LittleEndian.PutUint16(c[cellHdr+2:], uint16(number))
	copy(c[cellPayload:], payload)
	release.Store64(word(c, cellSeq), k+1)
	m.sent = k + 1
	if !m.fenced {
		fullFence()
	}
	f := word(m.out, mbFlag)
	return true, f.Load() != 0 && f.CompareAndSwap(1, 0)
}

// next returns the cell of the next message if it has arrived, else nil;
// m may be nil.
func (m *mailbox) next() []byte {
	if m == nil {
		return nil
	}
	c := m.in[mbCellsOff+int(m.read%mbCells)*mbCellSize:][:mbCellSize]
	if word(c, cellSeq).Load() != m.read+1 {
		return nil
	}
	return c
}

// took marks the cell next returned read (its contents used).
func (m *mailbox) took() {
	m.read++
	if m.read-m.told >= mbCells/2 {
		m.tell()
	}
}

// tell publishes the read count (after every read of the cells it frees).
func (m *mailbox) tell() {
	if m != nil && m.read != m.told {
		m.told = m.read
		release.Store64(word(m.in, mbRead), m.read)
	}
}

// raise sets this side's sleep flag.
func (m *mailbox) raise() {
	m.flagged = true
	word(m.in, mbFlag).Store(1)
}

// lower clears it, if raised (a writer may have cleared it already).
func (m *mailbox) lower() {
	if m != nil && m.flagged {
		m.flagged = false
		release.Store64(word(m.in, mbFlag), 0)
	}
}

// raiseFlags raises the flags of p's peers' mailboxes and runs the
// sleeper's barrier, once: the membarrier of a fenced connection (shm's
// is process-wide and includes this CPU's barrier) serves them all.
func (e *Engine) raiseFlags(p *Plan) {
	var fence *mailbox
	for i := range p.peers {
		if l := e.links[p.peers[i].peer].Load(); l != nil && l.mb != nil {
			mb := l.mb
			mb.raise()
			if fence == nil || mb.fenced && !fence.fenced {
				fence = mb
			}
		}
	}
	if fence != nil {
		fence.conn.SleepFence()
	}
}

// lowerFlags lowers the flags raiseFlags raised.
func (e *Engine) lowerFlags(p *Plan) {
	for i := range p.peers {
		if l := e.links[p.peers[i].peer].Load(); l != nil {
			l.mb.lower()
		}
	}
}

// tellRead publishes the read counts of p's peers' mailboxes.
func (e *Engine) tellRead(p *Plan) {
	for i := range p.peers {
		if l := e.links[p.peers[i].peer].Load(); l != nil {
			l.mb.tell()
		}
	}
}
