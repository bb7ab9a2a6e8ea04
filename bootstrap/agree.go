package bootstrap

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"slices"
	"time"
)

// proposal is the table a node derives from its current view of the job.
type proposal struct {
	members    []Member // by rank; complete only if ok
	ok         bool
	seen       []int
	missing    []int
	unassigned int
	notes      []string
}

// formTable derives the first world from the live members of the job:
// assigned ranks keep their rank (of two nodes claiming one rank, the
// smaller name wins); unassigned nodes, sorted by (host, name), fill the
// free ranks in ascending order, so that ranks of one host are adjacent.
func formTable(peers map[string]peer, size int) proposal {
	p := proposal{members: make([]Member, size)}
	filled := make([]bool, size)
	var free []peer
	for _, q := range peers {
		m := q.meta
		switch {
		case m.Size != size:
			p.notes = append(p.notes, fmt.Sprintf("node %s (rank %d) has size %d", q.name, m.Rank, m.Size))
		case m.Leaving:
		case m.Rank < 0:
			free = append(free, q)
		case m.Rank >= size:
			p.notes = append(p.notes, fmt.Sprintf("node %s has rank %d ≥ size", q.name, m.Rank))
		case !filled[m.Rank]:
			filled[m.Rank] = true
			p.members[m.Rank] = member(m.Rank, q)
		default:
			old := p.members[m.Rank].Name
			p.notes = append(p.notes, fmt.Sprintf("rank %d claimed by %s and %s", m.Rank, min(old, q.name), max(old, q.name)))
			if q.name < old {
				p.members[m.Rank] = member(m.Rank, q)
			}
		}
	}
	slices.SortFunc(free, func(a, b peer) int {
		return cmp.Or(cmp.Compare(a.meta.Host, b.meta.Host), cmp.Compare(a.name, b.name))
	})
	for r := 0; r < size && len(free) > 0; r++ {
		if !filled[r] {
			filled[r] = true
			p.members[r] = member(r, free[0])
			free = free[1:]
		}
	}
	p.unassigned = len(free)
	for r, f := range filled {
		if f {
			p.seen = append(p.seen, r)
		} else {
			p.missing = append(p.missing, r)
		}
	}
	slices.Sort(p.notes)
	p.ok = len(p.missing) == 0
	return p
}

func member(rank int, q peer) Member {
	return Member{Rank: rank, Name: q.name, Addr: q.addr, Host: q.meta.Host, Blob: q.meta.Blob}
}

// shrinkTable derives the next world from old: its members that have not
// left it, renumbered in the order of their old ranks. A member has left
// if it is in out (gossip dropped it, evidence found it gone, or it said
// it leaves) or its meta in the view says it leaves. A member this node's
// view has not reached yet stays: a large world is agreed before every
// view holds every member (hello.go), and a node that never saw a member
// cannot hear of its death from gossip; the agreement probes such members
// when it stalls (probeUnseen).
func shrinkTable(peers map[string]peer, old World, out map[string]bool) proposal {
	var p proposal
	for _, m := range old.Members {
		if q, ok := peers[m.Name]; (ok && q.meta.Leaving) || out[m.Name] {
			continue
		}
		m.Rank = len(p.members)
		p.members = append(p.members, m)
		p.seen = append(p.seen, m.Rank)
	}
	p.ok = len(p.members) > 0
	return p
}

// left is the set of members that gossip dropped (unless the kernel shows
// them running on this host: Config.Running), evidence found gone, or
// that said they leave: out for shrinkTable. A starved member that gossip
// dropped is not reported (runsHere), and it keeps itself in its own
// table; leaving it out of the others' tables stalled the shrink until it
// refuted (at 1,000 members in one process, 124 of them at once).
func (n *Node) left() map[string]bool {
	return n.outOfWorld(func(name string) bool { return !n.runningLocked(name) })
}

// outOfWorld is the set of members that evidence found gone, that said
// they leave, or that gossip dropped and dropped (called with n.mu held)
// counts out.
func (n *Node) outOfWorld(dropped func(name string) bool) map[string]bool {
	out := make(map[string]bool)
	var departed []string
	n.viewMu.Lock()
	for name := range n.departed {
		departed = append(departed, name)
	}
	for name := range n.gone {
		out[name] = true
	}
	n.viewMu.Unlock()
	n.mu.Lock()
	for _, name := range departed {
		if dropped(name) {
			out[name] = true
		}
	}
	for name := range n.leaving {
		out[name] = true
	}
	n.mu.Unlock()
	return out
}

