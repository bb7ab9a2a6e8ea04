package bootstrap

// Forming a large world by hello: the join through the agreement table.
//
// A memberlist join is a push/pull with the seed: the joiner receives the
// seed's whole state, so n joins cost the seed O(n²) bytes, and every
// joiner re-gossips each member it learns (RetransmitMult·⌈log10(n+1)⌉
// sends each), which every other node decodes: n² alive messages in all,
// several times over. At a thousand members in one process that is what
// the formation waited for (README, Gossip formation). The agreement does
// not need it: the coordinator's table reaches every member down a tree
// (table.go).
//
// So beyond helloAbove ranks, a node forming the first world does not
// join memberlist first. It sends a hello (its name, address and meta:
// one UDP packet, about 200 bytes) to the seeds, again every helloEvery
// until the table prepare arrives. A seed adds the sender to its view as
// a gossip join would; the seed is rank 0, the coordinator (comm binds
// seed i to rank i), so its table completes with the last hello and its
// prepare carries it down the tree: O(1) messages per member and O(n) at
// the coordinator. Once the world is formed, each member joins memberlist
// through its parent in that tree (the coordinator is the root), the
// joins spread over Size·formedJoinSpread, and
// gossip fills the views for failure detection after the world is agreed,
// not before. A node that gets no prepare within helloFallback (its seed
// is not the coordinator, or the job already runs: a formed seed ignores
// hellos) joins the seeds the memberlist way, as below helloAbove.

import (
	"context"
	mrand "math/rand/v2"
	"net"
	"time"

	"github.com/hashicorp/memberlist"
)

const (
	// helloAbove is the job size beyond which the first world forms by
	// hello. At 64 members and below memberlist's own join is cheap and
	// its views are complete when the world forms.
	helloAbove = scaleAbove
	// helloEvery is the period of a hello's resend (jittered by ±25%).
	helloEvery = 500 * time.Millisecond
	// helloFallback is how long a node says hello before it joins the
	// seeds through memberlist instead; it grows by helloPerMember.
	// A fallback at scale costs the seed O(n) bytes per join again, so it
	// waits long: 60 s at 1,000 members (one formed in 10-41 s at load
	// 6-11 on 2 cores, and 20 s sent many back to the old path).
	helloFallback  = 30 * time.Second
	helloPerMember = 30 * time.Millisecond
	// formedJoinSpread: a formed member joins memberlist within
	// Size·formedJoinSpread of forming (20 s at 1,000, 1.3 s at 65). The
	// commit reaches every member within milliseconds, and when all
	// joined at once the gossip of their joins starved the members still
	// taking theirs: at 1,000 (load 13) the last Form returned 13 s after
	// the commit. Within 2 s, 24,000 packets were lost to full receive
	// queues in the next 20 s at 1,000 members in one process; within
	// 20 s, 87 in 28 s.
	formedJoinSpread = 20 * time.Millisecond
)

// usesHello says whether this node forms its first world by hello.
func (n *Node) usesHello() bool { return max(n.cfg.Size, n.cfg.MaxSize) > helloAbove }

// encodeHello is msgHello: kind | name | address | meta.
func (n *Node) encodeHello() []byte {
	n.metaMu.Lock()
	mb := n.metaBuf
	n.metaMu.Unlock()
	b := []byte{msgHello}
	b = appendString(b, n.name)
	b = appendString(b, n.Addr())
	return appendString(b, string(mb))
}

func isHello(buf []byte) bool { return len(buf) > 0 && buf[0] == msgHello }

func decodeHello(buf []byte) (peer, bool) {
	if !isHello(buf) {
		return peer{}, false
	}
	d := decoder{buf: buf[1:]}
	name := string(d.bytes(255))
	addr := string(d.bytes(255))
	mb := d.fixed(int(d.uvarint(4096)))
	if d.err != nil || len(d.buf) != 0 {
		return peer{}, false
	}
	m, err := decodeMeta(mb)
	if err != nil {
		return peer{}, false
	}
	return peer{name: name, addr: addr, meta: m}, true
}

// gotHello adds the sender of a hello to the view, as a gossip join of it
// would, while this node forms its first world.
func (n *Node) gotHello(buf []byte) {
	p, ok := decodeHello(buf)
	if !ok || p.meta.JobID != n.cfg.JobID || p.name == n.name {
		return
	}
	if n.isFormed() {
		return // the job runs: the sender falls back to a memberlist join and Grow
	}
	n.viewMu.Lock()
	if _, known := n.peers[p.name]; known || n.gone[p.name] {
		n.viewMu.Unlock()
		return
	}
	n.peers[p.name] = p
	n.viewGen++
	n.viewMu.Unlock()
	n.signal()
}

// helloLoop says hello to the seeds until the first world's table
// prepare arrives, then, once the world is formed, joins memberlist
// through its parent in the table tree. It says false if the node closed
// first, and falls back to joinOnce after helloFallback.
func (n *Node) helloLoop(seeds []string) bool {
	if !n.sleep(mrand.N(time.Duration(n.cfg.Size) * joinSpread)) {
		return false
	}
	var to []*memberlist.Node
	for _, s := range seeds {
		if a := resolveSeed(s); a != nil {
			to = append(to, &memberlist.Node{Name: s, Addr: a.IP, Port: uint16(a.Port), PMax: memberlist.ProtocolVersionMax})
		}
	}
	hello := n.encodeHello()
	deadline := time.Now().Add(helloFallback + time.Duration(n.cfg.Size)*helloPerMember)
	for !n.gotPrepare(1) {
		if time.Now().After(deadline) {
			return n.joinOnce(seeds)
		}
		for _, m := range to {
			_ = n.ml.SendBestEffort(m, hello)
		}
		if !n.sleep(helloEvery*3/4 + mrand.N(helloEvery/2)) {
			return false
		}
	}
	select {
	case <-n.done:
		return false
	case <-n.formedCh:
	}
	if !n.sleep(mrand.N(time.Duration(n.cfg.Size) * formedJoinSpread)) {
		return false
	}
	return n.joinParent()
}

// gotPrepare says whether a prepare of epoch arrived, or the node formed.
func (n *Node) gotPrepare(epoch uint32) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, ok := n.prepares[epoch]
	return ok || n.formed
}

// joinParent joins memberlist through this rank's parent in the table
// tree (treeChildren), retrying until it answers (after three failures,
// through the root) or the node closes. The coordinator, the root, joins
// nobody: its children join it.
func (n *Node) joinParent() bool {
	w := n.World()
	if w.Rank == 0 {
		return true
	}
	parent := []string{w.Members[(w.Rank-1)/tableFanout].Addr}
	delay := n.cfg.RetryJoin
	for try := 1; ; try++ {
		if try > 3 {
			parent = []string{w.Members[0].Addr} // the parent is gone or slow: the root
		}
		if k, err := n.ml.Join(parent); k > 0 && err == nil {
			return true
		}
		if !n.sleep(delay/2 + mrand.N(delay/2+1)) {
			return false
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// resolveSeed resolves a seed's host:port, bounded in time; nil if it
// does not resolve.
func resolveSeed(s string) *net.UDPAddr {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil || len(ips) == 0 {
		return nil
	}
	a, err := net.ResolveUDPAddr("udp", net.JoinHostPort(ips[0].IP.String(), port))
	if err != nil {
		return nil
	}
	return a
}
