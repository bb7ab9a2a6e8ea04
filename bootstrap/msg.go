package bootstrap

import (
	"encoding/binary"
	"net"
	"strconv"

	"github.com/hashicorp/memberlist"
)

// Agreement messages travel as memberlist user messages (UDP, encrypted
// like all gossip). Encoding: kind byte | epoch uvarint | digest (16
// bytes) | len(sender) sender | [len(about) about] | [cause varint] |
// seq uvarint | [len(errKind) errKind]. The last is msgAbandon's, and only
// there when not empty, so that a build before it reads one without it
// (and drops one with it, for the meta flag's blob: abandon.go).
const (
	msgPropose = 1  // member → coordinator: my table for epoch has digest D
	msgPrepare = 2  // coordinator → member: every member proposed D; lock on it?
	msgAck     = 3  // member → coordinator: locked on D; I will take no other table
	msgCommit  = 4  // coordinator → member: every member locked on D; it is the world
	msgLeaving = 5  // a member closes: its departure is not a failure (epoch, digest: its world's; on a split, the one that goes on: expel.go)
	msgDead    = 6  // a member is gone (its gossip port refused a connection): check it yourself (evidence.go)
	msgEpoch   = 7  // coordinator → a member whose proposal is missing: the agreement runs in epoch (grow.go)
	msgStopped = 8  // a member's process is stopped or gone, seen on its host: believe it (witness.go)
	msgTable   = 9  // coordinator or tree parent → member: prepare(D) with the table; its own encoding (table.go)
	msgAsk     = 10 // a formed node agreeing on epoch: is the job past it without me? about: my gossip address (expel.go)
	msgRunning = 11 // answer to msgAsk: the sender runs a world of epoch (digest, about: its size) that leaves the asker out (expel.go)
	msgHello   = 12 // a node forming a large world → seed: here I am, with my meta; its own encoding (hello.go)
	msgLost    = 13 // a node locked on a world gave up on the member it waited for, which gossip dropped: believe it (lost.go)
	msgAbandon = 14 // a member gives up on the world of epoch (digest): about: why; cause: the rank it blames (abandon.go)

	digestLen = 16
)

type message struct {
	kind   byte
	epoch  uint32
	digest [digestLen]byte
	from   string // sender's node name
	about  string // msgDead, msgStopped, msgLost: the member found gone; msgAsk: the sender's gossip address; msgRunning: its world's size; msgAbandon: why
	cause  int    // msgAbandon: the rank the sender blames
	// errKind: msgAbandon: the kind of the sender's error (AbandonError.Kind)
	errKind string
	// seq is the sender's count of messages sent (send sets it; 0 in a
	// message not received). memberlist hands a node's user messages to
	// NotifyMsg newest first when several wait (its queue is a stack), so
	// a member's proposal of its first table arrived after that of its
	// table without the dead member, replaced it in the coordinator's
	// book, and the shrink waited for the resend (200 ms): NotifyMsg keeps
	// the newest of a sender's proposals, acks and prepares of an epoch.
	seq uint64
}

// hasAbout says whether messages of kind carry the about field.
func hasAbout(kind byte) bool {
	return kind == msgDead || kind == msgStopped || kind == msgLost || kind == msgAsk || kind == msgRunning || kind == msgAbandon
}

func (m *message) encode() []byte {
	b := make([]byte, 0, 1+5+digestLen+1+len(m.from))
	b = append(b, m.kind)
	b = binary.AppendUvarint(b, uint64(m.epoch))
	b = append(b, m.digest[:]...)
	b = appendString(b, m.from)
	if hasAbout(m.kind) {
		b = appendString(b, m.about)
	}
	if m.kind == msgAbandon {
		b = binary.AppendVarint(b, int64(m.cause))
	}
	b = binary.AppendUvarint(b, m.seq)
	if m.kind == msgAbandon && m.errKind != "" {
		b = appendString(b, m.errKind)
	}
	return b
}

