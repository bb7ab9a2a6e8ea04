package bootstrap

// What a node forgets at each install: the agreement state of old epochs
// and the state it keeps about processes out of the world.
//
// A long elastic job agrees on two worlds per restart (the survivors'
// Shrink without the process that ended, their Grow with its restart) and
// finds one process gone. Kept for good, that state grew with every
// restart: after 30 restarts of a 4-rank job its coordinator held 61
// epochs in each of proposals, acks and committed, 321 entries in seqs
// and 30 in each of gone, goneAddr, reported, refused and probes; a
// member 61 epochs in each of prepares, locked and commits
// (TestStateBoundedAcrossRestarts); driven directly, 2.5 KB of heap per
// restart (TestStateStaysBounded). So install drops what nothing can read
// any more (pruneEpochsLocked, forgetLocked, pruneDepartedLocked,
// pruneGoneLocked), and NotifyMsg keeps nothing of an epoch dropped.

import (
	"cmp"
	"maps"
	"slices"
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
// (mergeState), as before. The first epoch's proposals, a restarted
// rank's while it waits for a Grow, are dropped unanswered
// (droppedLocked). The epoch before this world's is kept as a
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
	if m.epoch <= 1 {
		// A restarted rank forming the first world proposes it to its
		// table's rank 0 until the members' Grow moves it on: it learns
		// that the job runs from a push/pull (grow.go), and a proposal of
		// it never got more than no answer.
		return true, "", World{}
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
// that are): the causes of death (stopped, refused, taken, lost),
// leaving, abandoned, and the probes not running. (reported holds only
// members of w: install clears it for each new world.) Each is read
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
	for _, m := range append(n.causes(), n.leaving) {
		maps.DeleteFunc(m, func(name string, _ bool) bool { return out(name) })
	}
	maps.DeleteFunc(n.abandoned, func(name string, _ *AbandonError) bool { return out(name) })
	maps.DeleteFunc(n.probes, func(name string, st *probeState) bool { return !st.busy && out(name) })
	// runs: the worlds that leave this node out; overtakenLocked reads
	// whether one of them went on rather than this node's. A world that
	// did not never will: this node's worlds only go on (WentOn).
	maps.DeleteFunc(n.runs, func(_ string, r World) bool { return WentOn(n.world, r) })
}

// pruneGoneLocked drops the processes found gone (gone, goneAddr) that
// are not members of the world and cannot matter any more. gone keeps a
// process out of the view (delegate.update) for good: its name comes
// back only in an alive message, from the process itself if it lives
// (found frozen by a witness, lost, expelled) or from a stale view (a
// node back from a partition hands out the nodes it last saw as alive);
// goneAddr is where shutdown sends it the leave notice, for one that
// resumes (expel.go). A process goes:
//
//   - once a member of the world was started with its rank (startedRank):
//     a restart of it, and gorun restarts a rank when its process ended.
//     Back in the view, from a stale view, it is no joiner (Joiners does
//     not count a node claiming a rank a member holds) and no Grow admits
//     it (growTable gives the rank to the member), and memberlist drops
//     it once it does not answer its probes. Nor does it get the leave
//     notice: it ended. This is pruneBehindLocked's rule for the same
//     processes, whose entries of behind go once they are found gone;
//   - beyond maxGone processes out of the world, the ones found gone
//     earliest: the processes started without a rank, and the ranked ones
//     whose rank no member holds (one per rank at most: a rank's
//     processes before the last were dropped when its restart was
//     admitted). Back in the view from a stale view, such a process
//     counts as a joiner, and a Grow may take it in its table until
//     memberlist drops it (a suspicion timeout) and the locked nodes give
//     it up (lostAfter, lost.go), finding it gone again. Alive (resumed),
//     it is told by its tellers that the job went on without it
//     (tellRunningLocked) unless they pruned it from behind too, and
//     learns it from a push/pull (expelledAt) otherwise.
//
// n.mu and n.viewMu are held.
func (n *Node) pruneGoneLocked() {
	ranks := n.heldRanksLocked()
	var kept []string // out of the world, not superseded
	for name := range n.gone {
		if _, in := n.inWorld[name]; in {
			continue
		}
		if r := startedRank(name); r >= 0 && ranks[r] {
			n.forgetGoneLocked(name)
		} else {
			kept = append(kept, name)
		}
	}
	if extra := len(kept) - n.maxGone(); extra > 0 {
		slices.SortFunc(kept, func(a, b string) int {
			return cmp.Or(cmp.Compare(n.goneAt[a], n.goneAt[b]), cmp.Compare(a, b))
		})
		for _, name := range kept[:extra] {
			n.forgetGoneLocked(name)
		}
	}
}

// heldRanksLocked is the set of the ranks the members of the world were
// started with (startedRank). n.mu is held.
func (n *Node) heldRanksLocked() map[int]bool {
	ranks := make(map[int]bool, len(n.world.Members))
	for _, m := range n.world.Members {
		if r := startedRank(m.Name); r >= 0 {
			ranks[r] = true
		}
	}
	return ranks
}

// pruneDepartedLocked drops the processes gossip dropped from the view
// (departed) that are not members of the world and are found gone or
// superseded, a member of the world started with their rank. A killed
// process that gossip drops before a probe finds its port refused stays
// in departed when it is found gone: 4 in 102 restarts of a 4-rank job
// (TestStateBoundedAcrossRestarts). Every reader of departed asks gone
// first (install, heardOutside, lastCall, lostAwaited), or asks for a
// member of the world or of a locked table (install, lostAwaited, which
// gives a member out of the view up only if it is in departed); and no
// table holds a superseded process, for growTable gives its rank to the
// member. Back in the view (a stale view's), a process is taken out of
// departed anyway (delegate.update). A process gossip dropped that is
// neither found gone nor superseded stays: one started without a rank,
// or whose rank no member holds, which a table prepare (withTable) may
// bring into a locked table while it is out of this node's view; without
// its entry lostAwaited would wait for it for good. n.mu and n.viewMu are
// held.
func (n *Node) pruneDepartedLocked() {
	ranks := n.heldRanksLocked()
	for name := range n.departed {
		if _, in := n.inWorld[name]; in {
			continue
		}
		if r := startedRank(name); n.gone[name] || (r >= 0 && ranks[r]) {
			delete(n.departed, name)
		}
	}
}

// forgetGoneLocked drops name from the processes found gone. n.viewMu is
// held.
func (n *Node) forgetGoneLocked(name string) {
	delete(n.gone, name)
	delete(n.goneAddr, name)
	delete(n.goneAt, name)
}

// maxGone is the most processes found gone out of the world that
// pruneGoneLocked keeps: as many as the job may have ranks, four times.
// An entry costs a name and an address (about 100 bytes).
func (n *Node) maxGone() int { return 4 * max(n.cfg.Size, n.cfg.MaxSize) }
