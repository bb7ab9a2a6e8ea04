package comm

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/gorun-hpc/gorun/internal/numa"
)

// Topology is where a communicator's ranks run: which ranks share a host
// and, on a host, a NUMA node. Host identity is the hostname plus the
// kernel's boot id (internal/jobenv), so namespaces with their own UTS
// hostname count as hosts.
type Topology struct {
	// Hosts lists the ranks on each host, in rank order; hosts are
	// numbered by their lowest rank.
	Hosts [][]int
	// HostOf is the index in Hosts of each rank's host.
	HostOf []int
	// NUMAOf is each rank's NUMA node on its host (the node of the CPU it
	// ran on at Init, or of its binding), -1 when unknown.
	NUMAOf []int
}

// Topology reports where the communicator's ranks run. The result is a
// copy; it does not change during the communicator's life. A nil *Comm
// has no ranks: its Topology is empty.
func (c *Comm) Topology() Topology {
	if c == nil {
		return Topology{}
	}
	t := c.topo
	out := Topology{HostOf: slices.Clone(t.HostOf), NUMAOf: slices.Clone(t.NUMAOf)}
	for _, h := range t.Hosts {
		out.Hosts = append(out.Hosts, slices.Clone(h))
	}
	return out
}

// SameHost reports whether ranks a and b share a host.
func (t Topology) SameHost(a, b int) bool { return t.HostOf[a] == t.HostOf[b] }

// SameNUMA reports whether ranks a and b share a host and a known NUMA node.
func (t Topology) SameNUMA(a, b int) bool {
	return t.SameHost(a, b) && t.NUMAOf[a] >= 0 && t.NUMAOf[a] == t.NUMAOf[b]
}

// topologyOf builds the topology from the rendezvous endpoints.
func topologyOf(eps []*endpoint) Topology {
	t := Topology{HostOf: make([]int, len(eps)), NUMAOf: make([]int, len(eps))}
	index := map[[8]byte]int{}
	for r, ep := range eps {
		h, ok := index[ep.host]
		if !ok {
			h = len(t.Hosts)
			index[ep.host] = h
			t.Hosts = append(t.Hosts, nil)
		}
		t.Hosts[h] = append(t.Hosts[h], r)
		t.HostOf[r] = h
		t.NUMAOf[r] = int(ep.numa)
	}
	return t
}

// myNUMANode is the NUMA node this rank runs on, -1 when unknown.
func myNUMANode() int16 {
	n, err := numa.CurrentNode()
	if err != nil || n < 0 || n > 1<<14 {
		return -1
	}
	return int16(n)
}

// hierComms are the sub-communicators of the hierarchical algorithms
// (hier.go), made when a communicator spans hosts with more than one rank
// on some host: by newComm in the first world, and in a later one (Shrink,
// Grow, a rank that joins through Init) after the membership check
// (remakeHier). The communicator closes them (close) when it closes, or
// when Shrink or Grow remakes it; they are not on its onClose list, which
// moves to the communicator Shrink or Grow makes.
type hierComms struct {
	local *Comm // the ranks on this host, ranked by rank
	// cross joins the ranks with this rank's local rank on every host that
	// has one, ranked by host; nil when this rank's local rank is not below
	// shards.
	cross *Comm
	// back has cross's ranks too, on connections of its own: between two
	// hosts, host 1's ranks send on it and host 0's on cross
	// (hierCross2). nil with more hosts, or uneven ones.
	back *Comm
	// shards is the smallest number of ranks on a host: a buffer splits
	// into that many shards, one per local rank below it.
	shards int
	even   bool // every host has the same number of ranks
	hosts  int
	// hostIdx is this rank's host index, localIdx its local rank.
	hostIdx, localIdx int
	scratch           []byte
	// told has bit coll set once GORUN_DEBUG=info has logged that coll
	// runs hierarchically (hierFor); under the communicator's turn.
	told uint32
	// stop ends watchHier, which closes watched when it returns.
	stop, watched chan struct{}
}

// subs lists h's sub-communicators that exist.
func (h *hierComms) subs() []*Comm {
	var out []*Comm
	for _, x := range []*Comm{h.local, h.cross, h.back} {
		if x != nil {
			out = append(out, x)
		}
	}
	return out
}

