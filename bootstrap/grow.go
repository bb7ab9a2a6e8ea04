package bootstrap

// Grow: ranks join a running job, as torchrun's --max_restarts and
// Horovod Elastic add workers back. A restarted rank starts a node as
// usual (Start, Form): it joins the gossip group through the seeds and
// waits to be admitted. The members of the running world see it in their
// view (Joiners) and, at a point they agree on, call Grow: the agreement
// for the next epoch admits every live rank of the job. Its coordinator
// tells a member whose proposal is missing which epoch runs (msgEpoch); a
// node still forming the first world moves to that epoch and agrees with
// the others on the same table.
//
// A node still forming the first world must also know that the job runs
// before that message comes: the coordinator of the first world prepares
// without every member's proposal once its table is complete (table.go),
// and a restarted rank 0 sees a complete table at once (the survivors
// still publish their ranks) but will never get their acks for epoch 1.
// So a formed member sends its epoch in every push/pull (localState), and
// a joiner, which always makes or receives one to enter the group, learns
// from it that it must wait for the others' Grow.
//
// A node still forming agrees on no world after the first that has no
// member of a world in it (withMember, agree.go): restarted ranks that saw
// only each other would otherwise grow into a world of their own, of a
// later epoch than the members', which the members' next Grow takes for
// the side of a partition that went on.

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
)

// stateVersion heads the push/pull state (localState); stateVersion1 is
// the earlier state, without the digest, which mergeState still reads.
const (
	stateVersion  = 2
	stateVersion1 = 1
)

// localState is this node's push/pull state: version | epoch (uvarint) |
// digest of its world once formed, nothing before.
func (n *Node) localState() []byte {
	n.mu.Lock()
	w, formed := n.world, n.formed
	n.mu.Unlock()
	if !formed {
		return nil
	}
	return append(binary.AppendUvarint([]byte{stateVersion}, uint64(w.Epoch)), w.Digest[:]...)
}

// mergeState records the epoch of a formed member's push/pull state,
// unless its world is the one this process finalized (Config.Finalized):
// a rank slow to close its node while the others call Init again.
func (n *Node) mergeState(buf []byte) {
	if len(buf) == 0 || (buf[0] != stateVersion && buf[0] != stateVersion1) {
		return
	}
	d := decoder{buf: buf[1:]}
	e := uint32(d.uvarint(1<<32 - 1))
	if d.err != nil || e == 0 {
		return
	}
	switch {
	case buf[0] == stateVersion1 && len(d.buf) == 0:
	case buf[0] == stateVersion && len(d.buf) == digestLen:
		if n.ofFinalized([digestLen]byte(d.buf)) {
			return
		}
	default:
		return
	}
	n.mu.Lock()
	n.running = max(n.running, e)
	n.ranPast = max(n.ranPast, e)
	n.mu.Unlock()
	n.signal()
}

// jobRunning says whether a formed member told this node of its world.
func (n *Node) jobRunning() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.running > 0
}

// growTable derives the next world from every live rank of the job: they
// are ordered by the rank they were started with (Config.Rank; a node
// started without one comes last, by name) and numbered 0..n-1, so a job
// whose every rank is back has its original ranks. Of two live nodes
// claiming one rank, a member of the current world wins, then this node
// (the other is a dead incarnation gossip has not cleared yet), then a
// restarted node not yet admitted (meta.Joining) over one that was (an
// incarnation the job went on without that this node does not know of),
// then the smaller name.
//
// A live node the job went on without is left out, as Joiners leaves it
// out (wentOnWithout): it takes no part in the Grow, and a table that held
// it waited for its proposal until the members' contexts ended. The
// members agree on it: those that held a world with it know it (behind),
// and the others from its meta (meta.Behind), which it sets once a member
// tells it (tellRunningLocked; a Grow's keepTelling, until it does). Until
// then, their tables differ and the agreement waits.
//
// A member of the current world that is out of the view but not known to
// be gone (growOut) is missing: no table until the view holds it again or
// it is known gone. Gossip drops live members for a moment: a node back
// from a partition, which took every other for dead, spreads their deaths
// as it rejoins, and each refutes its own within a gossip round. A table
// derived meanwhile left them out, and the members of one world, each
// seeing others dead, agreed on disjoint worlds of one epoch, each of
// itself or of those it still saw (on two namespace hosts,
// TestPartitionHealExpelsLoneRank: 3 of its first 10 runs).
func (n *Node) growTable(peers map[string]peer) proposal {
	n.mu.Lock()
	old := n.world
	n.mu.Unlock()
	inWorld := make(map[string]bool, len(old.Members))
	var p proposal
	var out map[string]bool
	for _, m := range old.Members {
		inWorld[m.Name] = true
		if _, ok := peers[m.Name]; ok {
			continue
		}
		if out == nil {
			out = n.growOut()
		}
		if !out[m.Name] {
			p.missing = append(p.missing, m.Rank)
			p.notes = append(p.notes, fmt.Sprintf("member %s (rank %d) is out of the view but not found gone", m.Name, m.Rank))
		}
	}
	if len(p.missing) > 0 {
		return p
	}
	without := n.wentOnWithout()
	var live []peer
	for _, q := range peers {
		switch {
		case !n.ofJob(q):
		case !inWorld[q.name] && q.name != n.name && without(q):
			p.notes = append(p.notes, fmt.Sprintf("%s (rank %d as started) left out: the job went on without it", q.name, q.meta.Rank))
		default:
			live = append(live, q)
		}
	}
	rankOf := func(q peer) int {
		if q.meta.Rank < 0 {
			return n.cfg.Size
		}
		return q.meta.Rank
	}
	slices.SortFunc(live, func(a, b peer) int {
		return cmp.Or(cmp.Compare(rankOf(a), rankOf(b)),
			-cmp.Compare(b2i(inWorld[a.name]), b2i(inWorld[b.name])),
			-cmp.Compare(b2i(a.name == n.name), b2i(b.name == n.name)), // this node is alive; a stale one of its rank is not
			-cmp.Compare(b2i(a.meta.Joining), b2i(b.meta.Joining)),     // a restart, not the incarnation the job went on without
			cmp.Compare(a.name, b.name))
	})
	limit := max(n.cfg.Size, n.cfg.MaxSize)
	for i, q := range live {
		if i > 0 && q.meta.Rank >= 0 && q.meta.Rank == live[i-1].meta.Rank {
			p.notes = append(p.notes, fmt.Sprintf("rank %d claimed by %s and %s", q.meta.Rank, live[i-1].name, q.name))
			continue
		}
		if len(p.members) == limit {
			p.notes = append(p.notes, fmt.Sprintf("%s waits: the world is at its most, %d ranks (max size)", q.name, limit))
			continue
		}
		r := len(p.members)
		p.members = append(p.members, member(r, q))
		p.seen = append(p.seen, r)
	}
	p.ok = len(p.members) > 0
	return p
}