func decodeMessage(buf []byte) (message, bool) {
	var m message
	if len(buf) == 0 || buf[0] < msgPropose || buf[0] > msgAbandon || buf[0] == msgTable || buf[0] == msgHello {
		return m, false
	}
	m.kind = buf[0]
	d := decoder{buf: buf[1:]}
	m.epoch = uint32(d.uvarint(1<<32 - 1))
	copy(m.digest[:], d.fixed(digestLen))
	m.from = string(d.bytes(255))
	if hasAbout(m.kind) {
		m.about = string(d.bytes(255))
	}
	if m.kind == msgAbandon {
		c := d.varint()
		if c < -1 || c > 1<<31-1 {
			d.fail("cause out of range")
		}
		m.cause = int(c)
	}
	m.seq = d.uvarint(1<<64 - 1)
	if m.kind == msgAbandon && d.err == nil && len(d.buf) > 0 {
		if m.errKind = string(d.bytes(maxKind)); m.errKind == "" {
			d.fail("empty kind") // not canonical: encode leaves it out
		}
	}
	return m, d.err == nil && len(d.buf) == 0
}

// nodeAt is the node named name at addr (host:port) as memberlist's
// sends take it; false if addr is not host:port.
func nodeAt(name, addr string) (*memberlist.Node, bool) {
	host, port, ok := splitAddr(addr)
	if !ok {
		return nil, false
	}
	return &memberlist.Node{Name: name, Addr: host, Port: port, PMax: memberlist.ProtocolVersionMax}, true
}

// send delivers m to the node at addr (host:port) best-effort; losses are
// repaired by the agreement loop's resends.
func (n *Node) send(name, addr string, m message) {
	to, ok := nodeAt(name, addr)
	if !ok {
		return
	}
	m.seq = n.sent.Add(1)
	_ = n.ml.SendBestEffort(to, m.encode())
}

// resend delivers m again to the node at addr, as send does, but beyond
// helloAbove members over a stream (memberlist's reliable user message),
// from a goroutine, at most resendStreams at once. A message repeated was
// lost or is late: while gossip filled the views of 512 members in one
// process, the UDP repeats of a few acks were lost for 55 s (the
// receiver's queue was full whenever they came). A stream is not dropped
// at a full queue, and memberlist hands its message to NotifyMsg from the
// connection's goroutine, not behind the gossip in its packet queue. The
// first sends stay UDP: one packet each, and most arrive.
func (n *Node) resend(name, addr string, m message) {
	if !n.usesHello() {
		n.send(name, addr, m)
		return
	}
	to, ok := nodeAt(name, addr)
	if !ok {
		return
	}
	m.seq = n.sent.Add(1)
	n.goUnlessClosed(func() {
		select {
		case n.streams <- struct{}{}:
		case <-n.done:
			return
		}
		defer func() { <-n.streams }()
		n.resent.Add(1)
		_ = n.ml.SendReliable(to, m.encode()) // bounded by TCPTimeout; a loss is resent again
	})
}

// goUnlessClosed runs f in a goroutine that shutdown waits for, unless the
// node is closed.
func (n *Node) goUnlessClosed(f func()) {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	n.wg.Add(1) // shutdown sets closed under mu before it waits
	n.mu.Unlock()
	go func() {
		defer n.wg.Done()
		f()
	}()
}

// resendStreams bounds a node's resends in flight (resend).
const resendStreams = 16

// splitAddr parses a gossip address, host:port.
func splitAddr(addr string) (net.IP, uint16, bool) {
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, 0, false
	}
	port, err := strconv.ParseUint(ps, 10, 16)
	if err != nil {
		return nil, 0, false
	}
	return net.ParseIP(host), uint16(port), true
}

