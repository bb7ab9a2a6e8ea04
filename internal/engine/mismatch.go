package engine

// Naming the rank that called differently.
//
// A receiver that finds a header of another call knows two signatures, its
// own and the sender's, but not which one is wrong. It records the
// evidence (rank → call hash, and its own call's operation number) and
// sends it to every peer, which pass each piece on once. Every rank that
// hears of it also reports its last two collective calls (operation
// number and hash), running or returned, and a call it starts while the
// question is open: so a rank that was idle, or whose part of the call
// completed and went on to the next, still counts with the call it made
// at that operation. After mismatchWindow every rank that has evidence
// decides by majority over the calls of the detecting ranks' operations:
// the culprit is the lowest rank whose call differs from the most common
// one. A rank whose view is a tie (it is probably one of the two that
// disagree) waits a window more, and more while the others' calls are
// still coming, up to mismatchWaits windows; with two ranks, or a tie that
// stays, it names the sender the first evidence named. So a rank that
// passed a different count or root is named by everyone, not its
// neighbours.

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorun-hpc/gorun/collectives"
)

// mismatchWindow is how long evidence is collected before deciding;
// a rank whose view is a tie decides at most mismatchWaits windows after
// its first evidence.
const (
	mismatchWindow = 100 * time.Millisecond
	mismatchWaits  = 5
)

type mismatchState struct {
	mu      sync.Mutex
	sigs    map[int]uint32      // rank → hash of the call a piece of evidence saw it make
	reports map[int][][2]uint32 // rank → hash and operation of the calls it reported
	seqs    map[uint32]bool     // the detecting ranks' calls' operations
	seen    map[[2]int]bool
	first   int    // culprit named by the first evidence
	firstBy int    // the rank that found it
	named   bool   // first is set
	why     string // this rank's own observation, if any
	started bool
	waits   int         // windows waited
	open    atomic.Bool // evidence came (the decision fails the engine): Run reports its calls
}

// noSeq is the operation of a point-to-point call's evidence: the
// collectives' operation numbers do not apply to it.
const noSeq = ^uint32(0)

// opOf is the operation number the vote knows c by: its sequence number
// to 31 bits (lastCall's encoding), noSeq for a point-to-point call.
func opOf(c *Call) uint32 {
	if c.Coll == collectives.SendRecv {
		return noSeq
	}
	return c.Seq &^ (1 << 31)
}

// evidence records that rank det (calling dh, operation seq) saw rank cul
// send a call with hash ch, passes it on, and starts the decision timer.
// det == cul is a rank's report of a call it made at operation seq.
func (e *Engine) evidence(det int, dh uint32, cul int, ch uint32, seq uint32, why string) {
	m := &e.mm
	m.mu.Lock()
	if m.sigs == nil {
		m.sigs, m.reports, m.seqs, m.seen = map[int]uint32{}, map[int][][2]uint32{}, map[uint32]bool{}, map[[2]int]bool{}
	}
	key := [2]int{det, cul}
	if det == cul {
		key[1] = -1 - int(seq)
	}
	if m.seen[key] {
		m.mu.Unlock()
		return
	}
	m.seen[key] = true
	if det == cul {
		m.reports[det] = append(m.reports[det], [2]uint32{dh, seq})
	} else {
		m.sigs[det], m.sigs[cul] = dh, ch
		if seq != noSeq {
			m.seqs[seq] = true
		}
		if !m.named {
			m.named, m.first, m.firstBy = true, cul, det
		}
	}
	if why != "" && m.why == "" {
		m.why = why
	}
	start := !m.started
	m.started = true
	m.open.Store(true)
	m.mu.Unlock()
	e.sendEvidence(det, dh, cul, ch, seq)
	if det != e.Rank {
		e.reportCalls()
	}
	if start {
		time.AfterFunc(mismatchWindow, e.decideMismatch)
	}
}

// tellWaiting tells peer, which this rank's call has waited for (wait.go),
// which call it waits in: a disagreement where neither sends the other
// anything (a gather's root waits for a rank that called scatter, and that
// rank for the root) shows no message to either. Best effort.
func (e *Engine) tellWaiting(peer int, call *Call) {
	if peer == e.Rank || call.Coll == collectives.SendRecv {
		return
	}
	if l := e.links[peer].Load(); l != nil && !l.closed.Load() && !l.broken.Load() {
		l.sendCtrl3(ctrlWaiting, uint32(int32(e.Rank)), uint64(callHash(call)), uint64(opOf(call)))
	}
}

