package bootstrap

// Witnessed deaths: a frozen process, seen by a member on its host.
//
// A stopped process (SIGSTOP, a debugger) keeps its sockets open: its
// gossip port still accepts connections (evidence.go finds nothing) and
// only memberlist's suspicion timeout, which must stay long enough for a
// process starved of CPU on a loaded host, declares it dead (1.2-1.8 s).
// The kernel knows better: a member on the same host reads the process's
// state (comm's witness reads /proc/PID/stat) and tells the node, which
// removes the member at once and passes the word on (msgStopped). The
// others believe it without a probe of their own, since they have none
// that could confirm it; a starved process is never in the stopped state,
// so this does not add false deaths.

import "fmt"

// errStopped is the error of a member a witness saw frozen or gone.
var errStopped = fmt.Errorf("%w: its process is stopped or gone (seen on its host)", ErrPeerDead)

// Witnessed tells the node that the member with rank r of world epoch is
// gone or frozen (its process is stopped or a zombie), as seen from its
// host. The member leaves the view at once and is reported on Failures;
// the other members are told. A call for another epoch, for this node, or
// for a member already gone does nothing.
func (n *Node) Witnessed(epoch uint32, r int) {
	n.mu.Lock()
	w := n.world
	n.mu.Unlock()
	if w.Epoch != epoch || r < 0 || r >= len(w.Members) || w.Members[r].Name == n.name {
		return
	}
	n.witnessed(w.Members[r].Name)
}

// witnessed marks name gone on a witness's word (its own or another
// member's msgStopped) and tells the others.
func (n *Node) witnessed(name string) {
	if name == n.name {
		return // we run; the sender's view is stale
	}
	n.mu.Lock()
	n.stopped[name] = true
	n.mu.Unlock()
	n.markGoneAs(name, msgStopped)
}
