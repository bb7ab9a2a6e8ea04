package bootstrap

// Expelled: a member the others declared dead while it lived (frozen by
// SIGSTOP or a debugger, starved, cut off) comes back and calls Shrink or
// Grow from its old world. The others have agreed on a later world without
// it and will never answer its agreement: without a word from them it
// waited until they left, then agreed on a world of itself and went on
// alone (seen in the chaos soak, 52-85 s after the resume).
//
// The word is the epoch the job runs. A committed world of epoch R needs
// every member of it locked on R (agree.go), so a node agreeing on epoch
// E ≤ R that is not locked on R is not a member of that world: the job
// went on without it, and its Shrink or Grow fails with ErrExpelled. It
// learns R from three sources: a formed member's push/pull state (grow.go,
// every PushPullInterval); sooner, the answer to msgAsk, which it sends to
// the members it waits for once the agreement has waited askAfter: a
// formed member whose world is of epoch E or later and leaves the asker
// out answers msgRunning with that epoch (the asker includes its gossip
// address, since the others have dropped it from their views); and, if the
// others finished while it was away, their leave notice (msgLeaving
// carries the leaver's epoch), which a leaving node also sends to the
// members it found gone (node.go shutdown). Without the last, it agreed on
// a world of itself once they had all left. And a member whose world left
// it out tells it msgRunning, unasked, when it comes back into the
// member's view (tellRunningLocked), and again until its meta says it
// knows (retellLocked, behind.go).
//
// Until it finds out, it gossips as a live node of the job that is not a
// member of their world, which is how a joiner looks. It is none: a member
// keeps the members of its earlier worlds that a later one left out
// (behind), and Joiners does not count them nor a Grow admit them
// (grow.go), unless a node told it of a world without it that the job may
// go on in (a partition's other side, below): before, an elastic
// application called Grow on its account, for a member that cannot be
// admitted, and the Grow waited for it until its context ended. A node
// told that the job went on without it says so in its meta (meta.Behind),
// and no node counts or admits it then: a rank admitted later never held
// a world with it and counted it for good (until it ended). Such a rank
// learns it from that meta alone, so it counts the process from the
// moment it is back in its view until its tellers' word (a stream) and
// then its meta update (a few gossip rounds; a push/pull if the gossip is
// lost) have reached it. Closing that window takes the names of the
// processes behind sent to every rank admitted (a new message or
// push/pull field), and the rank must still have them before the process
// is back; the meta cannot carry the epoch each node runs (a meta update
// per node per world, under memberlist's 512 bytes).
//
// A partition breaks the rule of one world per epoch: each side finds the
// other dead and shrinks without it, so a rank cut off from the rest runs
// a world of itself of the same epoch as theirs (RELIABILITY gap 15). Once
// the link is back, it sees their ranks as joiners; its Grow, agreeing on
// the next epoch, asks them, and a member whose world is of the asker's
// epoch and leaves it out answers too, with its world's digest and size.
// Two worlds of one epoch with different digests are the two sides; the
// larger goes on (of two of a size, the one with the lower digest), and a
// node of the other fails its agreement with ErrExpelled (split), as a
// rank the job went on without. A node that learns so passes the word on
// to the other members of its side (relaySplit), and its leave notice
// says it again (leaveNotice): a member that did not know agreed on a
// world of the rest of the side once it left.

import (
	"bytes"
	"fmt"
	"strconv"
	"sync"
	"time"
)

const (
	// askAfter is how long an agreement waits before it asks: a Shrink of
	// live members agrees within tens of milliseconds, and the asks are
	// wasted then.
	askAfter = 200 * time.Millisecond
	// askEvery is the least time between two rounds of asks; askFanout
	// bounds the members asked in one round.
	askEvery  = 200 * time.Millisecond
	askFanout = 3
	// tellEvery is the first period of a Grow's repeated tells
	// (keepTelling); it doubles each round up to tellEveryMax, so that a
	// node that never takes the stream costs a Grow of a minute a few tens.
	tellEvery    = askEvery
	tellEveryMax = 16 * tellEvery
)

