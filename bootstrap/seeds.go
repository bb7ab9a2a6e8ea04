package bootstrap

// Keeping the seeds in the group.
//
// A node joins the seeds once (joinOnce). A seed rank that dies and is
// restarted (gorun --max-restarts) comes back at the same address and,
// being its own seed, joins nobody: it knows no one but itself until a
// member joins it. So a node checks every rejoinEvery whether some
// live member listens at a seed address, and if none does, joins the seeds
// again: a refused connection while the seed is gone, a push/pull (the
// restarted seed learns the group) once it is back. One such join is
// enough, and at a thousand members all of them joining at once would
// queue a thousand O(n)-byte push/pulls at the restarted seed (memberlist
// refuses beyond 128 pending), so each period only rejoiners of the live
// members, expected, try: each with probability rejoiners/members.

import (
	mrand "math/rand/v2"
	"net"
	"time"
)

const (
	// rejoinEvery is how often a formed node checks that a seed is in the
	// group (jittered by ±25%). A restarted seed rank waits about this long
	// to be found.
	rejoinEvery = time.Second
	// rejoiners is how many members, expected, join a missing seed per
	// period.
	rejoiners = 4
)

// keepSeeds runs, once the node joined, until it closes: it joins the
// seeds again whenever no live member is at a seed address. Before
// formation too: a seed that gossip declared dead under load (a false
// death) is otherwise never seen again by the members that dropped it,
// and the first world waits for it until the timeout (a 3-rank capi job
// in CI: "saw ranks [1-2], missing ranks [0]").
func (n *Node) keepSeeds(seeds []string) {
	want := seedAddrs(seeds)
	var seen string // the member last found at a seed address
	for n.sleep(rejoinEvery*3/4 + mrand.N(rejoinEvery/2)) {
		live, members := n.seedsLive(want, &seen)
		// A view still filling (a large world formed by hello) counts the
		// world's members: they are there, and would all join at once.
		members = max(members, len(n.World().Members))
		if live || (members > rejoiners && mrand.N(members) >= rejoiners) {
			continue
		}
		_, _ = n.ml.Join(seeds)
	}
}

// seedAddrs is the set of seed addresses (host:port) as given and with
// their names resolved, as memberlist reports a member's address.
func seedAddrs(seeds []string) map[string]bool {
	want := make(map[string]bool, 2*len(seeds))
	for _, s := range seeds {
		want[s] = true
		if a, err := net.ResolveTCPAddr("tcp", s); err == nil {
			want[a.String()] = true
		}
	}
	return want
}

// seedsLive reports whether some live member listens at an address in
// want, and how many live members this node sees (itself included). It
// looks at *seen first, the member it found there last time, and records
// the one it finds: searching the whole view every period was 7% of the
// CPU of 1,000 members in one process while their views filled, and held
// viewMu, which the event delegate waits for, as long.
func (n *Node) seedsLive(want map[string]bool, seen *string) (live bool, members int) {
	n.viewMu.Lock()
	defer n.viewMu.Unlock()
	if p, ok := n.peers[*seen]; ok && want[p.addr] {
		return true, len(n.peers)
	}
	for name, p := range n.peers {
		if want[p.addr] {
			*seen = name
			return true, len(n.peers)
		}
	}
	return false, len(n.peers)
}