// relayLeaving passes the msgLeaving of each member of the current world
// that said it leaves to the ranks of w in ranks (whose proposals are
// missing or differ). A leaver tells every member once, by UDP; one that
// missed it, and whose gossip view never held the leaver (hello.go), keeps
// it in its table until told again.
func (n *Node) relayLeaving(w *World, ranks []int) {
	n.mu.Lock()
	var leavers []string
	for name := range n.leaving {
		if _, in := n.inWorld[name]; in {
			leavers = append(leavers, name)
		}
	}
	epoch, digest := n.world.Epoch, n.world.Digest
	n.mu.Unlock()
	for _, name := range leavers {
		m := message{kind: msgLeaving, epoch: epoch, digest: digest, from: name}
		for _, r := range ranks {
			n.resend(w.Members[r].Name, w.Members[r].Addr, m)
		}
	}
}

// probeUnseen probes up to unseenBatch members of a table that this
// node's view does not hold, from the round-th batch on: it cannot hear
// of their death from gossip (shrinkTable). Each probe is a goroutine and
// a connection, and right after a large world formed a view may miss
// most members, so a period probes a batch.
func (n *Node) probeUnseen(members []Member, round int) {
	n.viewMu.Lock()
	var unseen []Member
	for _, m := range members {
		if _, ok := n.peers[m.Name]; !ok && m.Name != n.name {
			unseen = append(unseen, m)
		}
	}
	n.viewMu.Unlock()
	for i := range min(unseenBatch, len(unseen)) {
		m := unseen[(round*unseenBatch+i)%len(unseen)]
		n.probe(m.Name, m.Addr, 1)
	}
}

// digestOf hashes everything a world view consists of.
func digestOf(job string, epoch uint32, members []Member) [digestLen]byte {
	h := sha256.New()
	var b []byte
	b = appendString(b, job)
	b = binary.AppendUvarint(b, uint64(epoch))
	b = binary.AppendUvarint(b, uint64(len(members)))
	for _, m := range members {
		b = binary.AppendUvarint(b, uint64(m.Rank))
		b = appendString(b, m.Name)
		b = appendString(b, m.Addr)
		b = appendString(b, m.Host)
		b = appendString(b, string(m.Blob))
	}
	h.Write(b)
	var d [digestLen]byte
	copy(d[:], h.Sum(nil))
	return d
}

