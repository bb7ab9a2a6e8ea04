package bootstrap

// Evidence of death: a fast path beside memberlist's failure detector.
//
// memberlist declares a member dead only after its suspicion timeout
// (about 1.5 s and more), because a missed probe may be a slow host. A
// process that is gone leaves better evidence: the kernel refuses a
// connection to its gossip port at once (a frozen or merely slow process
// still accepts, into the listen backlog; an unreachable host times out,
// and only "refused" counts). When the comm layer sees a peer's
// connection break, or the agreement waits for a member, the node probes
// that member's port; a refusal removes the member from the view at once,
// is reported on Failures like a gossip death, and is passed to the other
// members of the world (msgDead), each of which probes for itself before
// it believes it. Agreement (agree.go) then proceeds on the smaller view
// without waiting for memberlist.

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"syscall"
	"time"
)

const (
	// evidenceProbeTimeout bounds one probe's connect; a refusal comes
	// back in one round trip, so anything slower is "alive or unknown".
	evidenceProbeTimeout = 250 * time.Millisecond
	// evidenceProbeEvery is the least time between two probes of a member.
	evidenceProbeEvery = 50 * time.Millisecond
	// formProbeMax is the most members the first world's agreement waits
	// for that it probes (probeWaitingFor).
	formProbeMax = 16
)

// errRefused is the error of a member whose gossip port refused a
// connection: its process is gone.
var errRefused = fmt.Errorf("%w: its gossip port refused a connection", ErrPeerDead)

// errTaken is the error of a member whose gossip address another node of
// the job took: its process ended, and its rank was restarted.
var errTaken = fmt.Errorf("%w: its gossip address is a new process's (restarted)", ErrPeerDead)

// suspectTries is how many times Suspect probes a member that still
// accepts: a process being killed closes its sockets only once the kernel
// has torn down its memory, which takes a while for a large one.
const suspectTries = 6

type probeState struct {
	busy  bool      // a prober goroutine runs for this member
	tries int       // probes it still owes
	last  time.Time // when the last probe ended
}

// Suspect asks the node to check now whether the member of the current
// world with rank r is gone: call it when r's connection broke. A member
// found gone leaves the view at once and is reported on Failures; the
// other members are told to check too. Suspect does not block.
func (n *Node) Suspect(r int) {
	n.mu.Lock()
	w := n.world
	n.mu.Unlock()
	if r < 0 || r >= len(w.Members) || w.Members[r].Name == n.name {
		return
	}
	n.probe(w.Members[r].Name, w.Members[r].Addr, suspectTries)
}

// Expel marks the member of the current world with rank r gone though it
// lives: the caller found that the job went on without it (comm's
// membership check: it came back from a world the others had left it
// out of, or from the smaller side of a partition). It leaves the view
// and is reported on Failures at once, no longer counts as a joiner, and
// the next Shrink leaves it out even if it takes part: it finds itself
// expelled there (expel.go). The other members are told to check it,
// which they find alive; each expels it by its own check.
func (n *Node) Expel(r int) {
	n.mu.Lock()
	w := n.world
	n.mu.Unlock()
	if r < 0 || r >= len(w.Members) || w.Members[r].Name == n.name {
		return
	}
	n.markGone(w.Members[r].Name)
}

// Check probes the member of the current world with rank r once, as
// Suspect does: for a caller that waits on r and checks again and again.
func (n *Node) Check(r int) {
	n.mu.Lock()
	w := n.world
	n.mu.Unlock()
	if r < 0 || r >= len(w.Members) || w.Members[r].Name == n.name {
		return
	}
	n.probe(w.Members[r].Name, w.Members[r].Addr, 1)
}

