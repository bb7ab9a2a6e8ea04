package bootstrap

// Losses while the first world forms: a rank that dies (or gives up and
// leaves) before the first world is committed ends Form on the others.
//
// The first world has no earlier one to fall back on: Shrink's "agree
// again without the dead" would hand the application a world smaller than
// the Size it was started with (GORUN_SIZE), which a program that does not
// expect it (most do not) would misuse, and a rank restarted later could
// come back only through a Grow the program may never call. So, as
// MPI_Init does, Form fails on every survivor, at once and naming the rank
// (a *FormError whose Cause is an *OpError{Peer: rank} wrapping
// ErrPeerDead or ErrPeerLeft), rather than at its deadline (gorun's
// minute) with a view that does not say why. Under gorun --elastic
// --max-restarts every rank whose Init failed is restarted, and the
// restarted ranks form the first world afresh, as torchrun restarts its
// workers when a rendezvous fails. A replacement already in the view (a
// restarted incarnation claiming the rank) keeps the others forming.
//
// What counts as a loss is what counts once formed, no more: memberlist's
// dead verdict after its last call goes unanswered (lastcall.go; not a
// member whose process Config.Running shows running on this host: a
// starved rank at a loaded start), evidence (a refused gossip port:
// evidence.go), or a leave. Suspicion alone never does. A leave counts
// only from a node that leaves unformed (meta.Forming: its Form failed):
// the old node of a rank that finalizes and calls Init again leaves, formed,
// while the others' new nodes form. A death counts only while
// no formed member has told this node that the job runs (jobRunning): a
// rank restarted into a running job waits for the members' Grow, whatever
// dies meanwhile. A node of the world this process finalized
// (Config.Finalized), its rank slow to close it, tells nothing of the
// kind: the others form anew (TestFormAgainEndsWhenRankDies). Its
// coordinator's death counts for a member locked on the first world
// whatever it was told, unless told of a later epoch: a coordinator that
// committed, whose commit to this member was lost and whose push/pull
// state (its epoch) came, and that then died, held the member until its
// deadline (TestFormEndsWhenCoordinatorDiesAfterCommit).
//
// Once locked, a node's outcome is the coordinator's: a member locked on a
// world gives up only when that world's coordinator is lost (it may have
// committed, but then it is dead in the world the others hold, and they
// fail too); the coordinator, locked, only for a member whose ack it still
// waits for (one that acked and then died is in the committed world, and
// reported at install, as any death after Form). A member gives up on its
// coordinator's death coordGrace after it was found: one that formed and
// then abandoned the world may be found gone before its word comes.

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// formLoss is a node of the job found dead or gone while the first world
// formed.
type formLoss struct {
	rank int       // the rank it claimed (-1: unassigned)
	err  error     // ErrPeerLeft or a cause wrapping ErrPeerDead; nil while its last call runs
	seq  uint64    // when err was set, in the order of this node's losses
	at   time.Time // when err was set
}

// coordGrace is how long a member locked on the first world waits, after
// its coordinator was found dead, for the coordinator's abandonment before
// its Form fails: a coordinator that committed, formed and then gave up
// and ended (its Init failed) may be found gone before its msgAbandon,
// which proves the commit (abandon.go), comes. Without it the member's
// Init failed on the refused port, not on the coordinator's reason
// (TestInitRankFailsAfterForm/rank=0/step=formed under -race, once).
const coordGrace = 500 * time.Millisecond

// noteFormLossLocked records that name, claiming rank, was dropped from the
// view before the first world formed; err is nil while its last call runs.
// n.mu is held.
func (n *Node) noteFormLossLocked(name string, rank int, err error) {
	if n.formed {
		return
	}
	l := n.formLosses[name]
	if l == nil {
		l = &formLoss{rank: rank}
		n.formLosses[name] = l
	}
	if err != nil && (l.err == nil || l.err == ErrPeerLeft) {
		l.err = err // a death wins over a leave
		n.formLossSeq++
		l.seq, l.at = n.formLossSeq, time.Now()
	}
}

// causes are the sets of members with a cause of death found, which
// deathCauseLocked reads.
func (n *Node) causes() []map[string]bool {
	return []map[string]bool{n.stopped, n.refused, n.taken, n.lost}
}

// deathCauseLocked is the error of a member found dead: what a witness,
// a refused gossip port or a lost last call says, else ErrPeerDead.
// reportLocked and the first world's losses use it. n.mu is held.
func (n *Node) deathCauseLocked(name string) error {
	switch {
	case n.stopped[name]:
		return errStopped
	case n.refused[name]:
		return errRefused
	case n.taken[name]:
		return errTaken
	case n.lost[name]:
		return errLost
	}
	return ErrPeerDead
}