// agree runs the agreement for epoch (see doc.go): derive the table from
// the current view; the table's rank 0 coordinates a two-phase commit of
// its digest D. Members propose D; once all proposed D the coordinator
// sends prepare(D); a member whose table still hashes to D (after the first
// epoch: that proposed D, and whose table now holds all of D's members)
// locks on it for good and acks; once all acked, the coordinator commits.
// Every message is resent until answered.
//
// leftOnly says that table depends on the view only through the members
// that left it (shrinkTable): the table is then derived again when a
// member leaves, says it leaves, comes back or is found gone (outGen), or
// when left() changes, not on every join. A shrink right after a large
// world formed runs while gossip fills the views (hello.go): at 1,000
// members every member derived an O(n) table on each of n joins.
func (n *Node) agree(ctx context.Context, epoch uint32, table func(map[string]peer) proposal, leftOnly bool) (World, error) {
	tick := time.NewTicker(max(5*n.cfg.GossipInterval, 50*time.Millisecond))
	defer tick.Stop()
	resend := max(10*n.cfg.GossipInterval, 100*time.Millisecond)
	var (
		gen    uint64
		view   []peer
		peers  map[string]peer
		p      proposal
		me     int
		d      [digestLen]byte
		sent   message // last message sent to the coordinator (member)
		sentAt time.Time
		out    map[string]bool // leftOnly: left() when the table was derived
		locked *World          // the world this node locked on: final
		miss   []int           // coordinator: ranks whose proposal or ack is missing
		start  = time.Now()

		tbl         *tablePrepare   // member: the received table merged into peers (table.go)
		tableSent   map[string]bool // coordinator: members sent the table
		tableBuf    []byte          // the encoded table of locked
		settled     time.Time       // coordinator: since when its table is complete and unchanged
		preparedAt  time.Time
		asked       time.Time // when this node last asked whether the job went on without it (expel.go)
		aloneSince  time.Time // a restarted node: since when no other rank of its job is in the view (jobGone)
		unseenAt    time.Time // when this node last probed the members its view does not hold
		unseenRound int
		askRound    int
		watch       lostWatch // locked: the members it waits for that are out of the view (lost.go)

		// A member's table may gain a member between its propose of D and
		// the coordinator's prepare of D: a Grow's second joiner, a
		// Shrink's member that gossip took for dead and that came back.
		// It then derives D', refuses the prepare, and the coordinator,
		// locked on D, waits for its ack until every rank times out (CI,
		// 2026-11-29: two ranks launched at once to grow a job). So in a
		// later epoch a member locks on a prepare of any table it proposed
		// in this epoch whose members are all in its table now: only
		// members came since. The newcomer waits for the next Grow; the
		// member back from the dead finds itself expelled (expel.go). The
		// first world keeps the strict rule (its tables are complete at
		// Size; the table prepare votes on them).
		proposed proposals // epoch > 1: the tables this node proposed in this epoch
	)
	for {
		if next := n.abandon(epoch, locked); next > epoch {
			// A member of the world this node locked on is gone, or the
			// others moved on: agree again, in a later epoch, on the same
			// old world minus the dead (see abandon). A node still forming
			// the first world has found a running job that grows (grow.go).
			if epoch == 1 {
				table = n.growTable
			}
			epoch = next
			peers, locked, miss, sent, sentAt, start, proposed = nil, nil, nil, message{}, time.Time{}, time.Now(), proposals{}
			tbl, tableSent, tableBuf, watch = nil, nil, nil, lostWatch{}
		}
		if r := n.expelledAt(epoch, locked); r > 0 {
			return World{}, n.expelledError("agree", epoch, r)
		}
		if locked == nil {
			n.mu.Lock()
			t := n.tables[epoch]
			n.mu.Unlock()
			var outNow map[string]bool
			if leftOnly {
				outNow = n.left() // Config.Running may change its answer with no event
			}
			n.viewMu.Lock()
			g := n.viewGen
			if leftOnly {
				g = n.outGen
			}
			changed := peers == nil || gen != g || t != tbl || (leftOnly && !maps.Equal(outNow, out))
			if changed && epoch == 1 && t == nil && peers != nil && len(n.peers) < n.cfg.Size {
				// The first world needs Size members: do not derive a table
				// from each of the first Size-1 joins (O(n) work each, at
				// every member). formError derives it for the report.
				changed = false
			}
			if changed {
				tbl, out = t, outNow
				gen, view = g, view[:0]
				for _, q := range n.peers {
					view = append(view, q)
				}
			}
			n.viewMu.Unlock()
			if changed {
				peers = make(map[string]peer, len(view))
				for _, q := range view {
					peers[q.name] = q
				}
				peers = n.withTable(peers, tbl)
				old := d
				p = table(peers)
				me = slices.IndexFunc(p.members, func(m Member) bool { return m.Name == n.name })
				if p.ok && me >= 0 {
					d = digestOf(n.cfg.JobID, epoch, p.members)
				}
				if !p.ok || d != old {
					settled = time.Now()
				}
			}
		}
		switch {
		case locked != nil && locked.Rank == 0:
			// Coordinator, prepared: commit once every member acked.
			miss = n.missing(n.acks, epoch, locked)
			if len(miss) == 0 {
				if beforeCommit != nil {
					beforeCommit(n, locked)
				}
				n.mu.Lock()
				n.committed[epoch] = locked.Digest
				n.mu.Unlock()
				n.sendAll(locked, msgCommit)
				return *locked, nil
			}
			if n.giveUp(epoch, locked, miss, &watch) {
				continue // abandon this epoch: it is never committed
			}
			if time.Since(sentAt) >= resend {
				n.resendTo(locked, miss, msgPrepare)
				if time.Since(preparedAt) >= tableDirectAfter {
					n.tableTo(locked, miss, tableBuf, tableSent, tableDirectBatch)
				}
				sentAt = n.sentNow(resend)
			}
		case locked != nil:
			// Member, locked: wait for the commit, or a member's
			// abandonment of the world, which proves it (abandon.go);
			// repeat the ack.
			n.mu.Lock()
			c, have := n.commits[epoch]
			pd, proven := n.proven[epoch]
			n.mu.Unlock()
			if have && c.digest == locked.Digest && c.from == locked.Members[0].Name || proven && pd == locked.Digest {
				return *locked, nil
			}
			if n.giveUp(epoch, locked, []int{0}, &watch) {
				continue // abandon this epoch, as the others will
			}
			if time.Since(sentAt) >= resend {
				n.resend(locked.Members[0].Name, locked.Members[0].Addr, sent)
				sentAt = n.sentNow(resend)
			}
		case p.ok && me == 0:
			// Coordinator: prepare once every member proposed our digest.
			// Or, forming the first world, once its complete table has
			// settled with no conflict, prepare with the table: members
			// with an incomplete view vote on it (table.go). (In a shrink
			// or grow every member knows the old world; waiting for all
			// proposals keeps a member that is leaving out. A restarted
			// rank 0 in a running job waits too: the survivors never
			// propose epoch 1; grow.go.)
			w := World{Rank: 0, Size: len(p.members), Epoch: epoch, Digest: d, Members: p.members}
			miss = n.missing(n.proposals, epoch, &w)
			// A node joining a running job (not formed) that gets
			// proposals for a world leaving their senders out has a view
			// that is behind: a restarted rank 0 that the survivors'
			// proposals reach before gossip shows it them would agree on
			// a world of itself. So would a restarted rank that a Grow's
			// coordinator names the epoch to (msgEpoch) before gossip
			// shows it the members: it coordinated a world of itself, or
			// of the restarted ranks, of that epoch, and the members'
			// next Grow, meeting it, expelled them as the side of a
			// partition that did not go on (reliability's partition
			// tests, 2|2: 4 of 150 runs on 2026-11-30). (A formed member
			// keeps the old rule: a proposer that then died is out of
			// its view and its table.) Nor does such a node agree on a
			// later epoch's world of restarted ranks alone (withMember):
			// heardOutside passes over a node gossip has dropped, and
			// right after a partition healed gossip dropped the member
			// that had just named the epoch, for a moment; the two
			// restarted ranks agreed on a world of the two of them,
			// which beat the members' at their next Grow (the same
			// tests, 2 of 197 runs after the fix above).
			behind := len(miss) == 0 && !n.isFormed() && (n.heardOutside(epoch, &w) || epoch > 1 && !withMember(n.name, p.members, peers))
			if !behind && (len(miss) == 0 || (epoch == 1 && len(p.notes) == 0 && p.unassigned == 0 && time.Since(settled) >= n.settle() && !n.jobRunning())) {
				locked = &w
				tableSent = make(map[string]bool)
				if len(miss) > 0 {
					tableBuf = encodeTable(n.name, locked, peers)
				}
				if beforePrepare != nil {
					beforePrepare(n, locked)
				}
				n.sendAll(locked, msgPrepare)
				lo, hi := treeChildren(0, len(p.members))
				n.tableTo(locked, miss[:countBelow(miss, hi)], tableBuf, tableSent, hi-lo)
				sentAt, preparedAt = n.sentNow(resend), time.Now()
				continue
			}
			if epoch > 1 && time.Since(sentAt) >= resend {
				// A member may be a rank that joins a running job: tell it
				// the epoch (it is still forming the first world).
				n.resendTo(&w, miss, msgEpoch)
				n.relayLeaving(&w, miss)
				sentAt = n.sentNow(resend)
			}
		case p.ok && me > 0:
			// Member: lock on a prepare of our digest, else propose it.
			w := World{Rank: me, Size: len(p.members), Epoch: epoch, Digest: d, Members: p.members}
			if epoch > 1 && !n.isFormed() && (n.heardOutside(epoch, &w) || !withMember(n.name, p.members, peers)) {
				break // behind, as a coordinator can be (above): neither propose nor lock
			}
			n.mu.Lock()
			pr, have := n.prepares[epoch]
			n.mu.Unlock()
			prepared := have && pr.digest == d && pr.from == w.Members[0].Name
			if have && !prepared && epoch > 1 {
				if old, ok := proposed.find(n.cfg.JobID, n.name, pr, p.members); ok {
					w, prepared = old, true // a table this node proposed before members came
				}
			}
			kind := byte(msgPropose)
			if prepared {
				n.mu.Lock()
				n.locked[epoch] = w.Digest
				n.mu.Unlock()
				locked, kind = &w, msgAck
			} else if epoch > 1 {
				proposed.add(d, p.members)
			}
			coord := w.Members[0]
			if m := (message{kind: kind, epoch: epoch, digest: w.Digest, from: n.name}); m != sent {
				n.send(coord.Name, coord.Addr, m)
				sent, sentAt = m, n.sentNow(resend)
			} else if time.Since(sentAt) >= resend {
				n.resend(coord.Name, coord.Addr, m)
				sent, sentAt = m, n.sentNow(resend)
			}
			if prepared {
				// Pass the table on down the tree (table.go).
				lo, hi := treeChildren(w.Rank, w.Size)
				if lo < hi {
					n.sendTables(w.Members[lo:hi], encodeTable(coord.Name, locked, peers))
				}
			}
		}
		var members []Member // and the ranks of them this node waits for
		var waiting []int
		switch {
		case locked != nil && locked.Rank == 0:
			members, waiting = locked.Members, miss
		case locked != nil:
			members, waiting = locked.Members, []int{0}
		case p.ok && me == 0:
			members, waiting = p.members, miss
		case p.ok && me > 0:
			members, waiting = p.members, []int{0}
		}
		if time.Since(start) >= evidenceProbeEvery {
			// Check that the members this node waits for are not gone.
			n.probeWaitingFor(epoch, members, waiting)
		}
		if epoch > 1 && locked == nil && p.ok && time.Since(start) >= unseenAfter && time.Since(unseenAt) >= unseenAfter {
			// Stalled: members this table keeps may have died unseen.
			n.probeUnseen(p.members, unseenRound)
			unseenAt, unseenRound = time.Now(), unseenRound+1
		}
		if epoch > 1 && time.Since(start) >= askAfter && time.Since(asked) >= askEvery && n.isFormed() {
			// Ask them whether the job went on without this node (expel.go).
			n.ask(epoch, members, waiting, askRound)
			asked, askRound = time.Now(), askRound+1
		}
		if epoch == 1 {
			if err := n.formLost(locked, miss); err != nil {
				// A rank died or left before the first world formed (formloss.go).
				return World{}, n.formError(epoch, p, miss, locked, err)
			}
		}
		if n.jobGone() {
			// A restarted rank whose job's other ranks have all left or
			// died (they finished before it was seen): nobody can admit
			// it. Said once it holds for aloneFor, not at ctx's end
			// (gorun's timeout, a minute).
			if aloneSince.IsZero() {
				aloneSince = time.Now()
			} else if time.Since(aloneSince) >= aloneFor {
				return World{}, n.formError(epoch, p, miss, locked, ErrJobGone)
			}
		} else {
			aloneSince = time.Time{}
		}
		select {
		case <-ctx.Done():
			return World{}, n.formError(epoch, p, miss, locked, ctx.Err())
		case <-n.done:
			return World{}, n.formError(epoch, p, miss, locked, ErrClosed)
		case <-n.changed:
		case <-tick.C:
		}
	}
}