// growOut is the set of members of the current world a Grow leaves out
// of the view's live ranks: found gone by evidence (a refused connection,
// a witness), said they leave, or dropped by gossip and reported, its last
// call unanswered (lastcall.go). Shrink's left also counts a member gossip
// dropped that does not run on this host before its last call ends; a
// Grow, which no failure calls for, waits for the call.
func (n *Node) growOut() map[string]bool {
	return n.outOfWorld(func(name string) bool { return n.reported[name] })
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Joiners is the number of live ranks of the job that are not members of
// the current world: ranks restarted or started later that wait for Grow,
// as many as Grow can admit (Config.MaxSize).
//
// A process the job went on without is not one, though it lives: a
// member of an earlier world of this node's that a later one left out
// (declared dead while it was frozen, starved or cut off, or expelled),
// and that keeps gossiping. It cannot be admitted again: its state is
// stale, and its Shrink or Grow fails with ErrExpelled (expel.go); a
// restart of its rank (gorun --max-restarts) is a new process, under a
// new name, and counts. Nor is a process whose meta says that the job
// went on without it (meta.Behind), on a node that never held a world
// with it (admitted later). The exception is a node told of a world without
// it that the job may go on in rather than its own (a later epoch, or of
// one epoch the larger: WentOn), on the side of a partition that does
// not go on: the other side's ranks count there, so that its Grow finds
// out (ErrExpelled), as TestCutRankAloneThenExpelled shows.
//
// It is this node's view; the members must agree on when to grow (for
// example with an allreduce of the count).
func (n *Node) Joiners() int {
	n.mu.Lock()
	inWorld := n.inWorld
	n.mu.Unlock()
	without := n.wentOnWithout()
	n.viewMu.Lock()
	defer n.viewMu.Unlock()
	held := map[int]bool{} // ranks (as started) of the world's members: a node claiming one is a stale incarnation
	for name := range inWorld {
		if q, ok := n.peers[name]; ok {
			held[q.meta.Rank] = true
		}
	}
	k := 0
	for name, q := range n.peers {
		if _, ok := inWorld[name]; !ok && !without(q) && n.ofJob(q) && (q.meta.Rank < 0 || !held[q.meta.Rank]) {
			k++
		}
	}
	return min(k, max(0, max(n.cfg.Size, n.cfg.MaxSize)-len(inWorld))) // no more than Grow can admit
}

// wentOnWithout returns the test of whether q, a live node of the job
// that is not a member of the current world, is a process the job went on
// without (see Joiners): a member of an earlier world of this node's that
// a later one left out (behind), unless this node is on the side of a
// partition that does not go on (overtakenLocked), or a node whose meta
// says so (meta.Behind). Joiners and growTable share it, so that a Grow
// admits what Joiners counts.
func (n *Node) wentOnWithout() func(q peer) bool {
	n.mu.Lock()
	var behind map[string]leftOut
	if !n.overtakenLocked() {
		behind = maps.Clone(n.behind)
	}
	n.mu.Unlock()
	return func(q peer) bool {
		_, known := behind[q.name]
		return known || q.meta.Behind
	}
}

// Grow forms the next world from every live rank of the job, the members
// of the current world and the ranks waiting to join (growTable): all
// members of the current world must call it; the joiners take part from
// their Form. It returns a *FormError if they do not agree before ctx is
// done.
func (n *Node) Grow(ctx context.Context) (World, error) {
	n.mu.Lock()
	old, closed := n.world, n.closed
	n.mu.Unlock()
	if closed {
		return World{}, &OpError{Op: "grow", Rank: old.Rank, Peer: -1, Err: ErrClosed}
	}
	stop := n.keepTelling() // so that every member's table leaves them out
	w, err := n.agree(ctx, old.Epoch+1, n.growTable, false)
	stop()
	if err != nil {
		return World{}, err
	}
	n.install(w)
	return w, nil
}