// waitedOn takes a peer's word that it waits for this rank in operation op
// with a call of hash h (tellWaiting): this rank's own call at op, running
// or one of its last two, with another hash is evidence against the peer,
// for the vote to judge. A peer says it once per Run (a frozen rank's
// control queue must not fill), so the word is kept, the last per peer,
// for when this rank's Run of op starts (checkWaits); it is kept before
// the look at this rank's calls, and Run records its call before it looks
// at the words, so one of the two sees the other.
func (e *Engine) waitedOn(peer int, h, op uint32) {
	e.waitWords.Add(1)
	e.waitsMu.Lock()
	if e.waits == nil {
		e.waits = map[int][2]uint32{}
	}
	e.waits[peer] = [2]uint32{op, h}
	e.waited.Store(true)
	e.waitsMu.Unlock()
	for _, v := range [2]uint64{e.lastCall.Load(), e.prevCall.Load()} {
		if o, mine, ok := unpackCall(v); ok && o == op {
			e.waitedDiffers(peer, h, op, mine)
			return
		}
	}
}

// checkWaits compares the words kept by waitedOn for operation op with
// this rank's call of hash mine, which Run has just recorded.
func (e *Engine) checkWaits(op, mine uint32) {
	e.waitsMu.Lock()
	var differ [][2]uint32 // peer, its hash
	for peer, w := range e.waits {
		switch behind := (op - w[0]) & (1<<31 - 1); {
		case behind == 0:
			if w[1] != mine {
				differ = append(differ, [2]uint32{uint32(peer), w[1]})
			}
			delete(e.waits, peer)
		case behind < 1<<30: // an operation this rank has passed
			delete(e.waits, peer)
		}
	}
	if len(e.waits) == 0 {
		e.waited.Store(false)
	}
	e.waitsMu.Unlock()
	for _, d := range differ {
		e.waitedDiffers(int(d[0]), d[1], op, mine)
	}
}

// waitedDiffers gives the evidence that peer waits in operation op with a
// call of hash h where this rank called mine, if they differ.
func (e *Engine) waitedDiffers(peer int, h, op, mine uint32) {
	if mine != h {
		e.evidence(e.Rank, mine, peer, h, op, fmt.Sprintf("rank %d disagrees with rank %d: it waits for this rank in another call of operation %d", e.Name(peer), e.Name(e.Rank), op))
	}
}

// sendEvidence passes a piece of evidence to every peer, best effort.
func (e *Engine) sendEvidence(det int, dh uint32, cul int, ch uint32, seq uint32) {
	for i := range e.links {
		l := e.links[i].Load()
		if l != nil && !l.closed.Load() && !l.broken.Load() {
			l.sendCtrl3(ctrlMismatch, uint32(int32(det)), uint64(dh)<<32|uint64(ch), uint64(seq)<<32|uint64(uint32(int32(cul))))
		}
	}
}

// packCall is a call's record in lastCall and prevCall: 1<<63 | its
// operation (opOf, 31 bits) << 32 | its hash; 0 is no call.
func packCall(op, hash uint32) uint64 { return 1<<63 | uint64(op&^(1<<31))<<32 | uint64(hash) }

// unpackCall is packCall's inverse; ok is false for no call.
func unpackCall(v uint64) (op, hash uint32, ok bool) {
	return uint32(v>>32) &^ (1 << 31), uint32(v), v>>63 == 1
}

// reportCalls records and sends this rank's last two collective calls,
// each once (evidence dedups).
func (e *Engine) reportCalls() {
	for _, v := range [2]uint64{e.lastCall.Load(), e.prevCall.Load()} {
		if seq, h, ok := unpackCall(v); ok {
			e.evidence(e.Rank, h, e.Rank, h, seq, "")
		}
	}
}

// votes are the calls the decision counts: the evidence's, replaced by a
// rank's report of its call at a detecting rank's operation (the evidence
// may have seen its next call). m.mu is held.
func (m *mismatchState) votes() map[int]uint32 {
	v := make(map[int]uint32, len(m.sigs)+len(m.reports))
	for r, h := range m.sigs {
		v[r] = h
	}
	for r, reps := range m.reports {
		for _, rep := range reps {
			if m.seqs[rep[1]] {
				v[r] = rep[0] // its own word for its call at that operation
			}
		}
	}
	return v
}