// expelledAt says whether this node, agreeing on epoch (locked on the
// world locked, or not locked), is left out of a world the job runs: it
// returns that world's epoch, or 0.
func (n *Node) expelledAt(epoch uint32, locked *World) uint32 {
	if epoch <= 1 {
		return 0 // forming the first world, or joining a running job (grow.go)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.formed {
		return 0
	}
	if r := n.ranPast; r > epoch || (r == epoch && locked == nil) {
		return r
	}
	if n.split != 0 && n.split == n.world.Epoch {
		return n.split // the other side of a partition goes on
	}
	return 0
}

// expelledError is the error of an agreement for epoch on a node the job
// left out of its world of epoch r.
func (n *Node) expelledError(op string, epoch, r uint32) error {
	n.mu.Lock()
	rank := n.world.Rank
	n.mu.Unlock()
	return &OpError{Op: op, Rank: rank, Peer: -1,
		Err: fmt.Errorf("%w: agreeing on epoch %d, the others run epoch %d without it", ErrExpelled, epoch, r)}
}

// ask sends msgAsk for epoch to up to askFanout of the members (by rank
// in members) this node waits for, starting at the round's offset.
func (n *Node) ask(epoch uint32, members []Member, ranks []int, round int) {
	m := message{kind: msgAsk, epoch: epoch, from: n.name, about: n.Addr()}
	for i := 0; i < min(askFanout, len(ranks)); i++ {
		r := ranks[(round*askFanout+i)%len(ranks)]
		if r >= 0 && r < len(members) && members[r].Name != n.name {
			n.send(members[r].Name, members[r].Addr, m)
		}
	}
}

// answerAsk answers another node's msgAsk: with msgRunning if this node's
// world leaves the asker out and is of the asked epoch or later, or of the
// epoch before it, the asker's own world's (the other side of a
// partition), with its digest and size.
func (n *Node) answerAsk(m message) {
	n.mu.Lock()
	w, formed := n.world, n.formed
	_, in := n.inWorld[m.from]
	n.mu.Unlock()
	if !formed || in || w.Epoch+1 < m.epoch || m.from == n.name {
		return
	}
	n.send(m.from, m.about, message{kind: msgRunning, epoch: w.Epoch, digest: w.Digest, from: n.name, about: strconv.Itoa(w.Size)})
}

// heardRunning records a msgRunning answer: a formed member runs a world
// of epoch m.epoch, digest m.digest and m.about ranks that leaves this node
// out. Of this node's own epoch, it is the other side of a partition: it
// marks this node's side split if that side goes on (see above). The
// sender's world is kept for Joiners (runs, keepRunLocked).
func (n *Node) heardRunning(m message) {
	size, err := strconv.Atoi(m.about)
	n.mu.Lock()
	n.ranPast = max(n.ranPast, m.epoch)
	w := n.world
	relay := false
	if err == nil && n.formed && m.epoch == w.Epoch && m.digest != w.Digest && goesOn(size, m.digest, w.Size, w.Digest) {
		relay = n.split != w.Epoch
		n.split, n.wentOn = w.Epoch, m.digest
	}
	behind := false
	if err == nil && m.from != n.name {
		r := World{Epoch: m.epoch, Size: size, Digest: m.digest}
		n.keepRunLocked(m.from, r)
		behind = n.formed && WentOn(r, w)
	}
	n.mu.Unlock()
	if relay {
		n.relaySplit(w, m)
	}
	if behind {
		n.markBehind()
	}
	n.signal()
}

