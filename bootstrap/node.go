package bootstrap

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// World is one agreed view of the job: every member of it computed the same
// table, in the same epoch.
type World struct {
	Rank    int // this node's rank
	Size    int
	Epoch   uint32 // 1 for the first world; Shrink increments it
	Digest  [digestLen]byte
	Members []Member // indexed by rank
}

// Member is one rank of a World.
type Member struct {
	Rank int
	Name string // gossip node name, unique within the job
	Addr string // gossip address, host:port
	Host string // locality identity (Config.Host)
	Blob []byte // opaque data the rank published (its transport endpoints)
}

// Failure reports that a member of the formed world left or died.
type Failure struct {
	Rank  int    // the member's rank in World epoch Epoch
	Epoch uint32 // the world it belonged to
	Name  string
	Err   error // *OpError wrapping ErrPeerDead or ErrPeerLeft
}

// Node is one rank's membership in a job's gossip group. Its methods are
// safe for concurrent use.
type Node struct {
	cfg  Config
	name string
	ml   *memberlist.Memberlist
	// addr is the gossip address, memberlist's local node's, read once in
	// Start: reading it later races with an UpdateNode (markBehind,
	// Close), which rewrites the local node's fields.
	addr string
	// updMu makes this node's meta updates one at a time (updateNode).
	updMu sync.Mutex

	traffic *counters // nil unless cfg.CountTraffic or cfg.Network

	changed  chan struct{} // cap 1: the view changed
	formedCh chan struct{} // closed when the first world is installed
	done     chan struct{} // closed by Close
	streams  chan struct{} // resends in flight (msg.go), at most resendStreams
	resent   atomic.Uint64 // streams resend opened
	sent     atomic.Uint64 // agreement messages sent: the last message.seq
	wg       sync.WaitGroup

	metaMu  sync.Mutex // guards meta, metaBuf; never held across memberlist calls
	meta    meta
	metaBuf []byte

	// viewMu guards peers, viewGen, outGen, gone, goneAt, goneSeq,
	// goneAddr and departed. memberlist calls the event delegate
	// with its node lock held, and that lock stalls its packet handling, so
	// every critical section of viewMu is a few map operations.
	viewMu  sync.Mutex
	peers   map[string]peer
	viewGen uint64          // incremented on every change of peers, and when a member is reported after its last call (growOut)
	outGen  uint64          // incremented when a member leaves peers, comes back, changes its Leaving flag, is found gone or says it leaves
	gone    map[string]bool // members found dead by evidence (evidence.go), kept out of peers
	// goneAt orders gone: the value of goneSeq when each was found gone,
	// for pruneGoneLocked (prune.go), which drops the earliest.
	goneAt  map[string]uint64
	goneSeq uint64
	// goneAddr is the gossip address of each member in gone, for the
	// leave notice (shutdown): a frozen member may resume (expel.go).
	// gone and goneAddr are pruned at each install (pruneGoneLocked).
	goneAddr map[string]string
	// departed holds the members gossip dropped from the view (dead or
	// left) until they come back: a member of a new world that is not in
	// the view may have left it, or may not have reached it yet (the
	// agreement lets a member with an incomplete view take the
	// coordinator's table), and only the first is a failure. Those out
	// of the world found gone or superseded go at each install
	// (pruneDepartedLocked).
	departed map[string]bool

	mu       sync.Mutex // guards the fields below; never held across memberlist calls; short
	world    World
	formed   bool
	inWorld  map[string]int  // name → rank in world
	reported map[string]bool // members reported on Failures in this world (install clears it, and their causes of death)
	leaving  map[string]bool // members that announced they close
	stopped  map[string]bool // members a witness saw stopped or gone (witness.go)
	refused  map[string]bool // members whose gossip port refused a connection (evidence.go)
	taken    map[string]bool // members whose gossip address a new node of the job has (evidence.go)
	lost     map[string]bool // members a node locked on a world gave up on (lost.go)
	calling  map[string]bool // members gossip dropped that a last call checks (lastcall.go)
	running  uint32          // the latest epoch a formed member told this node of in a push/pull (grow.go)
	// ranPast is the latest epoch a formed member runs or left, told in a
	// push/pull, a msgRunning or a msgLeaving: only for expelledAt
	// (expel.go), never for forming (running).
	ranPast uint32
	// split is the epoch of this node's world when the other side of a
	// partition, a world of the same epoch without it, goes on (expel.go);
	// wentOn is that world's digest, which this node's leave notice
	// carries to its world's members (leaveNotice).
	split  uint32
	wentOn [digestLen]byte
	// behind holds the members of a world this node held that a later
	// world it installed leaves out: a live one is a process the job went
	// on without, not a joiner, unless a world the job may go on in rather
	// than this node's runs without it (runs: the world each node told
	// this one it runs without it, msgRunning, by sender; expel.go). Each
	// maps to the last world this node held with it (leftOut). Entries
	// that can no longer matter are dropped at each install
	// (pruneBehindLocked, behind.go).
	behind map[string]leftOut
	// runs holds at most one world, the one that went on furthest
	// (WentOn), and only if it went on rather than this node's: no other
	// can make overtakenLocked true (keepRunLocked, forgetLocked).
	runs     map[string]World
	failures chan Failure
	closed   bool
	joinErr  error                  // last failed attempt to join the seeds
	probes   map[string]*probeState // evidence.go
	// formLosses are the job's nodes found dead or gone before the first
	// world formed (formloss.go); emptied at install.
	formLosses  map[string]*formLoss
	formLossSeq uint64 // the last formLoss.seq
	// abandoned: the members of the world, or of the world this node is
	// locked on, that gave up on it (abandon.go); each is also in leaving.
	abandoned map[string]*AbandonError
	// retelling: the nodes behind that this node tells again, each by a
	// goroutine of its own, until they say they know (retellLocked,
	// behind.go).
	retelling map[string]bool

	// agreement state, by epoch (see agree.go); an install drops the
	// epochs below floor (pruneEpochsLocked, prune.go), and NotifyMsg
	// keeps nothing of them
	floor     uint32
	proposals map[uint32]map[string][digestLen]byte // as coordinator: member → proposed digest
	acks      map[uint32]map[string][digestLen]byte // as coordinator: member → acknowledged digest
	committed map[uint32][digestLen]byte            // as coordinator: the digest committed
	prepares  map[uint32]message                    // as member: the last prepare received
	locked    map[uint32][digestLen]byte            // as member: the digest acknowledged (final)
	commits   map[uint32]message                    // as member: the commit received
	proven    map[uint32][digestLen]byte            // as member: the digest locked on that a member abandoned, so committed (abandon.go)
	hints     map[uint32]map[string]bool            // epochs coordinators said they run (msgEpoch), by coordinator
	tables    map[uint32]*tablePrepare              // as member: the last table prepare received (table.go)
	seqs      map[seqKey]uint64                     // the newest proposal, ack and prepare handled, by sender and epoch (msg.go)
}

