package bootstrap

// The processes the job went on without (behind; expel.go): how long a
// node remembers them, and how it tells them.
//
// A long elastic job leaves a process behind at every failure: the
// survivors' Shrink leaves it out, and its restart, a new process under a
// new name, is admitted by their Grow. Kept for good, the entries grew
// without bound, each holding the inWorld map of the world it was left
// out of: 3 MB after 10,000 restarts of a 4-rank job
// (TestBehindStaysBounded). So each install drops the entries that cannot
// matter any more (pruneBehindLocked). A node told once that the job went
// on without it is told again until it says it knows (retellLocked).

import (
	"cmp"
	"slices"
)

// leftOut is an entry of behind: a member of a world this node held that
// a later world it installed left out.
type leftOut struct {
	// held is the last world this node held with it (that world's
	// inWorld, shared and never written), which names the members that
	// know it is behind (tellsLocked).
	held map[string]int
	at   uint32 // the epoch of the world that left it out
}

// pruneBehindLocked drops the entries of behind that cannot matter any
// more. An entry is read only for a node in the view: Joiners and
// growTable leave it out, backInView and tellUnflagged tell it. So an
// entry goes:
//
//   - once its node is found gone (gone: a refused port, a restart at its
//     address, a witness, Expel): the view never takes it again
//     (delegate.update), so nothing would read the entry;
//   - once its node is out of the view and a member of the current world
//     was started with its rank (Config.Rank, in its name: startedRank), a
//     restart of it: gorun restarts a rank when its process ended. Should
//     it live (frozen or cut off) and come back, Joiners does not count
//     it, a member of the world holding its rank, nor does a Grow admit it
//     (growTable gives the rank to the member); its own agreement learns
//     from a push/pull or its msgAsk that the job went on (ErrExpelled).
//     Only the tell when it comes back is lost, and with it the Behind
//     flag the tell makes it set: should the member holding its rank
//     leave too while it is back, it counts as a joiner here, as it does
//     on a rank admitted later, until it leaves (its own Shrink or Grow
//     fails with ErrExpelled, and its application exits);
//   - beyond maxBehind entries of nodes out of the view, the ones left out
//     earliest (then by name, so that members that held the same worlds
//     keep the same ones). Once superseded entries go, the ranked
//     processes out of the view are one per rank no member holds (a
//     rank's next process enters a world only once the last one left
//     it), but for one that was in the view when its rank's restart was
//     admitted; so this bounds the processes started without a rank
//     (Config.Rank -1), which nothing supersedes. Such a process, left
//     out more than maxBehind processes ago and back in the view, counts
//     as a joiner here until a member that still knows it tells it and
//     its meta says Behind, as it does on a rank admitted later.
//
// A node in the view keeps its entry: it is a live process, and the
// entry is what keeps it out of the tables until its meta says Behind.
// n.mu is held.
func (n *Node) pruneBehindLocked() {
	if len(n.behind) == 0 {
		return
	}
	ranks := n.heldRanksLocked()
	var out []string // nodes out of the view that no rule dropped
	n.viewMu.Lock()
	for name := range n.behind {
		_, seen := n.peers[name]
		switch r := startedRank(name); {
		case n.gone[name]:
			delete(n.behind, name)
		case seen:
		case r >= 0 && ranks[r]:
			delete(n.behind, name)
		default:
			out = append(out, name)
		}
	}
	n.viewMu.Unlock()
	if extra := len(out) - n.maxBehind(); extra > 0 {
		slices.SortFunc(out, func(a, b string) int {
			return cmp.Or(cmp.Compare(n.behind[a].at, n.behind[b].at), cmp.Compare(a, b))
		})
		for _, name := range out[:extra] {
			delete(n.behind, name)
		}
	}
}

// maxBehind is the most entries of behind pruneBehindLocked keeps for
// nodes out of the view: as many as the job may have ranks, which the
// ranked processes out of the view reach only with those that were in
// the view when a restart of their rank was admitted.
func (n *Node) maxBehind() int { return max(n.cfg.Size, n.cfg.MaxSize) }

// retellLocked tells the node name, a node behind that this node told it
// runs a world without it (tellRunningLocked), the same again, in the
// background, until it says it knows: a tell is one stream, and one lost
// (a failed dial, the node busy or cut off again for a moment) left it
// untold until something else told it, a Grow (keepTelling) or its own
// agreement (msgAsk), its meta never saying Behind, so that a rank
// admitted later counted it as a joiner. The tells stop once its meta
// says Behind (it knows: heardRunning, markBehind), once it leaves the
// view (backInView tells it again when it is back) or says it leaves, once
// this node no longer tells it (tellsLocked: its entry pruned, or this
// node on the side of a partition that does not go on) and when this node
// closes. The period doubles from tellEvery up to tellEveryMax, as a
// Grow's does (keepTelling); one goroutine per node told. n.mu is held.
func (n *Node) retellLocked(name string) {
	if n.closed || n.retelling[name] {
		return
	}
	n.retelling[name] = true
	n.wg.Add(1) // shutdown sets closed under mu before it waits
	go func() {
		defer n.wg.Done()
		for wait := tellEvery; n.sleep(wait); wait = min(2*wait, tellEveryMax) {
			n.mu.Lock()
			w, q, ok := n.untoldLocked(name)
			if !ok {
				delete(n.retelling, name) // in the test's critical section: a backInView before it finds this goroutine telling, one after it starts another
			}
			n.mu.Unlock()
			if !ok {
				return
			}
			n.sendRunning(w, []peer{q})
		}
	}()
}

// untoldLocked says whether this node still tells name, a node behind
// (retellLocked): its teller, it is in the view and of the job, its meta
// does not say Behind, and this node is not on the side of a partition
// that does not go on. It returns the world to tell and the node's peer.
// n.mu is held.
func (n *Node) untoldLocked(name string) (World, peer, bool) {
	e, ok := n.behind[name]
	if !ok || n.closed || !n.formed || n.overtakenLocked() || !n.tellsLocked(e.held) {
		return World{}, peer{}, false
	}
	n.viewMu.Lock()
	q, seen := n.peers[name]
	n.viewMu.Unlock()
	if !seen || q.meta.Behind || !n.ofJob(q) {
		return World{}, peer{}, false
	}
	return n.world, q, true
}
