package bootstrap

// Lost members: a node locked on a world gives up on the member it waits
// for once gossip has dropped it.
//
// A node locked on a world of a later epoch (a Shrink's or a Grow's)
// waits: the coordinator for every member's ack, a member for the
// coordinator's commit (agree.go). It moves on (abandon) only for a member
// found gone by evidence: a refused connection (evidence.go) or a witness
// on its host (witness.go). A member frozen on another host, or cut off,
// leaves neither: its port still accepts, or nothing answers at all. Had
// it stopped between its proposal and the commit, every survivor waited
// until its caller's context ended.
//
// So a locked node gives up on a member it waits for once gossip has
// dropped it and the last call found no answer (it was reported on
// Failures: lastcall.go), or, for a member that is not in the current
// world (a Grow's joiner, never reported), once it has stayed out of the
// view for lostAfter and does not run on this host (Config.Running). It
// marks the member gone and tells the others (msgLost), who believe it
// without a check of their own, as they believe a witness: the word must
// reach every survivor, or some would wait on.
//
// Every node then abandons the epoch (or, where the world was committed,
// finds the member gone and shrinks again), and they agree on the same old
// world without it in the next epoch, as after a death: shrinkTable keeps
// the old order. A coordinator that gives up has not committed the world
// and never will. A member that gives up on its coordinator cannot know
// whether the commit reached others, and does not need to: those shrink
// from the committed world to the same table. A lost member that resumes
// finds itself expelled (expel.go); a lost joiner stays out of the views
// (gone) and fails to form at its deadline, to be restarted under a new
// name.

import (
	"fmt"
	"time"
)

// lostAfter is how long a locked node waits for a member out of the view
// that was never reported (a Grow's joiner) before it gives it up:
// memberlist took it for dead and nobody heard its refutation in many
// gossip rounds.
const lostAfter = time.Second

// errLost is the error of a member that a locked node gave up on.
var errLost = fmt.Errorf("%w: gossip declared it dead while the world's agreement waited for it", ErrPeerDead)

// lostCheckEvery is the least time between two checks of a locked node
// for members to give up on: a coordinator of 1,000 waits for hundreds of
// acks, and each that comes wakes its loop.
const lostCheckEvery = 50 * time.Millisecond

// lostWatch is what a locked node keeps between its checks: since when
// each member it waits for has been out of the view, and its last check.
type lostWatch struct {
	since map[string]time.Time
	last  time.Time
}

// giveUp says whether this node, locked on w in epoch, gave up on one of
// the members of w at ranks miss that it waits for (lostAwaited), and if
// so has marked it gone. The first world (epoch 1) has no earlier world to
// fall back on and waits.
func (n *Node) giveUp(epoch uint32, w *World, miss []int, watch *lostWatch) bool {
	if epoch <= 1 || time.Since(watch.last) < lostCheckEvery {
		return false
	}
	watch.last = time.Now()
	if watch.since == nil {
		watch.since = make(map[string]time.Time)
	}
	name, ok := n.lostAwaited(w, miss, watch.since)
	if ok {
		n.markLost(name)
	}
	return ok
}

// lostAwaited returns a member of w at ranks miss that a locked node gives
// up on (see above); since holds when each was first seen out of the view,
// kept across calls. A joiner whose process Config.Running shows running
// on this host is not given up: it is starved, not gone, as a member that
// runs here is not reported.
func (n *Node) lostAwaited(w *World, miss []int, since map[string]time.Time) (string, bool) {
	now := time.Now()
	var joiners []int // out for lostAfter and not in the world
	n.mu.Lock()
	n.viewMu.Lock()
	for _, r := range miss {
		name := w.Members[r].Name
		if name == n.name || n.gone[name] {
			continue
		}
		if !n.departed[name] {
			delete(since, name)
			continue
		}
		if _, ok := since[name]; !ok {
			since[name] = now
		}
		if _, inWorld := n.inWorld[name]; inWorld && n.reported[name] {
			n.viewMu.Unlock()
			n.mu.Unlock()
			return name, true
		} else if !inWorld && now.Sub(since[name]) >= lostAfter {
			joiners = append(joiners, r)
		}
	}
	n.viewMu.Unlock()
	n.mu.Unlock()
	for _, r := range joiners { // Running reads /proc: not under the locks
		if n.cfg.Running == nil || !n.cfg.Running(w.Members[r]) {
			return w.Members[r].Name, true
		}
	}
	return "", false
}

// markLost marks name, given up on by a locked node (this one, or the
// sender of a msgLost), gone, and tells the others.
func (n *Node) markLost(name string) {
	if name == n.name {
		return // we run; the others lost us, and we will find ourselves expelled
	}
	n.mu.Lock()
	n.lost[name] = true
	n.mu.Unlock()
	n.markGoneAs(name, msgLost)
}