// proposals are the last tables a member proposed in an epoch, as the
// names of their members by rank: the members' records are taken from
// the table it holds now, which must hold them all, and the digest
// checks that they did not change. At most keepProposals: a Grow at
// thousands of members sees its table change with each join.
type proposals struct {
	digests [][digestLen]byte
	names   [][]string
}

const keepProposals = 16

func (ps *proposals) add(d [digestLen]byte, members []Member) {
	if slices.Contains(ps.digests, d) {
		return
	}
	names := make([]string, len(members))
	for i, m := range members {
		names[i] = m.Name
	}
	if len(ps.digests) == keepProposals {
		ps.digests, ps.names = ps.digests[1:], ps.names[1:]
	}
	ps.digests, ps.names = append(ps.digests, d), append(ps.names, names)
}

// find returns node me's world of a proposed table that pr prepares, from
// its coordinator, built from the records of now (the table me holds
// now); ok is false if none was proposed or now lacks one of its members.
func (ps *proposals) find(job, me string, pr message, now []Member) (World, bool) {
	i := slices.Index(ps.digests, pr.digest)
	if i < 0 || ps.names[i][0] != pr.from {
		return World{}, false
	}
	byName := make(map[string]Member, len(now))
	for _, m := range now {
		byName[m.Name] = m
	}
	w := World{Size: len(ps.names[i]), Epoch: pr.epoch, Digest: pr.digest, Members: make([]Member, len(ps.names[i]))}
	for r, name := range ps.names[i] {
		m, ok := byName[name]
		if !ok {
			return World{}, false
		}
		m.Rank = r
		w.Members[r] = m
		if name == me {
			w.Rank = r
		}
	}
	if digestOf(job, pr.epoch, w.Members) != pr.digest {
		return World{}, false
	}
	return w, true
}