// peer is a live job member as the event delegate last saw it.
type peer struct {
	name string
	addr string
	meta meta
}

// Join starts this rank's gossip node, joins the seeds and returns once the
// world has formed and been agreed on: Size distinct ranks of the job, all
// publishing the same view. blob (≤ MaxBlob bytes) is published to the
// others and comes back in World().Members. If the world does not form
// before ctx is done or cfg.Timeout passes, Join returns a *FormError that
// lists the ranks seen and missing. Join is Start followed by Form.
func Join(ctx context.Context, cfg Config, blob []byte) (*Node, error) {
	n, err := Start(cfg, blob)
	if err != nil {
		return nil, err
	}
	if cfg.Started != nil {
		cfg.Started(n)
	}
	if _, err := n.Form(ctx); err != nil {
		n.shutdown(false)
		return nil, err
	}
	return n, nil
}

// Start creates the gossip node, publishes blob and begins joining the
// seeds in the background; Addr is valid on return. Form waits for the
// world.
func Start(cfg Config, blob []byte) (*Node, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, &OpError{Op: "join", Rank: cfg.Rank, Peer: -1, Err: err}
	}
	if len(blob) > MaxBlob {
		return nil, &OpError{Op: "join", Rank: cfg.Rank, Peer: -1,
			Err: fmt.Errorf("%w: blob is %d bytes, limit %d", ErrMetaTooLarge, len(blob), MaxBlob)}
	}
	n := &Node{
		cfg:      cfg,
		name:     nodeName(cfg.Rank),
		changed:  make(chan struct{}, 1),
		formedCh: make(chan struct{}),
		done:     make(chan struct{}),
		streams:  make(chan struct{}, resendStreams),
		peers:    make(map[string]peer),
		gone:     make(map[string]bool),
		goneAt:   make(map[string]uint64),
		goneAddr: make(map[string]string),
		departed: make(map[string]bool),
		probes:   make(map[string]*probeState),
		reported: make(map[string]bool),
		leaving:  make(map[string]bool),
		stopped:  make(map[string]bool),
		refused:  make(map[string]bool),
		taken:    make(map[string]bool),
		lost:     make(map[string]bool),
		calling:  make(map[string]bool),
		behind:   make(map[string]leftOut),
		runs:     make(map[string]World),
		failures: make(chan Failure, cfg.Size),

		formLosses: make(map[string]*formLoss),
		abandoned:  make(map[string]*AbandonError),
		retelling:  make(map[string]bool),

		proposals: make(map[uint32]map[string][digestLen]byte),
		acks:      make(map[uint32]map[string][digestLen]byte),
		committed: make(map[uint32][digestLen]byte),
		prepares:  make(map[uint32]message),
		locked:    make(map[uint32][digestLen]byte),
		commits:   make(map[uint32]message),
		proven:    make(map[uint32][digestLen]byte),
		hints:     make(map[uint32]map[string]bool),
		tables:    make(map[uint32]*tablePrepare),
		seqs:      make(map[seqKey]uint64),
	}
	n.meta = meta{Rank: cfg.Rank, Size: cfg.Size, JobID: cfg.JobID, Host: cfg.Host,
		Joining: cfg.Restarted, Blob: append([]byte(nil), blob...)}
	if n.metaBuf, err = n.meta.encode(); err != nil {
		return nil, &OpError{Op: "join", Rank: cfg.Rank, Peer: -1, Err: err}
	}
	mc := cfg.memberlistConfig(n.name)
	d := &delegate{n}
	mc.Delegate, mc.Events, mc.Merge, mc.Alive, mc.Conflict = d, d, d, d, d
	switch {
	case cfg.Network != nil:
		t, err := cfg.Network.attach(cfg.BindPort)
		if err != nil {
			return nil, &OpError{Op: "join", Rank: cfg.Rank, Peer: -1, Err: bindError(cfg.BindPort, err)}
		}
		mc.Transport, n.traffic = t, t.counters
	case cfg.CountTraffic:
		t, err := newCountingTransport(mc)
		if err != nil {
			return nil, &OpError{Op: "join", Rank: cfg.Rank, Peer: -1, Err: bindError(cfg.BindPort, err)}
		}
		mc.Transport, n.traffic = t, t.counters
	}
	if n.ml, err = memberlist.Create(mc); err != nil {
		if mc.Transport != nil {
			_ = mc.Transport.Shutdown()
		}
		return nil, &OpError{Op: "join", Rank: cfg.Rank, Peer: -1, Err: bindError(cfg.BindPort, err)}
	}
	self := n.ml.LocalNode()
	n.addr = self.Address()
	if seeds := n.otherSeeds(self); len(seeds) > 0 {
		n.wg.Add(1)
		go n.joinLoop(seeds)
	}
	return n, nil
}