func (e *Engine) decideMismatch() {
	m := &e.mm
	m.mu.Lock()
	votes := m.votes()
	count := map[uint32]int{}
	for _, h := range votes {
		count[h]++
	}
	best, bestN, tie := uint32(0), 0, false
	for h, n := range count {
		switch {
		case n > bestN:
			best, bestN, tie = h, n, false
		case n == bestN:
			tie = true
		}
	}
	m.waits++
	if (tie || !m.named) && (m.waits == 1 || len(votes) < e.Size && m.waits < mismatchWaits) {
		// This rank's view is split (it is probably one of the two ranks
		// that disagree), or it has only reports of calls and not yet
		// the evidence they answer: ranks that see a majority decide
		// first and their notice will reach it, and the others'
		// signatures are still coming.
		m.mu.Unlock()
		time.AfterFunc(mismatchWindow, e.decideMismatch)
		return
	}
	culprit := m.first
	if !tie && bestN > 1 {
		culprit = -1
		for r, h := range votes {
			if h != best && (culprit < 0 || r < culprit) {
				culprit = r
			}
		}
		if culprit < 0 {
			culprit = m.first
		}
	}
	why, named, by, first := m.why, m.named, m.firstBy, m.first
	m.mu.Unlock()
	switch {
	case why != "":
	case named:
		// What the finder saw stays with it (a header of another call,
		// a peer that waits in another): its notice reads so, where it
		// decides first.
		why = fmt.Sprintf("rank %d found that rank %d's call differs from its own", e.Name(by), e.Name(first))
	default:
		why = "the ranks' calls differ"
	}
	e.Abort(culprit, fmt.Errorf("%w: %s", ErrMismatch, why))
}

// Two ranks that wait for each other where neither has anything on its
// way to the other: a rank in a point-to-point call that waits for a peer
// in a collective that waits for it (a Recv from a rank in a Broadcast
// from this one), or two in point-to-point calls (each in a Recv from the
// other). A point-to-point Run that has waited strayAfter tells each peer
// it waits for so (tellBlocked), with what of the peer's it has had; the
// peer, in a Run that waits for it in turn, finds that it has sent it
// nothing since (checkBlockedPeers). Neither can move then: the
// point-to-point call needs the peer's next message or clear-to-send,
// which the peer sends only in a later call (a communicator's calls run
// one at a time); the peer's Run needs this rank's, which it sends only
// after its point-to-point call. Point-to-point Runs alone speak, so a
// collective pays nothing but a look at a flag where it has waited.

// p2pWaitWord is a peer's word that a point-to-point Run of its waits for
// this rank (ctrlP2PWaiting), to 32 bits each.
type p2pWaitWord struct {
	word        uint64 // as ctrlP2PWaiting's b carries it (blockedTold.word)
	ack         uint8  // the number of the last label of this rank's it took (passLabels)
	taken, used uint32 // this rank's data messages it had taken, and clear-to-sends it had used (29 bits)
	recv, send  bool   // it waits for a message of this rank's; for a clear-to-send
	sendsLeft   bool   // it has a send to this rank not yet posted
	sent        uint32 // its data messages to this rank
	hash        uint32 // its call's (callHash)
}

// usedMask keeps the clear-to-send count of a word (ctrlP2PWaiting's b,
// bits 32-60 under the flags).
const usedMask = 1<<29 - 1

// blockedTold is a word tellBlocked sent: the peer, and what of the
// peer's the Run had had and waited for.
type blockedTold struct {
	peer        int
	taken, used uint64
	recv, send  bool
	sendsLeft   bool
	ack         uint8 // the last label taken from the peer (passLabels)
}

// blockedOn says what p, run for call, waits for that only peer i of p
// can send next: a message for a receive (recv: its next has not
// arrived), a clear-to-send for a direct send (send: none has come that
// is not used).
func (e *Engine) blockedOn(p *Plan, call *Call, i int) (recv, send bool) {
	pp, ps := &p.peers[i], &e.st.pp[i]
	l := e.links[pp.peer].Load()
	recv = ps.recvCur < len(pp.recvs) && l.peek() == nil
	if ps.sendCur < len(pp.sends) && ps.sendPiece == 0 && l.ctsArrived.Load() <= l.ctsUsed {
		o := &p.S.Ops[pp.sends[ps.sendCur]]
		send = o.ToCopy && o.Len*call.DType.Size() >= l.directMinOf(call)
	}
	return recv, send
}