// abandon says whether the agreement for epoch must move to epoch+1: this
// node locked on a world with a member found gone (its coordinator can
// never commit it, or committed it and its members will fail to connect
// to the dead one and shrink again), or, not locked, it received
// agreement messages of a later epoch (others abandoned). A 2PC lock holds
// for its epoch only, so a node may then agree on a new table in the next.
// Those that did get the commit and shrink again from it compute the same
// table for epoch+1 as those that abandoned: shrinkTable keeps the old
// order and renumbers, and the committed world is the old one minus the
// dead.
func (n *Node) abandon(epoch uint32, locked *World) uint32 {
	if locked != nil {
		if epoch == 1 {
			// Locked on the first world but not formed, while others
			// agree on a later epoch: the job is running. A restarted
			// rank 0 that saw every rank before any formed member's
			// state reached it prepares the first world, which nobody
			// acks; it joins the survivors' Grow instead (grow.go).
			n.mu.Lock()
			defer n.mu.Unlock()
			if next := n.laterEpochLocked(epoch); !n.formed && next > epoch {
				return next
			}
			return 0
		}
		n.viewMu.Lock()
		defer n.viewMu.Unlock()
		for _, m := range locked.Members {
			if n.gone[m.Name] {
				return epoch + 1
			}
		}
		return 0
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.formed && epoch == 1 {
		return 0
	}
	if next := n.laterEpochLocked(epoch); next > epoch {
		return next
	}
	return 0
}

// laterEpochLocked is the latest epoch any message names, if later than
// epoch (else 0); n.mu is held.
func (n *Node) laterEpochLocked(epoch uint32) uint32 {
	next := uint32(0)
	for e := range n.prepares {
		next = max(next, e)
	}
	for e := range n.commits {
		next = max(next, e)
	}
	for e := range n.hints {
		next = max(next, e)
	}
	for _, book := range []map[uint32]map[string][digestLen]byte{n.proposals, n.acks} {
		for e := range book {
			next = max(next, e)
		}
	}
	if next > epoch {
		return next
	}
	return 0
}

// beforePrepare, if set, runs in a coordinator that has locked on w just
// before it sends the prepare (a hook for tests: TestGrowJoinerDuringPrepare).
var beforePrepare func(n *Node, w *World)

// beforeCommit, if set, runs in a coordinator that has every ack of w just
// before it commits w (a hook for tests: TestShrinkCoordinatorCutBeforeCommit).
var beforeCommit func(n *Node, w *World)

// aloneFor is how long a restarted node must find no other live rank of
// its job before it gives up (jobGone). Its view fills within a gossip
// round of reaching a live seed (milliseconds). A restarted seed rank
// reaches nobody: it waits for the members to join it, which they do
// once gossip has declared its old incarnation dead (up to 3.4 s) and
// their next seed check (rejoinEvery) comes; the rest is margin for a
// loaded host.
var aloneFor = 10 * time.Second // a variable for tests

// jobGone says whether this node restarts a rank (Config.Restarted), is
// not yet admitted, and its view holds no other live rank of the job that
// could admit it: the others left (Leaving, or gone from the view) or
// died, or were gone before it reached them. A node claiming this node's
// rank does not count: it is the incarnation this one restarts, dead,
// which gossip clears only after its suspicion timeout (3.4 s in
// TestJoinerOfEndedJobFails), as growTable takes it. Nor does another
// restarted rank not yet admitted (meta.Joining): two restarted after the
// job's last ranks finished saw each other and waited for the timeout
// (the reviewer's initkill with --max-restarts 1), unless they are
// enough, Size ranks below Size, to form a first world of their own
// (every rank restarted after a failed Init: formloss.go). Ranks added to
// grow the job (Size ≤ rank < MaxSize) never are: two added to a job of
// two after it finished counted as its two ranks.
func (n *Node) jobGone() bool {
	if !n.cfg.Restarted || n.isFormed() {
		return false
	}
	n.viewMu.Lock()
	defer n.viewMu.Unlock()
	joining := map[int]bool{} // the ranks below Size restarted
	if n.cfg.Rank < n.cfg.Size {
		joining[n.cfg.Rank] = true
	}
	for name, q := range n.peers {
		if name == n.name || !n.ofJob(q) || (n.cfg.Rank >= 0 && q.meta.Rank == n.cfg.Rank) {
			continue
		}
		if !q.meta.Joining || q.meta.Rank < 0 {
			return false
		}
		if q.meta.Rank < n.cfg.Size {
			joining[q.meta.Rank] = true
		}
	}
	return n.cfg.Rank < 0 || len(joining) < n.cfg.Size
}

// ofJob says whether q is a live member of this node's job, not leaving:
// one of the same world size (a node of another job is refused before).
func (n *Node) ofJob(q peer) bool { return q.meta.Size == n.cfg.Size && !q.meta.Leaving }

func (n *Node) isFormed() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.formed
}