// relaySplit passes m, the msgRunning that told this node its side of a
// partition does not go on, to the other members of w, its world (that
// side), over streams, in the background. The others' tells reach one
// member of a side before another, and a member that fails its agreement
// with ErrExpelled leaves (its application exits): its side's members
// still agreeing then derive a table without it and, not knowing of the
// split, agreed on a world of the rest of their side, of the next epoch,
// which the job then took for the one it went on in (a later epoch wins:
// WentOn), so that the side that was to go on was expelled too (on two
// namespace hosts, TestPartitionHealExpelsLoneRank's 2|2 split, CI
// 2026-12-03: rank 3 grew alone into epoch 3 once rank 2 left, and ranks
// 0 and 1 failed). shutdown waits for the streams before its leave notice
// (wg), and the notice says it too (leaveNotice): a member may handle the
// notice's packet before the stream. Each member relays once: k members
// of a side send k(k-1) streams, once per partition.
func (n *Node) relaySplit(w World, m message) {
	n.goUnlessClosed(func() {
		sem := make(chan struct{}, resendStreams)
		var wg sync.WaitGroup
		for _, q := range w.Members {
			if q.Name == n.name || tellLost != nil && tellLost(n, q.Name) {
				continue
			}
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				n.sendStream(q.Name, q.Addr, m) // a member that misses it asks (askAfter) or is told by the other side
			}()
		}
		wg.Wait()
	})
}

// markBehind says in this node's meta that the job went on without it
// (meta.Behind), once, in the background: a node that never held a world
// with it (a rank admitted later) then does not count it as a joiner
// (Joiners), as the members that left it out do (behind).
func (n *Node) markBehind() {
	n.metaMu.Lock()
	was := n.meta.Behind
	if !was {
		n.meta.Behind = true
		if buf, err := n.meta.encode(); err == nil {
			n.metaBuf = buf
		}
	}
	n.metaMu.Unlock()
	if !was {
		n.goUnlessClosed(func() { n.updateNode(n.cfg.LeaveTimeout) })
	}
}

// leaveNotice is the msgLeaving this node, leaving, sends the members of
// w, its world: its epoch and digest, or, on the side of a partition that
// does not go on (split), the digest of the world that does, which tells
// a member that has not heard of the split yet (heardLeavingLocked). The
// streams of relaySplit went first, but a member may handle this packet
// before the stream (each has its goroutine; 4 ranks on 2 CPUs under
// -race): it dropped this node from its table and agreed on a world of
// the rest of the side, as before relaySplit (2|2, 1 of 20 runs).
func (n *Node) leaveNotice(w World) message {
	n.mu.Lock()
	defer n.mu.Unlock()
	m := message{kind: msgLeaving, epoch: w.Epoch, digest: w.Digest, from: n.name}
	if n.formed && n.split == w.Epoch && n.world.Epoch == w.Epoch {
		m.digest = n.wentOn
	}
	return m
}

// heardLeavingLocked reads m, a msgLeaving: one from a member of this
// node's world, of its epoch, whose digest is another world's says that
// world goes on rather than theirs (leaveNotice), and marks this node's
// side split. No other leave differs so: a member's world of one epoch
// is this node's, and a node of another world (the other side, telling
// the members it found gone) is no member of this one. The split is set
// with the leave, under n.mu, so the agreement finds it (expelledAt, at
// the top of its every round) before it commits a table without the
// leaver. n.mu is held.
func (n *Node) heardLeavingLocked(m message) {
	if _, in := n.inWorld[m.from]; in && n.formed && m.from != n.name && m.epoch == n.world.Epoch && m.digest != n.world.Digest && n.split != m.epoch {
		n.split, n.wentOn = m.epoch, m.digest
	}
}