// close ends watchHier and closes the sub-communicators, at once, each
// until ctx ends (a frozen peer holds none of them up for longer).
func (h *hierComms) close(ctx context.Context) {
	if h.stop != nil {
		close(h.stop)
		<-h.watched
	}
	var wg sync.WaitGroup
	for _, x := range h.subs() {
		wg.Go(func() { x.CloseContext(ctx) })
	}
	wg.Wait()
}

// spansHosts reports whether hierarchical algorithms apply: more than one
// host and more than one rank on some host.
func (t Topology) spansHosts() bool {
	if len(t.Hosts) < 2 {
		return false
	}
	for _, h := range t.Hosts {
		if len(h) > 1 {
			return true
		}
	}
	return false
}

// makeHierComms splits c into its host-local and cross-host communicators
// when its topology calls for them. Collective over c; no other operation
// may be in flight (newComm, remakeHier). If a Split fails, the
// sub-communicators made before it are closed and c.hier stays nil.
func (c *Comm) makeHierComms(ctx context.Context) (err error) {
	t := c.topo
	if !t.spansHosts() {
		return nil
	}
	h := &hierComms{shards: len(t.Hosts[0]), even: true, hosts: len(t.Hosts), hostIdx: t.HostOf[c.rank]}
	for _, rs := range t.Hosts {
		h.shards = min(h.shards, len(rs))
		h.even = h.even && len(rs) == len(t.Hosts[0])
	}
	h.localIdx = slices.Index(t.Hosts[h.hostIdx], c.rank)
	defer func() {
		if err != nil {
			// At once, within c's timeout: ctx may have ended. (An
			// error of a child's connections names c's ranks: subComm.)
			cctx, cancel := c.cfg.bound(context.Background())
			defer cancel()
			h.close(cctx)
		}
	}()
	if h.local, err = c.subComm(ctx, h.hostIdx, c.rank); err != nil {
		return err
	}
	color := h.localIdx
	if color >= h.shards {
		color = -1
	}
	if h.cross, err = c.subComm(ctx, color, h.hostIdx); err != nil {
		return err
	}
	if len(t.Hosts) == 2 && h.even {
		if h.back, err = c.subComm(ctx, color, h.hostIdx); err != nil {
			return err
		}
	}
	c.hier = h
	h.stop, h.watched = make(chan struct{}), make(chan struct{})
	go c.watchHier(c.eng, h.stop, h.watched)
	return nil
}

// remakeHier makes the hierarchical sub-communicators of n, a communicator
// of a world after the first: made by Shrink or Grow, or by Init on a rank
// that joins a running job. Every member calls it at one point, right
// after its membership check passed and expelled nobody (expel.go), so
// that the Splits' allgathers meet each other on every rank (a joiner that
// split in newComm met the members' check instead).
//
// If a Split fails (a member died during it), n fails, naming the culprit
// where it can (hierErr), and is returned all the same, as Grow returns a
// communicator whose reconnection failed (remake): the members whose
// Splits completed first have returned n already, and an error here would
// leave this rank no communicator to shrink from (the old one is closed).
// So every rank's next operation fails, and all call Shrink together.
func (n *Comm) remakeHier(ctx context.Context, op string) {
	if !n.topo.spansHosts() {
		return
	}
	start := time.Now()
	// A failure of n (a death the gossip reports, a peer's abort notice)
	// ends the Splits: a child still connecting would not learn of it.
	sctx, cancel := context.WithCancelCause(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-n.eng.Done():
			cancel(n.eng.Err())
		case <-sctx.Done():
		}
	}()
	err := n.makeHierComms(sctx)
	cancel(nil)
	<-watched
	if err != nil {
		err = n.hierErr(ctx, err)
		n.debugf(debugInfo, "%s: making the hierarchical communicators failed after %v (%v); returned failed", op, time.Since(start).Round(time.Microsecond), err)
		return
	}
	n.debugf(debugInfo, "%s: made the hierarchical communicators in %v (%d hosts, %d shards)", op, time.Since(start).Round(time.Microsecond), n.hier.hosts, n.hier.shards)
}