// withMember says whether members holds a node other than self that peers
// shows admitted to a world: not a restarted rank still joining
// (meta.Joining). A world after the first needs one: only a member knows
// the world it grows from, and ranks restarted into a running job join
// the members' Grow, never a world of their own; if every member is gone,
// nobody admits them (jobGone).
func withMember(self string, members []Member, peers map[string]peer) bool {
	return slices.ContainsFunc(members, func(m Member) bool {
		q, ok := peers[m.Name]
		return ok && m.Name != self && !q.meta.Joining
	})
}

// heardOutside says whether a node that told this one of an agreement for
// epoch, and is neither gone nor leaving, is not a member of w: it
// proposed to this node or, after the first epoch, acked, prepared,
// committed or named the epoch (msgEpoch). A node joining a running job
// (not formed) that has heard so has a view that is behind the job's.
func (n *Node) heardOutside(epoch uint32, w *World) bool {
	n.mu.Lock()
	var names []string
	for name := range n.proposals[epoch] {
		names = append(names, name)
	}
	if epoch > 1 {
		for name := range n.acks[epoch] {
			names = append(names, name)
		}
		for name := range n.hints[epoch] {
			names = append(names, name)
		}
		for _, book := range []map[uint32]message{n.prepares, n.commits} {
			if m, ok := book[epoch]; ok {
				names = append(names, m.from)
			}
		}
	}
	names = slices.DeleteFunc(names, func(name string) bool { return name == n.name || n.leaving[name] })
	n.mu.Unlock()
	n.viewMu.Lock()
	defer n.viewMu.Unlock()
	for _, name := range names {
		if !n.gone[name] && !n.departed[name] && !slices.ContainsFunc(w.Members, func(m Member) bool { return m.Name == name }) {
			return true
		}
	}
	return false
}