// tellBlocked tells each peer that this point-to-point Run waits for
// (blockedOn) so, once for each count of the peer's messages and
// clear-to-sends it has had, and of its labels it has taken
// (passLabels): a Run that moved and waits again says it again, one that
// waits on says nothing more (a stopped peer's control receives must not
// fill; a peer sends a label only once its last is taken). Best effort.
func (e *Engine) tellBlocked(w *waiter) {
	for i := range w.p.peers {
		recv, send := e.blockedOn(w.p, w.call, i)
		if !recv && !send {
			continue
		}
		peer := w.p.peers[i].peer
		l := e.links[peer].Load()
		sendsLeft := e.st.pp[i].sendCur < len(w.p.peers[i].sends)
		told := blockedTold{peer, l.nextFull(), l.ctsUsed, recv, send, sendsLeft, e.labelAck[peer]}
		if slices.Contains(w.toldBlocked, told) || l.closed.Load() || l.broken.Load() {
			continue
		}
		w.toldBlocked = append(w.toldBlocked, told)
		l.sendCtrl3(ctrlP2PWaiting, uint32(told.ack), told.word(), uint64(uint32(l.number()))|uint64(callHash(w.call))<<32)
	}
}

// word is t as ctrlP2PWaiting's b carries it.
func (t blockedTold) word() uint64 {
	b := uint64(uint32(t.taken)) | uint64(uint32(t.used)&usedMask)<<32
	if t.recv {
		b |= 1 << 62
	}
	if t.send {
		b |= 1 << 63
	}
	if t.sendsLeft {
		b |= 1 << 61
	}
	return b
}

// p2pWaitedOn keeps a peer's word that a point-to-point Run of its waits
// for this rank (tellBlocked; b and c as ctrlP2PWaiting carries them), the
// last per peer, for checkBlockedPeers. One that no longer holds (this
// rank has sent the peer something since) is told by its counts.
func (e *Engine) p2pWaitedOn(peer int, ack uint8, b, c uint64) {
	e.waitsMu.Lock()
	if e.p2pWaits == nil {
		e.p2pWaits = map[int]p2pWaitWord{}
	}
	e.labelsDue.Store(true)
	e.p2pWaits[peer] = p2pWaitWord{word: b, ack: ack, taken: uint32(b), used: uint32(b>>32) & usedMask, recv: b>>62&1 == 1, send: b>>63 == 1, sendsLeft: b>>61&1 == 1, sent: uint32(c), hash: uint32(c >> 32)}
	e.p2pWaited.Store(true)
	e.waitsMu.Unlock()
}

// checkBlockedPeers is the look, in a Run that has waited strayAfter, for
// a peer whose point-to-point Run waits for this rank (its word, still
// true: this rank has sent it no message since, where it waits for one,
// or no clear-to-send, where it waits for one) while this Run waits for
// that peer, with every message the peer had sent taken (blockedOn).
// Against a collective, the peer's word is evidence for the vote, as a
// header of another call is (the others' calls at this operation tell
// which rank called differently; the peer's sends left do not matter, as
// a message of its call would fail this one's receive); between two
// point-to-point calls that each wait for the other's message with no send
// to it left, or each for the other's clear-to-send, the engine fails
// naming the higher of the two ranks, as both of them find it.
func (e *Engine) checkBlockedPeers(w *waiter) {
	p, call := w.p, w.call
	type found struct {
		peer int
		pw   p2pWaitWord
	}
	var fs []found
	e.waitsMu.Lock()
	for i := range p.peers {
		peer := p.peers[i].peer
		pw, ok := e.p2pWaits[peer]
		if !ok {
			continue
		}
		l := e.links[peer].Load()
		waitsRecv := pw.recv && uint32(l.number()) == pw.taken
		waitsSend := pw.send && uint32(l.ctsSent)&usedMask == pw.used
		if !waitsRecv && !waitsSend || int32(uint32(l.nextFull())-pw.sent) < 0 {
			continue // the peer may move, or this Run may
		}
		recv, send := e.blockedOn(p, call, i)
		if call.Coll == collectives.SendRecv {
			// Between point-to-point calls: two that wait for each
			// other's message, neither with a send to the other left
			// (one that waits for credits or a clear-to-send this
			// rank has given goes once its rank runs: a peer off its
			// CPU has not seen them), or two that wait for each
			// other's clear-to-send. One that waits for a message
			// while the other waits for a clear-to-send is a direct
			// message against a staged receive, which the receiver
			// names with the lengths (checkDirect).
			sendsLeft := e.st.pp[i].sendCur < len(p.peers[i].sends)
			recv = recv && waitsRecv && !pw.sendsLeft && !sendsLeft
			send = send && waitsSend
		}
		if recv || send {
			fs = append(fs, found{peer, pw})
		}
	}
	e.waitsMu.Unlock()
	for _, f := range fs {
		if call.Coll == collectives.SendRecv {
			a, b := e.Name(e.Rank), e.Name(f.peer)
			e.Abort(max(e.Rank, f.peer), fmt.Errorf("%w: ranks %d and %d each wait for the other in point-to-point calls, with nothing on its way to either", ErrMismatch, min(a, b), max(a, b)))
			return
		}
		e.evidence(e.Rank, callHash(call), f.peer, f.pw.hash, opOf(call), fmt.Sprintf("rank %d disagrees with rank %d: it waits for this rank in a point-to-point call, while this rank waits for it in %s (operation %d)", e.Name(f.peer), e.Name(e.Rank), call.Coll, opOf(call)))
	}
}