// Form waits until the first world has formed and been agreed on, and
// returns it; later calls return it at once. On failure (a *FormError)
// the node stays up: the caller may retry or Close it.
func (n *Node) Form(ctx context.Context) (World, error) {
	n.mu.Lock()
	w, formed := n.world, n.formed
	n.mu.Unlock()
	if formed {
		return w, nil
	}
	if n.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, n.cfg.Timeout)
		defer cancel()
	}
	size := n.cfg.Size
	w, err := n.agree(ctx, 1, func(ps map[string]peer) proposal { return formTable(ps, size) }, false)
	// (A rank restarted into a running job joins the survivors' Grow: agree
	// moves it to their epoch, whose table is growTable.)
	if err != nil {
		return World{}, err
	}
	n.install(w)
	n.admitted()
	return w, nil
}

// admitted clears the Joining flag of a restarted node that formed, in
// the background: another restarted rank counts it as a live rank of the
// job from then on (jobGone).
func (n *Node) admitted() {
	n.metaMu.Lock()
	joining := n.meta.Joining
	if joining {
		n.meta.Joining = false
		if buf, err := n.meta.encode(); err == nil {
			n.metaBuf = buf
		}
	}
	n.metaMu.Unlock()
	if joining {
		n.goUnlessClosed(func() { n.updateNode(n.cfg.LeaveTimeout) })
	}
}