// missing lists the ranks of w (but 0) whose entry in book (proposals or
// acks) for epoch is not w's digest.
func (n *Node) missing(book map[uint32]map[string][digestLen]byte, epoch uint32, w *World) []int {
	var miss []int
	n.mu.Lock()
	got := book[epoch]
	for _, m := range w.Members[1:] {
		if d, ok := got[m.Name]; !ok || d != w.Digest {
			miss = append(miss, m.Rank)
		}
	}
	n.mu.Unlock()
	return miss
}

func (n *Node) sendAll(w *World, kind byte) {
	m := message{kind: kind, epoch: w.Epoch, digest: w.Digest, from: n.name}
	for _, q := range w.Members[1:] {
		n.send(q.Name, q.Addr, m)
	}
}

// tableTo sends the table buf to the ranks of w in ranks not yet sent it,
// at most limit of them.
func (n *Node) tableTo(w *World, ranks []int, buf []byte, sent map[string]bool, limit int) {
	if buf == nil {
		return
	}
	var to []Member
	for _, r := range ranks {
		if len(to) == limit {
			break
		}
		if m := w.Members[r]; !sent[m.Name] {
			sent[m.Name] = true
			to = append(to, m)
		}
	}
	n.sendTables(to, buf)
}

// countBelow is the number of ranks (ascending) below hi.
func countBelow(ranks []int, hi int) int {
	k, _ := slices.BinarySearch(ranks, hi)
	return k
}