// NotifyMsg records agreement messages for the agreement loop (agree.go)
// and answers the repeats that mean a reply was lost: a coordinator that
// committed D answers a proposal or ack of D with the commit; a member
// locked on D answers a prepare of D with its ack. Of an epoch whose
// state an install dropped it keeps nothing, and answers a proposal or
// ack from a process out of the world with the world this node runs
// (pruneEpochsLocked).
func (d *delegate) NotifyMsg(buf []byte) {
	if isTable(buf) {
		d.n.gotTable(buf)
		return
	}
	if isHello(buf) {
		d.n.gotHello(buf)
		return
	}
	m, ok := decodeMessage(buf)
	if !ok || d.n.ofFinalized(m.digest) {
		return
	}
	n := d.n
	reply := byte(0)
	n.mu.Lock()
	if drop, stale, w := n.droppedLocked(m); drop {
		n.mu.Unlock()
		if stale != "" {
			n.tellStale(stale, w) // prune.go
		}
		return
	}
	if n.staleLocked(m) {
		n.mu.Unlock()
		return // a newer one of its kind from its sender was handled
	}
	switch m.kind {
	case msgPropose, msgAck:
		book := n.proposals
		if m.kind == msgAck {
			book = n.acks
		}
		if book[m.epoch] == nil {
			book[m.epoch] = make(map[string][digestLen]byte)
		}
		book[m.epoch][m.from] = m.digest
		if c, ok := n.committed[m.epoch]; ok && c == m.digest {
			reply = msgCommit
		}
	case msgPrepare:
		n.prepares[m.epoch] = m
		if l, ok := n.locked[m.epoch]; ok && l == m.digest {
			reply = msgAck
		}
	case msgCommit:
		n.commits[m.epoch] = m
	case msgLeaving:
		n.heardLeavingLocked(m) // before the leave: a split it carries (expel.go)
		n.leaving[m.from] = true
		n.ranPast = max(n.ranPast, m.epoch) // the epoch of its world (expel.go)
		n.viewMu.Lock()
		n.viewGen++ // a shrink's table leaves it out (shrinkTable)
		n.outGen++
		n.viewMu.Unlock()
	case msgEpoch:
		if n.hints[m.epoch] == nil {
			n.hints[m.epoch] = make(map[string]bool)
		}
		n.hints[m.epoch][m.from] = true
	}
	n.mu.Unlock()
	switch m.kind {
	case msgDead:
		n.heardDead(m.about)
		return
	case msgStopped:
		n.witnessed(m.about)
		return
	case msgLost:
		n.markLost(m.about)
		return
	case msgAbandon:
		n.heardAbandon(m)
		n.signal()
		return
	case msgAsk:
		n.answerAsk(m)
		return
	case msgRunning:
		n.heardRunning(m)
		return
	}
	if reply != 0 {
		n.viewMu.Lock()
		to, ok := n.peers[m.from]
		n.viewMu.Unlock()
		if ok {
			// A reply answers a repeat: the first answer was lost.
			n.resend(to.name, to.addr, message{kind: reply, epoch: m.epoch, digest: m.digest, from: n.name})
		}
	}
	n.signal()
}

// ofFinalized says whether digest names the world this process finalized
// (Config.Finalized). NotifyMsg drops a message about that world, and
// mergeState its push/pull state: a rank's node of it, slow to close,
// that joins, leaves or answers at an address this node now holds (a
// seed's) speaks of a world this process left, not of this node's job
// running past it. Its state made the new world's formation ignore
// deaths (TestFormAgainEndsWhenRankDies); its leave's epoch counted as
// one the job had run (ranPast), and the new world's first Shrink or Grow
// found this rank expelled (TestFinalizedWorldsNewsIgnored).
func (n *Node) ofFinalized(digest [digestLen]byte) bool {
	fin := n.cfg.Finalized
	return fin != [digestLen]byte{} && digest == fin
}

// seqKey names the messages of which NotifyMsg keeps the newest.
type seqKey struct {
	from  string
	kind  byte
	epoch uint32
}

// staleLocked says whether m, a proposal, ack or prepare, was sent before
// one of the same kind and epoch from the same sender that NotifyMsg has
// already handled (message.seq), and records m's seq if not. n.mu is held.
func (n *Node) staleLocked(m message) bool {
	if m.kind != msgPropose && m.kind != msgAck && m.kind != msgPrepare {
		return false
	}
	k := seqKey{m.from, m.kind, m.epoch}
	if m.seq < n.seqs[k] {
		return true
	}
	n.seqs[k] = m.seq
	return false
}