// nodeName is unique per process start: the rank and 48 random bits.
func nodeName(rank int) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	r := "u"
	if rank >= 0 {
		r = "r" + strconv.Itoa(rank)
	}
	return r + "-" + hex.EncodeToString(b[:])
}

// startedRank is the rank a node named name (nodeName) was started with
// (Config.Rank), or -1: started without one, or not a name nodeName made.
func startedRank(name string) int {
	digits, _, ok := strings.Cut(name, "-")
	if !ok || len(digits) < 2 || digits[0] != 'r' {
		return -1
	}
	r, err := strconv.Atoi(digits[1:])
	if err != nil || r < 0 {
		return -1
	}
	return r
}

// Addr is the gossip address (host:port) other ranks can use as a seed.
func (n *Node) Addr() string { return n.addr }

// Name is the node's unique gossip name.
func (n *Node) Name() string { return n.name }

// World returns the current agreed view. Callers must not modify it.
func (n *Node) World() World {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.world
}

// Failures delivers one Failure per member of the world that dies or
// leaves, and a second for a member reported before its abandonment
// (Abandon) reached this node, whose Err is then the *AbandonError: its
// process ended before its word came. Each world reports its members
// anew, and Failure.Epoch names the world: a member reported in one
// world that the next one keeps (a cut that healed before the Shrink)
// is reported again in it when it dies. It is closed by Close.
func (n *Node) Failures() <-chan Failure { return n.failures }

// Close announces that this rank leaves (its peers see ErrPeerLeft rather
// than ErrPeerDead), stops gossip and waits for the node's goroutines.
func (n *Node) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.mu.Unlock()
	n.shutdown(true)
	return nil
}

// shutdown stops the node; leave says whether to announce it first.
func (n *Node) shutdown(leave bool) { n.stop(leave, nil) }