// tellRunningLocked tells each of qs, live nodes that were members of a
// world this node held and that its world leaves out (behind), the world
// it runs, as an answer to msgAsk does: a process the job went on without
// learns that it did (its next agreement fails with ErrExpelled, and it
// flags itself: markBehind), and the other side of a partition learns
// which side goes on, and counts this side's ranks as joiners if this side
// does (Joiners). held is the last world this node held with them (a
// value of behind): only its tellers tell (tellsLocked), over a stream, in
// the background, and again until it says it knows (retellLocked). n.mu
// is held.
func (n *Node) tellRunningLocked(held map[string]int, qs []peer) {
	if n.tellsLocked(held) {
		n.sendRunningLocked(qs)
		for _, q := range qs {
			n.retellLocked(q.name)
		}
	}
}

// tellsLocked says whether this node is a teller of a node its world
// left out whose last world with this node is held (a value of behind):
// of the members of its world that were members of held too, one of the
// tellers of the lowest ranks. Each of those members knows the node is
// behind and finds the same tellers. Before, the tellers were the lowest
// ranks of the world, and when those had all been admitted after the job
// went on without a process (they never held a world with it), nobody
// told it: a rank admitted later counted it as a joiner until a Grow told
// it (tellUnflagged). n.mu is held.
func (n *Node) tellsLocked(held map[string]int) bool {
	k := 0
	for _, m := range n.world.Members { // by rank
		if m.Name == n.name {
			return true
		}
		if _, ok := held[m.Name]; ok {
			if k++; k == tellers {
				return false
			}
		}
	}
	return false
}

// sendRunningLocked sends each of qs msgRunning with the world this node
// runs, in the background (sendRunning). n.mu is held.
func (n *Node) sendRunningLocked(qs []peer) {
	if n.closed || !n.formed || len(qs) == 0 {
		return
	}
	w := n.world
	n.wg.Add(1) // shutdown sets closed under mu before it waits
	go func() {
		defer n.wg.Done()
		n.sendRunning(w, qs)
	}()
}

// sendRunning sends each of qs msgRunning with w, this node's world, over
// a stream, one after the other.
func (n *Node) sendRunning(w World, qs []peer) {
	m := message{kind: msgRunning, epoch: w.Epoch, digest: w.Digest, from: n.name, about: strconv.Itoa(w.Size)}
	for _, q := range qs {
		if tellLost == nil || !tellLost(n, q.name) {
			n.sendStream(q.name, q.addr, m) // a loss is repaired by the next tell (retellLocked, keepTelling)
		}
	}
}

// sendStream delivers m to the node named name at addr (host:port) over a
// stream, memberlist's reliable user message; it blocks until sent or
// failed, bounded by TCPTimeout.
func (n *Node) sendStream(name, addr string, m message) {
	to, ok := nodeAt(name, addr)
	if !ok {
		return
	}
	m.seq = n.sent.Add(1)
	_ = n.ml.SendReliable(to, m.encode())
}

// tellLost, if set, says whether the msgRunning that n is about to send
// (or relay: relaySplit) to the node named to is lost (a hook for tests:
// TestGrowTellsAgainWhenTheTellIsLost, TestSplitReachesEveryMemberOfTheSide,
// TestBackInViewTellsAgainWhenTheTellIsLost).
var tellLost func(n *Node, to string) bool

// tellers is how many members, those of the lowest ranks that know, tell
// a node behind that the job runs without it (tellsLocked): one word is
// enough, and a member of a world of thousands that resumes should not be
// sent a stream by each.
const tellers = askFanout

// tellUnflagged tells each live node the job went on without that this
// node knows of (behind), whose meta does not say so yet (meta.Behind) and
// whose teller it is (tellsLocked), the world it runs, unless this node is
// on the side of a partition that does not go on; it returns when the
// streams are sent. A Grow calls it (keepTelling): its table leaves such
// a node out (growTable), and a member admitted later, which never held a
// world with it, leaves it out only once its meta says so. The tellers
// tell it when it comes back (backInView), and again while it does not
// say it knows (retellLocked), but a Grow may begin before a word gets
// through, the period of those tells grown to seconds: the members'
// tables differed, and the Grow waited until their contexts ended. Its
// cost is a stream per teller, per round, only while such a node is
// unflagged.
func (n *Node) tellUnflagged() {
	n.mu.Lock()
	if n.closed || !n.formed || len(n.behind) == 0 || n.overtakenLocked() {
		n.mu.Unlock()
		return
	}
	w := n.world
	var qs []peer
	n.viewMu.Lock()
	for name, e := range n.behind {
		if q, ok := n.peers[name]; ok && !q.meta.Behind && n.ofJob(q) && n.tellsLocked(e.held) {
			qs = append(qs, q)
		}
	}
	n.viewMu.Unlock()
	n.mu.Unlock()
	n.sendRunning(w, qs)
}

