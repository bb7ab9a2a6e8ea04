package bootstrap

// What a node forgets at each install: the agreement state of old epochs
// and the state it keeps about processes out of the world.
//
// A long elastic job agrees on two worlds per restart (the survivors'
// Shrink without the process that ended, their Grow with its restart) and
// finds one process gone. Kept for good, that state grew with every
// restart: after 30 restarts of a 4-rank job its coordinator held 61
// epochs in each of proposals, acks and committed, 321 entries in seqs
// and 30 in each of reported, refused and probes; a member 61 epochs in
// each of prepares, locked and commits. So install drops what nothing can
// read any more (pruneEpochsLocked, forgetLocked), and NotifyMsg keeps
// nothing of an epoch dropped.

import (
	"maps"
	"strconv"
)

// keepEpochs is how many epochs of agreement state an install keeps: the
// installed world's and the one before it.
const keepEpochs = 2

// pruneEpochsLocked drops the agreement state of the epochs before the
// last keepEpochs up to epoch, the world installed, and makes NotifyMsg
// drop the messages of those epochs (floor). What reads it:
//
//   - an agreement (agree, heardOutside, abandon, gotPrepare) reads its
//     own epoch and the later ones (laterEpochLocked); a formed node's
//     agreement is for a later epoch than its world's;
//   - NotifyMsg's answers to a repeat (msg.go): a coordinator's commit for
//     a proposal or ack of an epoch it committed (committed), a member's
//     ack for a prepare of an epoch it locked on (locked, and gotTable,
//     heardAbandon), and the order of a sender's messages (seqs).
//
// So only a process still agreeing on an epoch before this world's reads
// what is dropped. A member of this world is past every epoch before it:
// it agrees on one epoch at a time, in order, and acked this one, whose
// commit, if lost, this epoch's coordinator still answers its repeated
// ack with. A process still agreeing on an earlier epoch is not in this
// world: the job went on without it. NotifyMsg answers its proposal or
// ack of a dropped epoch, if it is in the view, with the world this node
// runs (msgRunning, as answerAsk does), and its agreement fails with
// ErrExpelled (expelledAt); before, the coordinator of that epoch
// answered with its commit, and the process went on into a world the job
// had left. Out of the view, it learns the same from a push/pull
// (mergeState), as before. The epoch before this world's is kept as a
// margin: nothing above reads it. n.mu is held.
func (n *Node) pruneEpochsLocked(epoch uint32) {
	if epoch < keepEpochs || epoch-keepEpochs+1 <= n.floor {
		return
	}
	n.floor = epoch - keepEpochs + 1
	old := func(e uint32) bool { return e < n.floor }
	byEpoch := func(m map[uint32]map[string][digestLen]byte) {
		maps.DeleteFunc(m, func(e uint32, _ map[string][digestLen]byte) bool { return old(e) })
	}
	byEpoch(n.proposals)
	byEpoch(n.acks)
	for _, m := range []map[uint32][digestLen]byte{n.committed, n.locked, n.proven} {
		maps.DeleteFunc(m, func(e uint32, _ [digestLen]byte) bool { return old(e) })
	}
	for _, m := range []map[uint32]message{n.prepares, n.commits} {
		maps.DeleteFunc(m, func(e uint32, _ message) bool { return old(e) })
	}
	maps.DeleteFunc(n.hints, func(e uint32, _ map[string]bool) bool { return old(e) })
	maps.DeleteFunc(n.seqs, func(k seqKey, _ uint64) bool { return old(k.epoch) })
}

// droppedLocked says whether m, an agreement message, is of an epoch
// whose state pruneEpochsLocked dropped, and if so answers it as
// pruneEpochsLocked says: it returns the process to tell the world w
// this node runs (tellStale), or "". n.mu is held.
func (n *Node) droppedLocked(m message) (bool, string, World) {
	switch m.kind {
	case msgPropose, msgAck, msgPrepare, msgCommit, msgEpoch:
	default:
		return false, "", World{}
	}
	if m.epoch >= n.floor {
		return false, "", World{}
	}
	if _, in := n.inWorld[m.from]; in || m.from == n.name || (m.kind != msgPropose && m.kind != msgAck) {
		return true, "", World{} // late: a member of this world is past it
	}
	return true, m.from, n.world
}

// tellStale tells name, a process that sent a proposal or ack of an epoch
// whose state this node dropped (droppedLocked), the world w this node
// runs, by UDP, if it is in the view: a loss is repaired by its next
// repeat.
func (n *Node) tellStale(name string, w World) {
	n.viewMu.Lock()
	q, ok := n.peers[name]
	n.viewMu.Unlock()
	if ok {
		n.send(q.name, q.addr, message{kind: msgRunning, epoch: w.Epoch, digest: w.Digest, from: n.name, about: strconv.Itoa(w.Size)})
	}
}

// forgetLocked drops what this node keeps about processes that are not
// members of its world, w, once installed (install has reported those
// that are): reported, the causes of death (stopped, refused, taken,
// lost), leaving, abandoned, and the probes not running. Each is read
// only for a member of the world: reportLocked, amendLocked,
// runningLocked, heardDead, lostAwaited report or check a member of the
// world (inWorld), and deathCauseLocked and leftErrLocked are the errors
// of those reports; outOfWorld's sets (left, growOut) are read only for
// the members of the old world (shrinkTable, growTable). A process out
// of the world does not come back into one: Joiners and growTable leave
// out the processes behind, and a process found gone is kept out of the
// view (gone). The others that read them do not need them: a last call
// (lastcall.go) of a process out of the world reports nothing whether it
// was reported or not, and one that left and is dropped by gossip gets a
// last call rather than none (two pings); a probe (probes) of a process
// out of the world that asks for another after its entry went may come
// up to evidenceProbeEvery early; and heardOutside, which reads leaving,
// runs before the first install only. n.mu is held.
func (n *Node) forgetLocked() {
	out := func(name string) bool {
		_, in := n.inWorld[name]
		return !in
	}
	for _, m := range []map[string]bool{n.reported, n.stopped, n.refused, n.taken, n.lost, n.leaving} {
		maps.DeleteFunc(m, func(name string, _ bool) bool { return out(name) })
	}
	maps.DeleteFunc(n.abandoned, func(name string, _ *AbandonError) bool { return out(name) })
	maps.DeleteFunc(n.probes, func(name string, st *probeState) bool { return !st.busy && out(name) })
	// runs: the worlds that leave this node out; overtakenLocked reads
	// whether one of them went on rather than this node's. A world that
	// did not never will: this node's worlds only go on (WentOn).
	maps.DeleteFunc(n.runs, func(_ string, r World) bool { return WentOn(n.world, r) })
}