// A cycle of point-to-point Runs of three ranks or more, each waiting for
// the next (two are checkBlockedPeers'): rank A waits for a message of
// B's, B for one of C's, C for one of A's. No rank sees more than the
// peers it waits for and the words of those that wait for it, so the
// ranks pass labels against the waits, as Mitchell and Merritt's
// detection does. A point-to-point Run that has waited strayAfter, where
// a peer's word that it waits for this rank still holds and nothing of
// this Run's left could answer it (no send to the peer left where it
// waits for a message, no receive from it where it waits for a
// clear-to-send), sends that peer a label: the highest it has heard of
// so, its own at first (a rank, its Run; passLabels, ctrlP2PLabel). A Run
// takes a label only from a peer it waits for, in answer to the word it
// sent that peer in this Run and still true, and keeps the highest. The
// rank of a cycle's highest label hears its own label back from the rank
// it waits for. Each link the label crossed was a wait its
// target found true, with nothing of the target's Run left to answer it,
// so no Run on the way can end before the one after it, and the last is
// the label's own Run, which has not ended: it fails naming itself. A
// label flows from a rank to the ranks that wait for it, so a rank that
// waits for one in a cycle from outside it, however high, sends the cycle
// none. A Run that waits for two peers keeps the higher label of the two;
// one taken from a chain of waits through the other would go round a
// cycle through the one and stay there after that chain ended, so, as
// in Mitchell and Merritt's scheme, a Run whose waits end for a peer
// while it waits for others takes a fresh label of its own, counted
// higher than any it has had (p2pLabel.count), and that one goes round.
// Labels are ordered by count, then rank: with no such change every
// count is 1, and the rank that finds the cycle is its highest.
//
// A rank sends a peer a label only once the peer has taken its last one
// (the peer's next word says which it took: labelAck, labelSeq), so a
// stopped peer holds at most one of them in its control receives, which
// it does not post again while stopped; and it sends it again where the
// label or the word it answers changed. Around a cycle of n ranks the
// highest label takes n of these steps, each a look of the ranks at both
// ends.

// p2pLabel is a label of passLabels: the rank it is of, that rank's Run
// (Engine.runs, low half) and count (fresh labels of a Run count higher),
// and the links of the chain it has crossed (at most 255).
type p2pLabel struct {
	rank  int
	run   uint32
	count uint16
	hops  uint8
}

// above orders labels: by count, then rank.
func (a p2pLabel) above(b p2pLabel) bool {
	return a.count > b.count || a.count == b.count && a.rank > b.rank
}

// p2pLabelMsg is a peer's label (ctrlP2PLabel), the word of this rank's it
// answers (blockedTold.word), and its number (labelSeq).
type p2pLabelMsg struct {
	p2pLabel
	word uint64
	seq  uint8
}

// labelSent is the last label a Run sent a peer that waits for it, and
// the word of the peer's it answered.
type labelSent struct {
	peer int
	last p2pLabel
	word uint64
}