// keepTelling tells the processes the job went on without that are not
// flagged yet (tellUnflagged) at once and then again, while a Grow waits
// for agreement, until stop is called. A Grow told them once: if that
// stream was lost (a failed dial, the node unreachable for a moment), its
// meta never said Behind, the members admitted later held it in their
// tables, and the Grow waited until its context ended. A round's streams
// go one after the other, so rounds do not pile up behind a node that
// does not take them; the period doubles from tellEvery up to
// tellEveryMax.
func (n *Node) keepTelling() (stop func()) {
	quit := make(chan struct{})
	n.goUnlessClosed(func() {
		for wait := tellEvery; ; wait = min(2*wait, tellEveryMax) {
			n.tellUnflagged()
			t := time.NewTimer(wait)
			select {
			case <-quit:
			case <-n.done:
			case <-t.C:
				continue
			}
			t.Stop()
			return
		}
	})
	return sync.OnceFunc(func() { close(quit) })
}

// backInView tells q, a node that came (back) into the view, the world
// this node runs if q is a member of a world it held that this world
// leaves out (tellRunningLocked).
func (n *Node) backInView(q peer) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if e, ok := n.behind[q.name]; ok {
		n.tellRunningLocked(e.held, []peer{q})
	}
}

// overtakenLocked says whether a node told this one of a world without it
// that the job may have gone on in rather than this node's (runs;
// WentOn): this node is then on the side of a partition that does not go
// on, and the nodes it left behind count as joiners (Joiners). n.mu is
// held.
func (n *Node) overtakenLocked() bool {
	for _, r := range n.runs {
		if !WentOn(n.world, r) {
			return true
		}
	}
	return false
}

// keepRunLocked records r, the world that node from told this node it
// runs without it (msgRunning), in runs for overtakenLocked, which asks
// whether one of them went on rather than this node's world. The one
// that went on furthest answers for all (WentOn orders worlds: the later
// epoch, then the larger, then the lower digest), so runs keeps that
// one, and only if it went on rather than this node's world, which only
// goes on. It kept one world per sender, and a node behind is told by
// each member that finds it back in its view. n.mu is held.
func (n *Node) keepRunLocked(from string, r World) {
	if WentOn(n.world, r) {
		return
	}
	for s, o := range n.runs {
		if !WentOn(r, o) {
			return // o went on as far
		}
		delete(n.runs, s)
	}
	n.runs[from] = r
}

// WentOn says whether the job went on in world a rather than in world b,
// two worlds ranks come from (comm's membership check): the later epoch,
// or of two of one epoch, the sides of a partition, the one that goes on
// (goesOn). Of two equal worlds neither.
func WentOn(a, b World) bool {
	if a.Epoch != b.Epoch {
		return a.Epoch > b.Epoch
	}
	return goesOn(a.Size, a.Digest, b.Size, b.Digest)
}

// goesOn says whether, of two worlds of one epoch (the two sides of a
// partition), the first (size ranks, digest d) goes on rather than the
// second: the larger, or of two of a size the one with the lower digest.
// Exactly one of two different worlds goes on.
func goesOn(size int, d [digestLen]byte, other int, od [digestLen]byte) bool {
	return size > other || size == other && bytes.Compare(d[:], od[:]) < 0
}