// heardDead handles another member's msgDead about name: check it.
func (n *Node) heardDead(name string) {
	if name == n.name {
		return // we are not gone; the sender will find that out
	}
	n.viewMu.Lock()
	p, ok := n.peers[name]
	addr := p.addr
	n.viewMu.Unlock()
	if !ok {
		// Out of the view but not reported: gossip declared it dead
		// while its process ran here (Config.Running). Its world entry
		// has the address.
		n.mu.Lock()
		if r, in := n.inWorld[name]; in && r < len(n.world.Members) && !n.reported[name] {
			addr, ok = n.world.Members[r].Addr, true
		}
		n.mu.Unlock()
	}
	if ok {
		n.probe(name, addr, suspectTries)
	}
}

// probeWaitingFor probes the members (by rank in the table) whose
// messages the agreement waits for. While the first world forms, only a
// few (formProbeMax): every member in the table was seen alive, so its
// port was open, but a coordinator of thousands waits for many answers
// that are merely late.
func (n *Node) probeWaitingFor(epoch uint32, members []Member, ranks []int) {
	if epoch <= 1 && len(ranks) > formProbeMax {
		return
	}
	for _, r := range ranks {
		if r >= 0 && r < len(members) && members[r].Name != n.name {
			n.probe(members[r].Name, members[r].Addr, 1)
		}
	}
}

// probe dials name's gossip port, in the background, tries times at least
// evidenceProbeEvery apart (fewer once it is found gone), and marks it gone
// if a connection is refused. A probe asked for while one runs adds to its
// tries.
func (n *Node) probe(name, addr string, tries int) {
	n.mu.Lock()
	st := n.probes[name]
	if st == nil {
		st = &probeState{}
		n.probes[name] = st
	}
	st.tries = max(st.tries, tries)
	if n.closed || st.busy {
		n.mu.Unlock()
		return
	}
	st.busy = true
	n.wg.Add(1) // shutdown sets closed under mu before it waits
	n.mu.Unlock()
	go func() {
		defer n.wg.Done()
		for {
			n.mu.Lock()
			wait := evidenceProbeEvery - time.Since(st.last)
			if st.tries == 0 || n.closed {
				st.busy = false
				n.mu.Unlock()
				return
			}
			st.tries--
			n.mu.Unlock()
			if wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-t.C:
				case <-n.done:
					t.Stop()
				}
			}
			gone := n.probeRefused(addr)
			ended := !gone && n.endedHere(name)
			taken := !gone && !ended && n.addrTaken(name, addr)
			n.mu.Lock()
			st.last = time.Now()
			if gone || ended || taken {
				st.tries = 0
			}
			if gone {
				n.refused[name] = true
			}
			if taken {
				n.taken[name] = true
			}
			n.mu.Unlock()
			switch {
			case gone || taken:
				n.markGone(name)
			case ended:
				n.witnessed(name)
			}
		}
	}()
}

// endedHere reports whether name, a member of the current world, is known
// to have ended on this host (Config.Ended): its gossip port, open to a
// probe, may be a new process's. The restarted seed rank takes the seed
// address at once; a member that probed it after that found it open and
// waited for memberlist's verdict (about 1 s more) in a recovery whose
// other members had found it gone.
func (n *Node) endedHere(name string) bool {
	if n.cfg.Ended == nil {
		return false
	}
	n.mu.Lock()
	r, in := n.inWorld[name]
	var m Member
	if in && r < len(n.world.Members) {
		m = n.world.Members[r]
	}
	n.mu.Unlock()
	return m.Name == name && n.cfg.Ended(m)
}

