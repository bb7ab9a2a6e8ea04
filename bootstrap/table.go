package bootstrap

// Table prepares: how a member with an incomplete view agrees.
//
// At a thousand members, waiting until every member's own view is complete
// (every join gossiped to every node) is what made formation slow: memberlist
// retransmits each of n joins about 4·log10(n) times from every node, and on
// a loaded host the last few joins take many rounds to arrive. Instead, the
// coordinator's prepare carries its table: the name, address and published
// meta of every member. A member merges it into its own view (its own
// entries win) and locks only if the table it then derives hashes to the
// prepared digest, so a member that knows something the coordinator does not
// (a node that left, a smaller name claiming a rank) still refuses. The
// agreement stays the two-phase commit of doc.go; only what a member may
// know when it votes grows.
//
// The table travels over TCP (memberlist's reliable user messages: about
// 100 bytes a member) down a tableFanout-ary tree over the table's ranks:
// the coordinator sends it to ranks 1..tableFanout, and each member, once
// locked, to its children r·tableFanout+1 ... r·tableFanout+tableFanout,
// all of them at once (sendTables). So
// every member receives the table about once (O(n) bytes) and sends it at
// most tableFanout times, the coordinator included. A member still missing
// its ack tableDirectAfter into the prepare gets the table from the
// coordinator directly. Members whose own view already hashes to the digest
// need no table; they get the small UDP prepare as before.

import (
	"encoding/binary"
	"sync"
	"time"
)

const (
	// tableFanout is the tree's fan-out: the coordinator sends the table
	// tableFanout times, and depth is log_tableFanout(n) (3 at 1,000).
	tableFanout = 8
	// tableDirectAfter is how long into the prepare a member still missing
	// gets the table straight from the coordinator (a tree parent died or
	// is slow); tableDirectBatch caps those sends per resend period.
	tableDirectAfter = time.Second
	tableDirectBatch = 32
	// maxTable bounds a received table's member count.
	maxTable = 1 << 16
)

// tablePrepare is a received msgTable.
type tablePrepare struct {
	from   string
	epoch  uint32
	digest [digestLen]byte
	peers  []peer // the table's members, as the coordinator saw them
}

// encodeTable encodes prepare(w.Digest) with the records of w's members
// found in peers; it fails (nil) if one is missing.
func encodeTable(from string, w *World, peers map[string]peer) []byte {
	b := []byte{msgTable}
	b = binary.AppendUvarint(b, uint64(w.Epoch))
	b = append(b, w.Digest[:]...)
	b = appendString(b, from)
	b = binary.AppendUvarint(b, uint64(len(w.Members)))
	for _, m := range w.Members {
		q, ok := peers[m.Name]
		if !ok {
			return nil
		}
		mb, err := q.meta.encode()
		if err != nil {
			return nil
		}
		b = appendString(b, q.name)
		b = appendString(b, q.addr)
		b = appendString(b, string(mb))
	}
	return b
}

// isTable says whether a user message is a table prepare (NotifyMsg
// routes it to gotTable, every other kind to decodeMessage).
func isTable(buf []byte) bool { return len(buf) > 0 && buf[0] == msgTable }

func decodeTable(buf []byte) (tablePrepare, bool) {
	var t tablePrepare
	if !isTable(buf) {
		return t, false
	}
	d := decoder{buf: buf[1:]}
	t.epoch = uint32(d.uvarint(1<<32 - 1))
	copy(t.digest[:], d.fixed(digestLen))
	t.from = string(d.bytes(255))
	k := int(d.uvarint(maxTable))
	for range k {
		if d.err != nil {
			return t, false
		}
		name := string(d.bytes(255))
		addr := string(d.bytes(255))
		mb := d.fixed(int(d.uvarint(4096)))
		m, err := decodeMeta(mb)
		if err != nil {
			return t, false
		}
		t.peers = append(t.peers, peer{name: name, addr: addr, meta: m})
	}
	return t, d.err == nil && len(d.buf) == 0
}

// sendTable sends an encoded table prepare to member m over TCP; it
// blocks for the connection (bounded by memberlist's TCPTimeout).
func (n *Node) sendTable(m Member, buf []byte) error {
	to, ok := nodeAt(m.Name, m.Addr)
	if !ok {
		return ErrBadMeta
	}
	return n.ml.SendReliable(to, buf)
}

// sendTables sends an encoded table prepare to each of to at once and
// waits until every send ended (each is bounded by TCPTimeout): one after
// the other, a tree level took a stream's round trip per child, and a
// stream waits for the receiver's goroutine to be scheduled.
func (n *Node) sendTables(to []Member, buf []byte) {
	var wg sync.WaitGroup
	for _, m := range to {
		wg.Go(func() { _ = n.sendTable(m, buf) })
	}
	wg.Wait()
}

// treeChildren are rank r's children in the table tree of size ranks.
func treeChildren(r, size int) (lo, hi int) {
	lo = r*tableFanout + 1
	hi = min(lo+tableFanout, size)
	return min(lo, size), hi
}

// withTable merges the members of a received table into a copy of view:
// the node's own records win, and members this node found gone stay out.
func (n *Node) withTable(view map[string]peer, t *tablePrepare) map[string]peer {
	if t == nil {
		return view
	}
	out := make(map[string]peer, len(view)+len(t.peers))
	for k, v := range view {
		out[k] = v
	}
	n.viewMu.Lock()
	defer n.viewMu.Unlock()
	for _, q := range t.peers {
		if _, ok := out[q.name]; !ok && !n.gone[q.name] {
			out[q.name] = q
		}
	}
	return out
}

// gotTable records a table prepare: it is a prepare of its digest, and its
// members are merged into the view the agreement loop derives its table
// from. A member already locked on the digest answers with its ack.
func (n *Node) gotTable(buf []byte) {
	t, ok := decodeTable(buf)
	if !ok {
		return
	}
	m := message{kind: msgPrepare, epoch: t.epoch, digest: t.digest, from: t.from}
	n.mu.Lock()
	if t.epoch < n.floor {
		n.mu.Unlock()
		return // late: its epoch's state was dropped (pruneEpochsLocked)
	}
	n.prepares[t.epoch] = m
	if !n.formed || t.epoch > n.world.Epoch {
		n.tables[t.epoch] = &t // a late copy of an installed world's table is not kept (install)
	}
	l, locked := n.locked[t.epoch]
	n.mu.Unlock()
	if locked && l == t.digest {
		for _, q := range t.peers {
			if q.name == t.from {
				n.send(q.name, q.addr, message{kind: msgAck, epoch: t.epoch, digest: t.digest, from: n.name})
			}
		}
	}
	n.signal()
}