// sentNow is the time to record as a message's send, now, for its resend
// after period: beyond scaleAbove members shifted by up to a quarter of
// the period either way. Hundreds of members lock within one tree level's
// delivery and ack at once; a coordinator's receive queue drops what it
// cannot hold, and unjittered resends came back as the same burst.
func (n *Node) sentNow(period time.Duration) time.Time {
	now := time.Now()
	if max(n.cfg.Size, n.cfg.MaxSize) <= scaleAbove {
		return now
	}
	return now.Add(mrand.N(period/2) - period/4)
}

// unseenAfter is how long a later epoch's agreement waits before it
// probes the members of its table that its view does not hold, and the
// period of those probes.
const (
	unseenAfter = 2 * time.Second
	unseenBatch = 16
)

// settle is how long a coordinator's complete table must stay unchanged
// before it prepares without every member's proposal: a few gossip rounds,
// for a conflict another member knows of (two claims of a rank) to reach it.
func (n *Node) settle() time.Duration { return max(2*n.cfg.GossipInterval, 50*time.Millisecond) }

// resendTo repeats a message of kind to the ranks of w in ranks: to the
// first resendBatch by resend (a stream beyond helloAbove members), to
// the rest by UDP, so that a coordinator still missing most members'
// answers does not open a stream to each of them every period.
func (n *Node) resendTo(w *World, ranks []int, kind byte) {
	m := message{kind: kind, epoch: w.Epoch, digest: w.Digest, from: n.name}
	for i, r := range ranks {
		if i < resendBatch {
			n.resend(w.Members[r].Name, w.Members[r].Addr, m)
		} else {
			n.send(w.Members[r].Name, w.Members[r].Addr, m)
		}
	}
}

// resendBatch is how many members a coordinator's repeat reaches by
// stream per period (resendTo).
const resendBatch = 64

func (n *Node) formError(epoch uint32, p proposal, miss []int, locked *World, cause error) error {
	if epoch == 1 && locked == nil {
		n.viewMu.Lock()
		peers := make(map[string]peer, len(n.peers))
		for k, v := range n.peers {
			peers[k] = v
		}
		n.viewMu.Unlock()
		n.mu.Lock()
		t := n.tables[epoch]
		n.mu.Unlock()
		p = formTable(n.withTable(peers, t), n.cfg.Size)
	}
	n.mu.Lock()
	joinErr := n.joinErr
	n.mu.Unlock()
	size := n.cfg.Size
	if epoch > 1 {
		size = len(p.members)
	}
	e := &FormError{JobID: n.cfg.JobID, Size: size, Epoch: epoch, Seen: p.seen, Missing: p.missing,
		Unassigned: p.unassigned, Notes: p.notes, Cause: cause}
	switch {
	case locked != nil && locked.Rank == 0:
		e.Disagree = miss
		e.Notes = append(e.Notes, "prepared; waiting for acks")
	case locked != nil:
		e.Notes = append(e.Notes, "locked on a view; no commit from the coordinator, rank 0 ("+locked.Members[0].Name+")")
	case p.ok && len(p.members) > 0 && p.members[0].Name == n.name:
		e.Disagree = miss
	case p.ok && len(p.members) > 0:
		e.Notes = append(e.Notes, "no prepare from the coordinator, rank 0 ("+p.members[0].Name+")")
	}
	if joinErr != nil {
		e.Notes = append(e.Notes, "joining the seeds failed: "+joinErr.Error())
	}
	if oe, ok := cause.(*OpError); ok && oe.Peer >= 0 {
		e.Notes = append(e.Notes, formLossNote(oe))
	}
	return e
}

// Shrink forms the next world from the members of the current one that
// are still alive: all survivors must call it; they agree on a new epoch
// and are renumbered 0..n-1 in the order of their old ranks. It returns a
// *FormError if the survivors do not agree before ctx is done.
func (n *Node) Shrink(ctx context.Context) (World, error) {
	n.mu.Lock()
	old, closed := n.world, n.closed
	n.mu.Unlock()
	if closed {
		return World{}, &OpError{Op: "shrink", Rank: old.Rank, Peer: -1, Err: ErrClosed}
	}
	w, err := n.agree(ctx, old.Epoch+1, func(ps map[string]peer) proposal { return shrinkTable(ps, old, n.left()) }, true)
	if err != nil {
		return World{}, err
	}
	n.install(w)
	return w, nil
}