// addrTaken reports whether the gossip address addr of name, a member of
// the current world, is another node's of this job now: a restarted rank
// (meta.Joining) that bound it and is not a member of the world. Two
// processes cannot bind one port, so name's process has ended, on any
// host. The restarted seed rank binds the job's seed address at once; a
// member on another host than the seed's, with no process table to read
// (endedHere), found the port open and waited for memberlist's verdict.
//
// Only a restart counts. A node that gossip brought back from the past
// is in the view too: a process cut off from the job returns with its
// old view, and its push/pull hands out as alive the nodes that left
// while it was away, among them the seed rank's first process, at the
// address its restart took. A member that never saw that one leave took
// it in, and counted the restart, alive at its address, as ended (a
// healed partition in a bootstrap test: the Grow waited out its context
// with the restart's rank missing from one member's table). Such a
// stale entry is a member of an old world, not Joining, and memberlist
// drops it once it does not answer its pings.
func (n *Node) addrTaken(name, addr string) bool {
	var others []string // the view's restarts at addr
	n.viewMu.Lock()
	for _, q := range n.peers {
		if q.name != name && q.addr == addr && q.meta.Joining {
			others = append(others, q.name)
		}
	}
	n.viewMu.Unlock()
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, member := n.inWorld[name]; !member {
		return false // a joiner: a node at its address may be a stale entry
	}
	return slices.ContainsFunc(others, func(o string) bool {
		_, in := n.inWorld[o]
		return !in
	})
}

// checkTakenAddr probes the member of the current world whose gossip
// address q, a node new to the view, has: q may be its restarted process
// (addrTaken). Called from the delegate, with no lock held.
func (n *Node) checkTakenAddr(q peer) {
	n.mu.Lock()
	var m Member
	if _, in := n.inWorld[q.name]; !in {
		for _, wm := range n.world.Members {
			if wm.Addr == q.addr && wm.Name != q.name && wm.Name != n.name {
				m = wm
				break
			}
		}
	}
	n.mu.Unlock()
	if m.Name != "" {
		n.probe(m.Name, m.Addr, 1)
	}
}

// refused reports whether a TCP connection to addr is refused.
func refused(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, evidenceProbeTimeout)
	if err == nil {
		c.Close()
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// markGone removes name from the view for good, reports it if it belongs to
// the world, and tells the world's other members.
func (n *Node) markGone(name string) { n.markGoneAs(name, msgDead) }

// markGoneAs is markGone telling the others with a message of kind (msgDead:
// check it yourself; msgStopped: believe it).
func (n *Node) markGoneAs(name string, kind byte) {
	n.viewMu.Lock()
	if n.gone[name] {
		n.viewMu.Unlock()
		return
	}
	n.gone[name] = true
	n.goneSeq++
	n.goneAt[name] = n.goneSeq
	q, seen := n.peers[name]
	if seen {
		n.goneAddr[name] = q.addr
	}
	delete(n.peers, name)
	n.viewGen++
	n.outGen++
	var tell []peer // forming: the view, for want of a world
	n.viewMu.Unlock()
	n.mu.Lock()
	if seen && q.meta.Leaving && q.meta.Abandoned {
		// Its meta update came, its msgAbandon and its leave not yet: the
		// reason is in the view, not in a refused port (abandon.go).
		n.heardAbandonFlagLocked(name, q.meta.Blob)
	}
	formed := n.formed
	if formed {
		n.reportLocked(name, n.leaving[name])
	} else if !seen || !q.meta.Leaving || q.meta.Forming { // a formed node that closes is another world's
		rank := -1
		if seen {
			rank = q.meta.Rank
		}
		n.noteFormLossLocked(name, rank, n.deathCauseLocked(name))
	}
	w := n.world
	n.mu.Unlock()
	if !formed {
		n.viewMu.Lock()
		for _, p := range n.peers {
			if p.name != n.name {
				tell = append(tell, p)
			}
		}
		n.viewMu.Unlock()
	}
	if i := slices.IndexFunc(w.Members, func(m Member) bool { return m.Name == name }); i >= 0 {
		n.viewMu.Lock()
		if _, ok := n.goneAddr[name]; !ok {
			n.goneAddr[name] = w.Members[i].Addr // gossip had dropped it already
		}
		n.viewMu.Unlock()
	}
	m := message{kind: kind, epoch: w.Epoch, from: n.name, about: name}
	for _, q := range w.Members {
		if q.Name != n.name && q.Name != name {
			n.send(q.Name, q.Addr, m)
		}
	}
	for _, p := range tell {
		n.send(p.name, p.addr, m)
	}
	n.signal()
}