// p2pLabeled keeps a peer's label, the last per peer, for passLabels.
func (e *Engine) p2pLabeled(peer int, a uint32, b, c uint64) {
	e.waitsMu.Lock()
	if e.p2pLabels == nil {
		e.p2pLabels = map[int]p2pLabelMsg{}
	}
	e.labelsDue.Store(true)
	e.p2pLabels[peer] = p2pLabelMsg{p2pLabel{rank: int(int32(a)), run: uint32(c), count: uint16(c >> 48), hops: uint8(c >> 32)}, b, uint8(c >> 40)}
	e.p2pWaited.Store(true)
	e.waitsMu.Unlock()
}

// passLabels is a point-to-point Run's part in finding a cycle of such
// Runs (above), where it has waited strayAfter: it takes the labels of
// the peers it waits for, and sends its own, the highest, to the peers
// whose words that they wait for it hold. It fails with ErrMismatch naming
// this rank where its own label comes back around a cycle of three ranks
// or more.
func (e *Engine) passLabels(w *waiter) error {
	p, call := w.p, w.call
	run := uint32(e.runs.Load())
	type labelTo struct {
		l    *Link
		word uint64
		seq  uint8
	}
	var (
		sends []labelTo
		cycle = -1 // the peer whose label closed a cycle
		hops  uint8
	)
	if e.labelSeq == nil {
		e.labelSeq, e.labelAck = map[int]uint8{}, map[int]uint8{}
	}
	// The peers this Run waits for; where its waits for one ended while it
	// waits for others, a fresh label (above).
	var on []int
	for i := range p.peers {
		if recv, send := e.blockedOn(p, call, i); recv || send {
			on = append(on, p.peers[i].peer)
		}
	}
	blocked := len(on) > 0
	switch {
	case !w.labeled:
		w.label, w.labeled = p2pLabel{rank: e.Rank, run: run, count: 1}, true
	case blocked && slices.ContainsFunc(w.waitsOn, func(q int) bool { return !slices.Contains(on, q) }):
		w.label = p2pLabel{rank: e.Rank, run: run, count: w.label.count + 1}
	}
	w.waitsOn = append(w.waitsOn[:0], on...)
	e.labelsDue.Store(false) // before the look: what comes during it is due again
	e.waitsMu.Lock()
	for i := range p.peers {
		peer := p.peers[i].peer
		recv, send := e.blockedOn(p, call, i)
		m, ok := e.p2pLabels[peer]
		if !ok {
			continue
		}
		delete(e.p2pLabels, peer)
		e.labelAck[peer] = m.seq // the next word says so (tellBlocked)
		l := e.links[peer].Load()
		now := blockedTold{peer, l.nextFull(), l.ctsUsed, recv, send, e.st.pp[i].sendCur < len(p.peers[i].sends), 0}
		if !recv && !send || now.word() != m.word || !slices.ContainsFunc(w.toldBlocked, func(t blockedTold) bool { t.ack = 0; return t == now }) {
			continue // an answer to a word of another Run, or one no longer true
		}
		switch {
		case m.rank == e.Rank && m.run == run:
			// Its own, of this Run (a fresh one or an older: either
			// went round).
			if m.hops >= 3 {
				cycle, hops = peer, m.hops
			}
		case m.above(w.label):
			w.label = m.p2pLabel
		}
	}
	for peer, pw := range e.p2pWaits {
		if !blocked || peer < 0 || peer >= len(e.links) || peer == e.Rank {
			continue // (a word names its sender's rank)
		}
		l := e.links[peer].Load()
		if l == nil || l.closed.Load() || l.broken.Load() {
			continue
		}
		sendsLeft, recvsLeft := false, false
		if i := slices.IndexFunc(p.peers, func(pp planPeer) bool { return pp.peer == peer }); i >= 0 {
			sendsLeft = e.st.pp[i].sendCur < len(p.peers[i].sends)
			recvsLeft = e.st.pp[i].recvCur < len(p.peers[i].recvs)
		}
		holds := pw.recv && uint32(l.number()) == pw.taken && !sendsLeft ||
			pw.send && uint32(l.ctsSent)&usedMask == pw.used && !recvsLeft
		if !holds {
			continue
		}
		if pw.ack != e.labelSeq[peer] {
			continue // its last label is not taken yet
		}
		j := slices.IndexFunc(w.labelSent, func(s labelSent) bool { return s.peer == peer })
		if j < 0 {
			w.labelSent = append(w.labelSent, labelSent{peer: peer, last: p2pLabel{rank: -1}})
			j = len(w.labelSent) - 1
		}
		s := &w.labelSent[j]
		if s.last == w.label && s.word == pw.word {
			continue // sent, and its wait is the same
		}
		s.last, s.word = w.label, pw.word
		e.labelSeq[peer]++
		sends = append(sends, labelTo{l, pw.word, e.labelSeq[peer]})
	}
	e.waitsMu.Unlock()
	if cycle >= 0 {
		n := fmt.Sprint(hops)
		if hops == 255 {
			n = "255 or more"
		}
		e.Abort(e.Rank, fmt.Errorf("%w: %s ranks wait for each other in a cycle of point-to-point calls, each for the next's message or clear-to-send, with nothing on its way to any; rank %d, in it, waits for rank %d", ErrMismatch, n, e.Name(e.Rank), e.Name(cycle)))
		return e.Err()
	}
	for _, s := range sends {
		s.l.sendCtrl3(ctrlP2PLabel, uint32(int32(w.label.rank)), s.word, uint64(w.label.run)|uint64(min(w.label.hops, 254)+1)<<32|uint64(s.seq)<<40|uint64(w.label.count)<<48) // best effort
	}
	return nil
}