// stop is shutdown; ab, if not nil, says that this rank abandons its
// world (Abandon).
func (n *Node) stop(leave bool, ab *AbandonError) {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	n.closed = true
	close(n.done)
	close(n.failures)
	w, formed := n.world, n.formed
	n.mu.Unlock()

	n.wg.Wait() // the join loop, a split's relay (relaySplit)
	if leave {
		// Tell the world directly first: gossip may deliver the dead
		// message before the meta update below.
		bye := n.leaveNotice(w)
		if !formed {
			ab = nil // Forming says it (formloss.go)
		}
		if ab != nil {
			bye = message{kind: msgAbandon, epoch: w.Epoch, digest: w.Digest, from: n.name, about: ab.Reason, cause: ab.Cause, errKind: ab.Kind}
		}
		for _, m := range w.Members {
			if m.Name != n.name {
				n.send(m.Name, m.Addr, bye)
			}
		}
		// And the members found gone, at their last address: one frozen
		// while the others went on without it reads this when it resumes
		// and learns that the job ran past it (expel.go), rather than
		// agree on a world of itself once everyone has left.
		n.viewMu.Lock()
		gone := make(map[string]string, len(n.goneAddr))
		for name, addr := range n.goneAddr {
			gone[name] = addr
		}
		n.viewMu.Unlock()
		for name, addr := range gone {
			n.send(name, addr, message{kind: msgLeaving, epoch: w.Epoch, digest: w.Digest, from: n.name})
		}
		n.metaMu.Lock()
		n.meta.Leaving = true
		n.meta.Forming = !formed // the others' Form fails at once (formloss.go)
		n.meta.Abandoned = ab != nil
		if ab != nil {
			n.meta.Blob = abandonBlob(ab) // its reason, if msgAbandon is late (abandon.go)
		}
		if buf, err := n.meta.encode(); err == nil {
			n.metaBuf = buf
		}
		n.metaMu.Unlock()
		// Give the leaving flag a few gossip rounds: the dead message
		// Leave queues supersedes it in memberlist's broadcast queue.
		n.updateNode(min(3*n.cfg.GossipInterval, n.cfg.LeaveTimeout))
		_ = n.ml.Leave(n.cfg.LeaveTimeout)
	}
	_ = n.ml.Shutdown()
}

// updateNode gossips this node's meta (n.metaBuf) again, waiting up to
// timeout for the broadcast, one update at a time: memberlist's
// UpdateNode reads the local node's fields without its lock, which a
// concurrent UpdateNode rewrites (markBehind's, admitted's and Close's
// run in their own goroutines).
func (n *Node) updateNode(timeout time.Duration) {
	n.updMu.Lock()
	defer n.updMu.Unlock()
	_ = n.ml.UpdateNode(timeout)
}

// otherSeeds is cfg.Seeds without this node's own address, self's.
func (n *Node) otherSeeds(self *memberlist.Node) []string {
	var out []string
	for _, s := range n.cfg.Seeds {
		if s == "" || isSelf(s, self.Addr, int(self.Port)) {
			continue
		}
		out = append(out, s)
	}
	return out
}

// isSelf says whether seed host:port names this node: same port and an
// address of this machine that the node listens on.
func isSelf(seed string, ip net.IP, port int) bool {
	host, ps, err := net.SplitHostPort(seed)
	if err != nil {
		return false
	}
	if p, err := strconv.Atoi(ps); err != nil || p != port {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if a.IP.Equal(ip) {
			return true
		}
	}
	return false
}

// joinLoop joins the seeds once (by hello in a large job: hello.go), then
// keeps them in the group (seeds.go).
func (n *Node) joinLoop(seeds []string) {
	defer n.wg.Done()
	join := n.joinOnce
	if n.usesHello() {
		join = n.helloLoop
	}
	if join(seeds) {
		n.keepSeeds(seeds)
	}
}

