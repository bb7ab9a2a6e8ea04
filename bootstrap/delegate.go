package bootstrap

import (
	"fmt"

	"github.com/hashicorp/memberlist"
)

// delegate implements memberlist's hooks for a Node. memberlist calls the
// event, alive and merge hooks with its node lock held, so they only copy
// what they need under n.mu and never call back into memberlist.
type delegate struct{ n *Node }

var (
	_ memberlist.Delegate         = (*delegate)(nil)
	_ memberlist.EventDelegate    = (*delegate)(nil)
	_ memberlist.MergeDelegate    = (*delegate)(nil)
	_ memberlist.AliveDelegate    = (*delegate)(nil)
	_ memberlist.ConflictDelegate = (*delegate)(nil)
)

// NodeMeta returns the encoded meta; it always fits in limit (see meta.go).
func (d *delegate) NodeMeta(limit int) []byte {
	d.n.metaMu.Lock()
	defer d.n.metaMu.Unlock()
	if len(d.n.metaBuf) > limit {
		return nil
	}
	return d.n.metaBuf
}

func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *delegate) LocalState(join bool) []byte                { return d.n.localState() }
func (d *delegate) MergeRemoteState(buf []byte, join bool)     { d.n.mergeState(buf) }

// check accepts a node only if its meta names our job. It does not
// allocate: memberlist calls it for every alive message under its lock.
// The full decode happens in update, on actual changes.
func (d *delegate) check(node *memberlist.Node) error {
	job, ok := metaJob(node.Meta)
	if !ok {
		return fmt.Errorf("node %s: %w", node.Name, ErrBadMeta)
	}
	if string(job) != d.n.cfg.JobID {
		return fmt.Errorf("node %s: %w: %q", node.Name, ErrWrongJob, job)
	}
	return nil
}

// NotifyAlive refuses alive messages of other jobs' nodes.
func (d *delegate) NotifyAlive(node *memberlist.Node) error { return d.check(node) }

// NotifyMerge refuses a push/pull join with a cluster that holds any node
// of another job.
func (d *delegate) NotifyMerge(peers []*memberlist.Node) error {
	for _, p := range peers {
		if err := d.check(p); err != nil {
			return err
		}
	}
	return nil
}

func (d *delegate) NotifyConflict(existing, other *memberlist.Node) {}

func (d *delegate) NotifyJoin(node *memberlist.Node)   { d.update(node) }
func (d *delegate) NotifyUpdate(node *memberlist.Node) { d.update(node) }

func (d *delegate) update(node *memberlist.Node) {
	m, err := decodeMeta(node.Meta)
	if err != nil || m.JobID != d.n.cfg.JobID {
		return // NotifyAlive let it through only if valid; be safe anyway
	}
	n := d.n
	p := peer{name: node.Name, addr: node.Address(), meta: m}
	n.viewMu.Lock()
	if n.gone[node.Name] {
		n.viewMu.Unlock()
		if m.Leaving && m.Abandoned { // its reason, after a refused port (abandon.go)
			n.goneAbandonFlag(node.Name, m.Blob)
		}
		return // found dead (evidence.go); gossip has not caught up
	}
	if old, had := n.peers[node.Name]; n.departed[node.Name] || old.meta.Leaving != m.Leaving || (!had && m.Leaving) {
		n.outGen++ // back in the view, or its Leaving flag changed: a shrink's table changes
	}
	_, had := n.peers[node.Name]
	n.peers[node.Name] = p
	delete(n.departed, node.Name)
	n.viewGen++
	n.viewMu.Unlock()
	if !had {
		n.checkTakenAddr(p)
		n.backInView(p)
	}
	n.signal()
}

func (d *delegate) NotifyLeave(node *memberlist.Node) {
	n := d.n
	n.viewMu.Lock()
	p, ok := n.peers[node.Name]
	delete(n.peers, node.Name)
	if ok {
		n.departed[node.Name] = true
	}
	n.viewGen++
	n.outGen++
	n.viewMu.Unlock()
	if ok {
		n.mu.Lock()
		if p.meta.Leaving && p.meta.Abandoned { // its msgAbandon is late or lost (abandon.go)
			n.heardAbandonFlagLocked(node.Name, p.meta.Blob)
		}
		switch left := p.meta.Leaving || n.leaving[node.Name]; {
		case !n.formed && (left || node.State == memberlist.StateLeft):
			if p.meta.Forming { // it gave up forming; a formed node that closes is another world's
				n.noteFormLossLocked(node.Name, p.meta.Rank, ErrPeerLeft)
			}
		case !n.formed:
			// Forming: a death counts as once formed (formloss.go).
			if !n.runsHereForming(p) {
				n.noteFormLossLocked(node.Name, p.meta.Rank, nil)
				n.lastCallLocked(node.Name, p.addr)
			}
		case left:
			n.reportLocked(node.Name, left)
		case !n.runsHere(node.Name):
			n.lastCallLocked(node.Name, p.addr) // reports it unless it answers (lastcall.go)
		}
		n.mu.Unlock()
	}
	n.signal()
}

// runsHere says whether the world member name is a process that the kernel
// shows running on this host (Config.Running): a gossip death of it is
// false, a starved process that missed its probes. n.mu is held.
func (n *Node) runsHere(name string) bool {
	if !n.runningLocked(name) {
		return false
	}
	if n.cfg.Logger != nil {
		n.cfg.Logger.Printf("[WARN] bootstrap: gossip declared rank %d dead, but its process runs on this host: not reported", n.inWorld[name])
	}
	return true
}

// runningLocked says, as runsHere, whether the world member name runs on
// this host, without the warning. n.mu is held.
func (n *Node) runningLocked(name string) bool {
	r, ok := n.inWorld[name]
	if !ok || n.cfg.Running == nil || r >= len(n.world.Members) || n.reported[name] {
		return false
	}
	return n.cfg.Running(n.world.Members[r])
}