// runsHereForming says whether the job node q, which gossip dropped from
// the view before the first world formed, runs on this host
// (Config.Running). n.mu is held.
func (n *Node) runsHereForming(q peer) bool {
	if n.cfg.Running == nil || !n.cfg.Running(member(q.meta.Rank, q)) {
		return false
	}
	if n.cfg.Logger != nil {
		n.cfg.Logger.Printf("[WARN] bootstrap: gossip declared rank %d dead while the world formed, but its process runs on this host: not counted", q.meta.Rank)
	}
	return true
}

// formLost returns the error that ends the first world's agreement (see
// above), or nil. locked is the world this node locked on, miss the ranks
// whose answer it waits for (the coordinator's).
func (n *Node) formLost(locked *World, miss []int) error {
	running := n.jobRunning()
	n.mu.Lock()
	if n.formed || len(n.formLosses) == 0 {
		n.mu.Unlock()
		return nil
	}
	type loss struct {
		name string
		formLoss
	}
	// A member locked on the first world counts its coordinator's death
	// even when told that the job runs: the world that runs is then the
	// one it locked on (a committed first world is the only one of its
	// epoch), and the coordinator is dead in it.
	coord := ""
	if locked != nil && locked.Rank != 0 && n.running <= locked.Epoch {
		coord = locked.Members[0].Name
	}
	var losses []loss
	for name, l := range n.formLosses {
		if l.err == nil || l.rank < 0 || l.rank >= n.cfg.Size {
			continue
		}
		if l.err != ErrPeerLeft && running && name != coord {
			continue // a death
		}
		losses = append(losses, loss{name, *l})
	}
	me := n.cfg.Rank
	n.mu.Unlock()
	if len(losses) == 0 {
		return nil
	}
	// Blocking: a loss this node's agreement cannot get past.
	var awaited map[string]bool
	switch {
	case locked != nil && locked.Rank == 0:
		awaited = make(map[string]bool, len(miss))
		for _, r := range miss {
			awaited[locked.Members[r].Name] = true
		}
	case locked != nil:
		awaited = map[string]bool{locked.Members[0].Name: true}
	}
	n.viewMu.Lock()
	claimed := make(map[int]bool)
	for _, q := range n.peers {
		if q.meta.Size == n.cfg.Size && !q.meta.Leaving && !n.gone[q.name] {
			claimed[q.meta.Rank] = true
		}
	}
	n.viewMu.Unlock()
	var blocking, unclaimed []loss
	for _, l := range losses {
		if !claimed[l.rank] {
			unclaimed = append(unclaimed, l)
		}
		if awaited != nil && awaited[l.name] || awaited == nil && !claimed[l.rank] {
			if locked != nil && locked.Rank != 0 && l.err != ErrPeerLeft && time.Since(l.at) < coordGrace {
				continue // its coordinator's death: its abandonment may come yet (coordGrace)
			}
			blocking = append(blocking, l)
		}
	}
	if len(blocking) == 0 {
		return nil
	}
	// Name a rank that died rather than one that left (it may have left
	// because of the death), then the first found: a coordinator that
	// failed because of a death dies or leaves after it.
	pick := slices.Concat(unclaimed, blocking)
	slices.SortStableFunc(pick, func(a, b loss) int {
		return cmp.Or(cmp.Compare(b2i(a.err == ErrPeerLeft), b2i(b.err == ErrPeerLeft)), cmp.Compare(a.seq, b.seq))
	})
	l := pick[0]
	return &OpError{Op: "join", Rank: me, Peer: l.rank, Err: l.err}
}

// formLossNote says, for a *FormError, that rank died or left while the
// first world formed.
func formLossNote(e *OpError) string {
	what := "died"
	if e.Err == ErrPeerLeft {
		what = "left the job"
	}
	return fmt.Sprintf("rank %d %s while the world formed", e.Peer, what)
}

// Exited records that the launcher saw rank's process end, as how says,
// before the first world formed: a loss as a death is (above), for a rank
// that gossip may never have seen, so that the others do not wait for it
// until their deadline. A rank's new incarnation already in the view (a
// restart) keeps the others forming. Once the first world formed, Exited
// does nothing: a death is then reported as any other. Safe for
// concurrent use; it does not block.
func (n *Node) Exited(rank int, how string) {
	if rank < 0 || rank >= n.cfg.Size || rank == n.cfg.Rank {
		return
	}
	n.mu.Lock()
	n.noteFormLossLocked(fmt.Sprintf("exited:r%d", rank), rank,
		fmt.Errorf("%w: the launcher saw its process end (%s) before it joined", ErrPeerDead, how))
	n.mu.Unlock()
	n.signal()
}