// joinOnce contacts the seeds until one answers (a push/pull: this node
// learns the seed's view, the seed learns this node) or the node closes,
// and says which. Seeds start at the same time as everyone else, so
// failures are retried with a doubling delay (at most two seconds),
// jittered: the ranks of a job start together, and a seed refuses
// push/pulls beyond memberlist's 128 pending ones. A joined node does not
// sync with the seeds again while it forms: the seed (usually the
// coordinator) learns every rank at its join, and a member whose view is
// still incomplete gets the coordinator's table with the prepare
// (table.go). Re-syncing every member with the seed until its view was
// complete cost the seed O(n) syncs of O(n) bytes each.
func (n *Node) joinOnce(seeds []string) bool {
	delay := n.cfg.RetryJoin
	if n.cfg.Size > scaleAbove && !n.sleep(mrand.N(time.Duration(n.cfg.Size)*joinSpread)) {
		return false
	}
	for {
		k, err := n.ml.Join(seeds)
		if err == nil && k == 0 {
			err = ErrNoSeed
		}
		if k > 0 {
			err = nil
		}
		n.mu.Lock()
		n.joinErr = err
		n.mu.Unlock()
		if k > 0 {
			return true
		}
		if !n.sleep(delay/2 + mrand.N(delay/2+1)) {
			return false
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// sleep waits d and says true, or false once the node closes.
func (n *Node) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-n.done:
		return false
	case <-t.C:
		return true
	}
}

// install makes w the current world, reports members already gone, and
// drops the state that can no longer matter (behind.go, prune.go).
func (n *Node) install(w World) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if w.Epoch > n.world.Epoch {
		// Each world reports each of its members once (Failures): a
		// member reported in the world before and kept in this one (it
		// came back once a cut healed, and a Shrink kept it) is
		// reported again when it dies, or, out of the view here, once
		// its last call goes unanswered (below). Kept reported, its
		// crash went unreported. The causes of death found for the
		// reported members (a witness, a refused port, a lost member)
		// belong to the first report, which the new world, keeping
		// the member, overrode: kept, they would name its next death.
		for name := range n.reported {
			for _, m := range n.causes() {
				delete(m, name)
			}
		}
		clear(n.reported)
	}
	n.world = w
	for e := range n.tables {
		if e <= w.Epoch {
			delete(n.tables, e) // the table prepares of agreed epochs: n members' records each
		}
	}
	if !n.formed {
		close(n.formedCh)
	}
	n.formed = true
	clear(n.formLosses)
	before := n.inWorld
	n.inWorld = make(map[string]int, len(w.Members))
	for _, m := range w.Members {
		n.inWorld[m.Name] = m.Rank
		delete(n.behind, m.Name)
	}
	var left []string // members of the world before that w leaves out (expel.go)
	for name := range before {
		if _, in := n.inWorld[name]; !in && name != n.name {
			n.behind[name] = leftOut{held: before, at: w.Epoch}
			left = append(left, name)
		}
	}
	n.pruneBehindLocked()
	n.viewMu.Lock()
	var tell []peer // of left, those in the view
	for _, name := range left {
		if q, ok := n.peers[name]; ok {
			tell = append(tell, q)
		}
	}
	var gone, dropped []string // found gone by evidence; dropped by gossip
	for _, m := range w.Members {
		if _, ok := n.peers[m.Name]; ok {
			continue
		}
		if n.gone[m.Name] {
			gone = append(gone, m.Name)
		} else if n.departed[m.Name] {
			dropped = append(dropped, m.Name)
		}
	}
	n.viewMu.Unlock()
	n.tellRunningLocked(before, tell)
	for _, name := range gone {
		n.reportLocked(name, n.leaving[name])
	}
	for name := range n.abandoned { // heard while locked (abandon.go)
		n.reportLocked(name, true)
	}
	for _, name := range dropped {
		switch r := n.inWorld[name]; {
		case n.leaving[name]:
			n.reportLocked(name, true)
		case !n.runsHere(name):
			n.lastCallLocked(name, w.Members[r].Addr) // reports it unless it answers
		}
	}
	// What can no longer be read (prune.go).
	n.pruneEpochsLocked(w.Epoch)
	n.forgetLocked()
	n.viewMu.Lock()
	n.pruneDepartedLocked() // before pruneGoneLocked: it asks gone
	n.pruneGoneLocked()
	n.viewMu.Unlock()
}

// reportLocked sends a Failure for name if it belongs to the current world
// and was not reported before. n.mu is held.
func (n *Node) reportLocked(name string, left bool) {
	r, ok := n.inWorld[name]
	if !ok || n.reported[name] || n.closed {
		return
	}
	n.reported[name] = true
	err := n.deathCauseLocked(name)
	if left {
		err = n.leftErrLocked(name)
	}
	f := Failure{Rank: r, Epoch: n.world.Epoch, Name: name,
		Err: &OpError{Op: "gossip", Rank: n.world.Rank, Peer: r, Err: err}}
	select {
	case n.failures <- f:
	default: // the buffer holds one per member: full only of amendments (amendLocked), or of an earlier world's reports, a slow reader left
	}
}

func (n *Node) signal() {
	select {
	case n.changed <- struct{}{}:
	default:
	}
}