// directWait is a peer's word that its Run waits for this rank's
// clear-to-send for its data message number (Link.number), which is want
// (directWant).
type directWait struct {
	number uint64
	want   uint64
}

// directTold is a direct message a Run has told its receiver it waits to
// send (checkDirect).
type directTold struct {
	peer   int
	number uint64
}

// checkDirect is the look for a disagreement that no message shows, on
// both sides of a direct message: where the sender's message is direct
// (Link.directMinOf bytes or more) and the receiver's receive is staged
// (shorter), the sender waits for a clear-to-send and the receiver for a
// staged message, and neither sends the other anything. Run calls it where it
// has waited strayAfter, as stray. It tells each peer whose clear-to-send
// a send of this Run waits for what it would send, once a message
// (w.toldDirect: progress comes between two words to a peer, so a stopped
// peer's control receives do not fill);
// and it compares a peer's such word with the receive of this Run that
// takes that message, and names the peer where they differ (the
// receiver decides, as for a header it reads: consume).
func (e *Engine) checkDirect(w *waiter) error {
	p, call := w.p, w.call
	es := call.DType.Size()
	for i := range p.peers {
		pp, ps := &p.peers[i], &e.st.pp[i]
		l := e.links[pp.peer].Load()
		if l == nil {
			continue
		}
		if ps.sendCur < len(pp.sends) && ps.sendPiece == 0 && !ps.refused {
			o := &p.S.Ops[pp.sends[ps.sendCur]]
			told := directTold{pp.peer, l.number()}
			if n := o.Len * es; o.ToCopy && n >= l.directMinOf(call) && e.st.ready(o) && l.ctsArrived.Load() <= l.ctsUsed && !slices.Contains(w.toldDirect, told) {
				w.toldDirect = append(w.toldDirect, told)
				if !l.closed.Load() && !l.broken.Load() {
					l.sendCtrl3(ctrlDirectWait, 0, directWant(n, call.sig(o)), told.number) // best effort
				}
			}
		}
		d := l.peerDirect.Load()
		if d == nil {
			continue
		}
		if next := l.nextFull(); d.number < next {
			l.peerDirect.CompareAndSwap(d, nil) // its message was taken
			continue
		} else if d.number > next || ps.recvCur >= len(pp.recvs) {
			continue // a later message, or one a later Run takes
		}
		o := &p.S.Ops[pp.recvs[ps.recvCur]]
		sig := call.sig(o)
		want := o.Len * es
		if isDirectRecv(l, call, o, es) && d.want == directWant(want, sig) {
			continue // the receive will clear it (clearAhead)
		}
		l.peerDirect.Store(nil)
		n := int(d.want >> 32)
		diff := fmt.Sprintf("it sends a message of %d bytes, this rank receives %d", n, want)
		if n == want {
			diff = "it sends a message of another call (its type, count, tag or root differs)"
		}
		return e.mismatchedHash(l, uint32(d.want), sig, diff)
	}
	return nil
}
