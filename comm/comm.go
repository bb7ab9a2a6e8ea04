package comm

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorun-hpc/gorun/collectives"
	"github.com/gorun-hpc/gorun/internal/engine"
	"github.com/gorun-hpc/gorun/internal/jobctl"
	"github.com/gorun-hpc/gorun/internal/jobenv"
	"github.com/gorun-hpc/gorun/internal/numa"
	"github.com/gorun-hpc/gorun/transport/rdma"
)

// Comm is a communicator: a group of ranks that run collectives together.
// Its methods and the collective functions are safe for concurrent use;
// operations on one Comm run one at a time in call order, and every rank
// must issue the same collectives in the same order.
type Comm struct {
	rank, size           int
	localRank, localSize int
	cfg                  *config

	devs []*engine.Device
	lns  []rdma.Listener
	eng  *engine.Engine
	conn *connector // makes the links (connect.go)

	// turn: operations run in ticket order (run.go).
	// The operation order (run.go): tickets handed out and the one being
	// served; waiters and skips count the callers waiting and the
	// tickets given up, so that an uncontended call takes no lock.
	tickets atomic.Uint64
	serving atomic.Uint64
	waiters atomic.Int32
	skips   atomic.Int32
	turnMu  sync.Mutex
	turnCh  chan struct{}       // closed by the next release; nil if nobody waits
	skip    map[uint64]struct{} // tickets given up (their ctx ended first)
	p2p     []p2pMsg            // started ISends and IRecvs waiting to run as a group (p2p.go); under turnMu
	// p2pPending is len(p2p), for ticket's lock-free look.
	p2pPending atomic.Int32

	// guarded by the turn
	seq     uint32
	sendSeq []uint32 // point-to-point messages sent to each peer
	recvSeq []uint32 // and received from each peer
	plans   map[planKey]*engine.Plan
	// The last plans used, most recent first: no map lookup for a call
	// that repeats, or alternates with a few others (a barrier between
	// allreduces).
	recent [4]struct {
		key  planKey
		plan *engine.Plan
	}
	missing []int // connectPlan's scratch
	scratch []byte
	p2pIn   []byte // a group's sends, gathered (p2p.go)
	call    engine.Call

	closed  atomic.Bool
	closing closing // Close's outcome (close.go)

	// onClose runs at the end of Close (Init: leaves the gossip group).
	onClose []func()

	// ctl reports progress to the launcher (Init only; nil is a no-op).
	ctl *jobctl.Client
	// jobRanks: this communicator's ranks are the job's (Init's, not
	// Shrink's), so a failure it blames on a peer can name it to the
	// launcher (blame).
	jobRanks bool
	// allTCP: every link this communicator makes is tcp (linksAllTCP;
	// run.go's costProvider).
	allTCP bool
	// oneCPUSet: every rank runs on one set of CPUs of one host (place).
	oneCPUSet bool
	// table is the selection table of its provider, size and CPUs
	// (run.go's algoFor), fixed once its topology is known.
	table *collectives.Table

	shrink shrinkState // Init's gossip node, for Shrink (shrink.go)

	obs  *commObs   // nil unless observed (observe.go)
	topo Topology   // where the ranks run (topology.go)
	hier *hierComms // sub-communicators of the hierarchical algorithms; nil: flat only

	// kids are the open communicators Split made of this one, with their
	// members' ranks here: a failure the gossip reports reaches them too
	// (peerFailed), since a frozen rank leaves their links open.
	kidsMu sync.Mutex
	kids   map[*Comm][]int
}

// Rank is this process's rank in the communicator, 0 ≤ Rank < Size. On
// a nil *Comm (Split's result for a negative color, MPI's
// MPI_COMM_NULL) it is -1, as a *RankError that names no rank says.
func (c *Comm) Rank() int {
	if c == nil {
		return -1
	}
	return c.rank
}

// Size is the number of ranks; 0 on a nil *Comm.
func (c *Comm) Size() int {
	if c == nil {
		return 0
	}
	return c.size
}

// LocalRank is the rank among the communicator's ranks on this host; -1
// on a nil *Comm.
func (c *Comm) LocalRank() int {
	if c == nil {
		return -1
	}
	return c.localRank
}

// LocalSize is the number of the communicator's ranks on this host; 0 on
// a nil *Comm.
func (c *Comm) LocalSize() int {
	if c == nil {
		return 0
	}
	return c.localSize
}

// Err reports why the communicator can no longer be used (an abort, a
// failed peer, a mismatch, Close), or nil.
func (c *Comm) Err() error {
	if c == nil {
		return nilComm("comm")
	}
	if err := c.eng.Err(); err != nil {
		return rankErr("comm", err)
	}
	return nil
}

// Abort fails every pending and later operation on this rank and on every
// peer, with a *RankError naming this rank and wrapping ErrAborted and err.
// A peer's error wraps ErrAborted and gives err's text (its first 232
// bytes), not err itself.
func (c *Comm) Abort(err error) {
	if c == nil {
		return // no operation to fail
	}
	if err == nil {
		err = ErrAborted
	} else if !errors.Is(err, ErrAborted) {
		err = fmt.Errorf("%w: %w", ErrAborted, err)
	}
	c.eng.Abort(c.rank, err)
}

// Refuse fails op on every rank as an invalid argument of this rank's
// does in comm's own checks, and returns the *RankError naming this rank
// (wrapping ErrInvalid and err). It is for a binding that checks a
// call's arguments before they reach comm (the C ABI, Python): without
// it, the ranks whose arguments passed would wait in the call for this
// one until their timeout. Like comm's checks, it withdraws this rank
// from its first collective not completed: a peer still in an earlier
// one finishes it; this rank's communicator is aborted.
func (c *Comm) Refuse(op string, err error) error {
	if c == nil {
		return nilComm(op)
	}
	if err == nil {
		err = ErrInvalid
	} else if !errors.Is(err, ErrInvalid) {
		err = fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	c.eng.Withdraw(err)
	return &RankError{Rank: c.rank, Op: op, Err: err}
}

// peerFailed is the bootstrap's report that rank died: every pending and
// later operation fails naming it, here and in the communicators Split
// made of this one that have it as a member (named by its rank there).
func (c *Comm) peerFailed(rank int, err error) {
	c.eng.PeerFailed(rank, err)
	c.kidsMu.Lock()
	var notify []func()
	for k, members := range c.kids {
		if r := slices.Index(members, rank); r >= 0 {
			notify = append(notify, func() { k.peerFailed(r, err) })
		}
	}
	c.kidsMu.Unlock()
	for _, f := range notify {
		f()
	}
}

// adopt records child, made by Split of the ranks members (c's ranks in
// the child's order), until it closes.
func (c *Comm) adopt(child *Comm, members []int) {
	c.kidsMu.Lock()
	if c.kids == nil {
		c.kids = make(map[*Comm][]int)
	}
	c.kids[child] = members
	c.kidsMu.Unlock()
	child.onClose = append(child.onClose, func() {
		c.kidsMu.Lock()
		delete(c.kids, child)
		c.kidsMu.Unlock()
	})
}

// Close releases the communicator. It is not collective; peers' later
// operations that need this rank fail with ErrPeerClosed. It is
// CloseContext bounded by the communicator's timeout (WithTimeout,
// GORUN_TIMEOUT). On a nil *Comm (Split's result for a negative color) it
// returns an error wrapping ErrInvalid, as os.File's Close does, rather
// than panic, so that a deferred Close after Split is safe.
func (c *Comm) Close() error {
	if c == nil {
		return nilComm("close")
	}
	ctx, cancel := c.cfg.bound(context.Background())
	defer cancel()
	return c.CloseContext(ctx)
}

// teardown is Close's work (close.go): it stops the running operation,
// says bye to the peers (until ctx ends), then frees the transport and
// leaves the gossip group.
func (c *Comm) teardown(ctx context.Context) error {
	c.obs.flush() // the goodbyes may wait for a frozen peer, and gorun may stop this rank meanwhile
	c.conn.stop()
	err := c.eng.CloseContext(ctx)
	c.flushP2P() // started messages never waited for fail now (p2p.go)
	for _, ln := range c.lns {
		ln.Close()
	}
	for _, d := range c.devs {
		if e := d.Close(); e != nil && err == nil {
			err = e
		}
	}
	if c.hier != nil {
		c.hier.close(ctx)
	}
	for _, f := range c.onClose {
		f()
	}
	return err
}

func (c *Comm) debugf(level int, format string, args ...any) {
	if c.cfg.debug >= level {
		debugLog.Printf("gorun rank %d: "+format, append([]any{c.rank}, args...)...)
	}
}

// debugLog writes GORUN_DEBUG's lines, to the microsecond: the phases of
// a recovery on different ranks are put side by side by their times.
var debugLog = log.New(os.Stderr, "", log.LstdFlags|log.Lmicroseconds)

// NewLocal returns n ranks of one communicator in this process, connected
// through the "mem" provider unless WithTransport (or GORUN_TRANSPORT)
// picks another. For tests and simulation.
func NewLocal(ctx context.Context, n int, opts ...Option) ([]*Comm, error) {
	if n < 1 {
		return nil, fmt.Errorf("gorun: NewLocal(%d): %w", n, ErrInvalid)
	}
	cfg, err := newConfig(opts...)
	if err != nil {
		return nil, err
	}
	cfg.local = true
	cfg.localRanks = n
	if err := checkBounds(providerNames(cfg), n, n); err != nil {
		return nil, err
	}
	if err := checkMemory(cfg, n); err != nil {
		return nil, err
	}
	hall := newLocalHall(n)
	comms := make([]*Comm, n)
	// The first rank to fail ends the others' start-up: a rank waiting for
	// a failed rank to dial it has no link on which to learn of it (a
	// process of a job learns it from the bootstrap), and waited for ctx
	// (4,096 ranks: 22 waited past 3 minutes).
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cc := *cfg
			if r < len(cfg.simHosts) {
				cc.simHost = &[8]byte{'s', 'i', 'm', byte(cfg.simHosts[r])}
			}
			var err error
			if comms[r], err = newComm(ctx, &cc, &localRendezvous{r: r, hall: hall}); err != nil {
				once.Do(func() {
					first = err
					cancel(fmt.Errorf("gorun: NewLocal: rank %d failed: %w", r, err))
				})
			}
		}()
	}
	wg.Wait()
	if first != nil {
		for _, c := range comms {
			if c != nil {
				c.Close()
			}
		}
		return nil, first
	}
	return comms, nil
}

// newComm opens the providers, listens, exchanges endpoints through rv,
// picks a provider per peer, connects and returns the communicator.
func newComm(ctx context.Context, cfg *config, rv rendezvous) (_ *Comm, err error) {
	rank, size := rv.rank(), rv.size()
	limit := size
	if g, ok := rv.(*gossipRendezvous); ok {
		limit = max(size, g.cfg.MaxSize) // a rank launched to grow the job (GORUN_MAX_NP)
	}
	if size < 1 || rank < 0 || rank >= limit {
		return nil, fmt.Errorf("gorun: rank %d of %d: %w", rank, size, ErrInvalid)
	}
	ctx, cancel := cfg.bound(ctx)
	defer cancel()
	c := &Comm{rank: rank, size: size, cfg: cfg, sendSeq: make([]uint32, size), recvSeq: make([]uint32, size),
		plans: map[planKey]*engine.Plan{}}
	first := cfg.obs == nil // this communicator opens the observer (observe.go)
	if first {
		if cfg.obs, err = newObserver(cfg, rank, size); err != nil {
			return nil, err
		}
		if cfg.obs != nil {
			c.onClose = append(c.onClose, cfg.obs.close)
		}
	}
	if cfg.obs != nil {
		c.obs = cfg.obs.attach()
	}
	devByName := map[string]*engine.Device{}
	lnByName := map[string]rdma.Listener{}
	defer func() {
		if err != nil {
			for _, f := range c.onClose {
				f()
			}
			for _, ln := range c.lns {
				ln.Close()
			}
			for _, d := range c.devs {
				d.Close()
			}
		}
	}()

	// Open and listen.
	names := providerNames(cfg)
	if !cfg.local { // NewLocal checks for all its ranks
		if err := checkBounds(names, size, 1); err != nil {
			return nil, err
		}
	}
	me := &endpoint{host: hostIdentity(), pid: uint32(os.Getpid()), start: selfStart(), numa: myNUMANode(), quorum: cfg.quorum, tuning: cfg.tuning.Sum(), addrs: map[string]string{}}
	cpus, cpusErr := numa.Affinity(0)
	if cpusErr == nil && len(cpus) > 0 {
		me.cpus = jobenv.CPUKey(numa.FormatCPUList(cpus))
	}
	if cfg.simHost != nil {
		me.host = *cfg.simHost
	}
	rcfg := rdma.Config{Token: cfg.token, RNRRetry: rnrRetry, RNRTimer: rnrTimer, Checksum: cfg.checksum, Spin: spinFor(cfg.localRanks)}
	if cfg.local {
		rcfg.RNRRetry = int(handshakeFor(cfg, size) / rnrTimer)
	}
	var openErrs []error
	for _, name := range names {
		dev, err := rdma.OpenConfig(name, rcfg)
		if err == nil {
			dev, err = withFault(dev, rank) // GORUN_FAULT (fault.go)
		}
		if err != nil {
			openErrs = append(openErrs, err)
			continue
		}
		laddr := "127.0.0.1:0"
		var ip string
		if info, _ := rdma.LookupProvider(name); info.NeedsIP {
			if ip, err = advertiseIP(cfg.socketIfname); err != nil {
				dev.Close()
				return nil, err
			}
			laddr = ip + ":0"
		}
		ln, err := dev.Listen(ctx, laddr)
		if err != nil {
			dev.Close()
			openErrs = append(openErrs, err)
			continue
		}
		d, err := engine.NewDevice(dev, cfg.regCache)
		if err != nil {
			ln.Close()
			dev.Close()
			openErrs = append(openErrs, err)
			continue
		}
		if name == "tcp" {
			// A payload sent from the caller's buffer completes with the
			// peer's acknowledgement frame, a round trip the call waits
			// for: copy up to 64 KiB instead (2 ranks, against 16 KiB:
			// 64 KiB allreduce 96-99 -> 47-51 us, 128 KiB 131-152 -> 96-102
			// us; 4 ranks at 1 and 16 MiB level; 2026-11-24). The copies'
			// source costs 512 KiB per link beside 8 MiB of staging.
			d.CopyMax = tcpCopyMax
		}
		c.devs = append(c.devs, d)
		c.lns = append(c.lns, ln)
		devByName[name], lnByName[name] = d, ln
		me.addrs[name] = ln.Addr().String()
	}
	if len(c.devs) == 0 {
		return nil, fmt.Errorf("gorun: no usable transport among %v: %w", names, errors.Join(openErrs...))
	}
	blob, err := me.marshal()
	if err != nil {
		return nil, err
	}
	blobs, err := rv.exchange(ctx, blob)
	var re *RankError
	switch {
	case errors.As(err, &re):
		return nil, err // it says where already ("gorun: init: rank r: ...")
	case err != nil:
		return nil, fmt.Errorf("gorun: rendezvous: %w", err)
	}
	if g, ok := rv.(*gossipRendezvous); ok && g.placed.Size > 0 && (g.placed.Rank != rank || g.placed.Size != size) {
		// This rank joined a running job (restarted, or launched to grow
		// it): Grow placed it.
		rank, size = g.placed.Rank, g.placed.Size
		c.rank, c.size = rank, size
		c.sendSeq, c.recvSeq = make([]uint32, size), make([]uint32, size)
	}
	if len(blobs) != size {
		return nil, fmt.Errorf("gorun: rendezvous returned %d endpoints for %d ranks", len(blobs), size)
	}
	eps, err := endpointsOf(rv, blobs)
	if err != nil {
		return nil, err
	}
	if err := sameQuorum(eps, me); err != nil {
		return nil, err
	}
	if err := sameTuning(eps, me); err != nil {
		return nil, err
	}
	sharers, away := 0, 0
	for r, ep := range eps {
		if ep.host == me.host {
			if r < rank {
				c.localRank++
			}
			c.localSize++
		}
		if me.cpus != ([8]byte{}) && ep.cpus == me.cpus {
			sharers++
			if ep.host != me.host {
				away++
			}
		}
	}
	// A communicator made by Split (the hierarchical algorithms' local
	// and cross communicators among them) keeps its parent's count: the
	// parent's ranks still share the CPUs.
	cfg.cpuSharers, cfg.cpus = max(cfg.cpuSharers, sharers), len(cpus)
	cfg.cpuSharersAway = max(cfg.cpuSharersAway, away)

	// Connect the start-up peers; the others when first needed (connect.go).
	c.eng = engine.NewEngine(rank, size, nil, c.devs)
	c.eng.SetWait(cfg.waitPolicy())
	namer, named := rv.(interface{ names(connected bool) []int })
	if named {
		c.eng.NameRanks(namer.names(false)) // before any link: every text has them
	}
	if g, ok := rv.(*gossipRendezvous); ok {
		g.engineMade(c) // failures reach the engine while it connects (initagree.go)
	}
	var world uint32
	if w, ok := rv.(interface{ world() uint32 }); ok {
		world = w.world()
	}
	c.startConnector("init", world, eps, devByName, lnByName)
	if err := c.conn.connectInit(ctx); err != nil {
		c.conn.stop()
		c.eng.CloseContext(ctx)
		return nil, c.named(rankErr("init", err))
	}
	if named {
		c.eng.NameRanks(namer.names(true))
	}
	if first && cfg.obs != nil && cfg.obs.met != nil {
		cfg.obs.met.devs.Store(&c.devs)
	}
	c.place(eps)
	// A rank that joins a running job (a world after the first: restarted,
	// or launched to grow it) splits them off later, in Init, after the
	// membership check, where the members whose Grow admits it split
	// theirs (remakeHier): here its Split's allgather would meet their
	// check's allreduce.
	if world <= 1 {
		if err := c.makeHierComms(ctx); err != nil {
			// As for a failed connectInit: the cleanup deferred above
			// closes the transport and runs onClose, once (Close did both
			// again).
			c.conn.stop()
			c.eng.CloseContext(ctx)
			return nil, err
		}
	}
	return c, nil
}

// providerNames lists the providers newComm opens.
func providerNames(cfg *config) []string {
	switch {
	case cfg.transport != "auto":
		return []string{cfg.transport}
	case cfg.local:
		return autoProviders(rdma.ReachProcess, rdma.ReachProcess)
	}
	return autoProviders(rdma.ReachHost, rdma.ReachNetwork)
}

// pickProvider chooses the provider between me and peer (see newComm).
func pickProvider(forced string, me, peer *endpoint) string {
	has := func(name string) bool { return me.addrs[name] != "" && peer.addrs[name] != "" }
	if forced != "auto" {
		if has(forced) {
			return forced
		}
		return ""
	}
	for _, info := range rdma.ProvidersByPreference(rdma.ReachProcess, rdma.ReachNetwork) {
		switch {
		case info.Reach == rdma.ReachProcess && (me.host != peer.host || me.pid != peer.pid):
		case info.Reach == rdma.ReachHost && me.host != peer.host:
		case has(info.Name):
			return info.Name
		}
	}
	return ""
}

// place sets what c derives from its ranks' endpoints: their topology,
// whether every link is tcp, and the selection table those choose (newComm,
// and Shrink and Grow's reconnect).
func (c *Comm) place(eps []*endpoint) {
	c.topo = topologyOf(eps)
	c.allTCP = linksAllTCP(c.cfg.transport, eps)
	c.oneCPUSet = oneCPUSet(eps)
	provider, cpus := c.costProvider(), c.costCPUs()
	c.table = c.cfg.tuning.Table(provider, c.size, cpus)
	c.debugf(debugInfo, "algorithms: the %s table for %d ranks on %d CPUs (0: one per rank), cost constants: %s", provider, c.size, cpus, tuningName(c.cfg.tuning.Sum()))
}

// oneCPUSet reports whether every endpoint of eps names one host and one
// known set of CPUs (endpoint.cpus): then every rank of the communicator
// runs on the same CPUs, and each counts as many (Comm.costCPUs). It is
// computed from the endpoints alone, which every rank has alike, also
// after a Shrink or Grow.
func oneCPUSet(eps []*endpoint) bool {
	for _, ep := range eps {
		if ep.cpus == ([8]byte{}) || ep.cpus != eps[0].cpus || ep.host != eps[0].host {
			return false
		}
	}
	return len(eps) > 0
}

// linksAllTCP reports whether pickProvider links every pair of eps over
// tcp: two ranks whose one link is tcp, or a job forced onto tcp
// (GORUN_TRANSPORT) where every rank has a tcp address. The answer is the
// same on every rank (pickProvider is symmetric and every rank holds the
// same endpoints), so all may choose their algorithms by it. A job on
// auto over several hosts is not counted: it mixes providers, and its
// hosts' collectives are hierarchical.
func linksAllTCP(forced string, eps []*endpoint) bool {
	switch {
	case len(eps) == 2:
		return pickProvider(forced, eps[0], eps[1]) == "tcp"
	case len(eps) < 2 || forced != "tcp":
		return false
	}
	for _, ep := range eps[1:] {
		if pickProvider(forced, eps[0], ep) != "tcp" {
			return false
		}
	}
	return true
}

// stagingFor sizes each peer's staging (the same on every rank: it bounds
// the schedules' chunks) so that the links a rank makes at start-up,
// collectives.MaxInitPeers(size), take at most 32 MiB per rank. An
// in-process world keeps the full mesh's small budget, but gives a link
// at least localFloor while its ranks' start-up links fit localBudget.
// A rank that connects more peers (alltoall) uses as much again per peer.
func stagingFor(cfg *config, size int) engine.LinkParams {
	p := engine.LinkParams{Slots: cfg.slots, SlotBytes: cfg.slotBytes}
	if p.SlotBytes == 0 {
		p.SlotBytes = defaultSlotBytes
		if cfg.transport == "tcp" {
			p.SlotBytes = tcpSlotBytes
		}
	}
	if size < 2 {
		return p
	}
	per := stagingPerRank / collectives.MaxInitPeers(size)
	if cfg.local {
		// Kept from the full mesh (per rank 256 MiB/n², at least 256 KiB,
		// over n-1 links): larger staging made the 8-byte allreduce on mem
		// slower at 4 ranks (measured). Where that leaves a link too
		// small a window to go zero-copy, localFloor.
		per = max(256<<10, (256<<20)/(size*size)) / (size - 1)
		if int64(size)*int64(collectives.MaxInitPeers(size))*localFloor <= localBudget { // int64: no overflow on 32-bit
			per = max(per, localFloor)
		}
	}
	for p.Slots*p.SlotBytes > per && p.SlotBytes > 4096 {
		p.SlotBytes /= 2
	}
	minSlots := 2
	if cfg.local && int64(size)*int64(collectives.MaxInitPeers(size))*localMinSlots*int64(p.SlotBytes) <= localSlotBudget {
		minSlots = min(p.Slots, localMinSlots)
	}
	for p.Slots*p.SlotBytes > per && p.Slots > minSlots {
		p.Slots--
	}
	return p
}

// rnrRetry is how many times a send that finds no receive posted is
// retried, rnrTimer apart (rdma.Config's default RNRTimer): 10 s for a
// peer to post one. In a world in one process, where a rank cannot fail
// apart from the others, a receiver not ready has only not been scheduled
// yet: there the retries last as long as a handshake may (handshakeFor).
// At 4,096 ranks (55,000 goroutines on 2 CPUs, formed in 39-99 s before
// the endpoints were shared, localHall.endpoints; 13-15 s since) a
// dialer's handshake found no receive posted for 10 s, and the world
// failed to form (one of the 4 of 9 that failed, 2026-11-29).
const (
	rnrRetry = 1000
	rnrTimer = 10 * time.Millisecond
)

// localMinSlots is the fewest slots a link of a world in one process keeps
// beyond localBudget (205 ranks and more), while its ranks' start-up links
// take at most localSlotBudget with them (to 1,260 ranks): 8 of 4 KiB, 32
// KiB a link, where the full mesh's budget left 2 (and leaves 2 beyond:
// 2,048 ranks took 6.6 GiB with 8 slots). Two slots let a sender have one
// small message ahead of its receiver before it waits for a credit, and
// back-to-back small collectives queued behind each other: at 224 ranks
// (comm's TestCostFit, fastest batch of 2 passes, 2026-11-29 01:38 UTC) an
// 8-byte broadcast took 651 µs with 2 slots, 426 with 4, 265 with 8; an
// 8-byte allreduce by recursive doubling 5.1, 3.6 and 3.0 ms; a 4 KiB
// broadcast 1,221, 757 and 508 µs. 1,024 ranks take 0.9 GiB more for
// it, 2.5 GiB in all (README, Scale).
const localMinSlots = 8

// localSlotBudget bounds the staging of localMinSlots' slots (1,024 ranks'
// start-up links take 0.75 GiB with them).
const localSlotBudget = 1 << 30

// stagingPerRank is a rank's staging budget (stagingFor).
const stagingPerRank = 32 << 20

// localFloor is the least staging per link of a world in one process
// while its links' staging fits localBudget (stagingFor): 8 slots of 16
// KiB, whose window (130,816 bytes) holds a 64 KiB piece. Below it the
// full mesh's budget left 8 slots of 8 KiB from 14 ranks on (a window of
// 65,280 bytes, 256 short of engine.DirectMin, so that no piece went
// zero-copy) and 2 slots of 4 KiB from 32, where a 1 MiB allreduce went in
// 8 KiB pieces that each waited for a credit. Measured with the floor
// against without it (allreduce_perf -batch, in one process on mem,
// 2026-11-28, interleaved, both placements; README, Scale): at 16 ranks
// 1 MiB to 16 MiB 1.7-4.1x faster (broadcast 2.9x at 1 MiB), 8 B to 4 KiB
// level; at 32 and 64 ranks 1 MiB 2.7-6.4x and 16 MiB 3.7-9.4x faster,
// 8 B and 4 KiB 1.2-2.3x (faster in every round). Of the same window in
// other slots, 2 of 64 KiB were as slow as no floor at 8 B; 4 of 32 KiB
// were 1.1-1.2x faster for a 1 MiB allreduce and 1.1-1.2x slower for small
// broadcasts, and the default 8 slots stay.
const localFloor = 128 << 10

// localBudget bounds the staging that localFloor adds to a world in one
// process: 512 MiB for all its ranks' start-up links (up to 204 ranks;
// their send-side headers take about as much again). The 1,024-rank world
// keeps the full mesh's 4 KiB slots, 8 of them a link (localMinSlots;
// README, Scale: 2.5 GiB in all, 1.7 with 2 slots, 6.2 with the floor).
const localBudget = 512 << 20

// Slot sizes (WithStaging overrides them). Over tcp every message costs
// system calls, a frame header and its acknowledgement at both ends, and
// the sender waits for credits a round trip away, so fewer, larger
// messages carry more: 1 MiB slots made a 2-rank tcp allreduce 1.2× faster
// at 1 MiB and 1.25× at 16 MiB than 128 KiB ones (2 MiB slots, or 4 or 16
// of them, measured no better). Only a job forced onto tcp (GORUN_TRANSPORT)
// uses them: every rank must size its staging alike, since it bounds the
// schedules' chunks.
const (
	defaultSlotBytes = 128 << 10
	tcpSlotBytes     = 1 << 20
	tcpCopyMax       = 64 << 10 // engine.Device.CopyMax over tcp
)

// String describes the communicator for logs.
func (c *Comm) String() string {
	if c == nil {
		return "comm <nil>"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "comm rank %d/%d local %d/%d", c.rank, c.size, c.localRank, c.localSize)
	names := make([]string, 0, len(c.devs))
	for _, d := range c.devs {
		names = append(names, d.Dev.Name())
	}
	slices.Sort(names)
	fmt.Fprintf(&b, " over %v", names)
	return b.String()
}

// spinFor is how long a waiter polls before it sleeps (rdma.Config.Spin).
// When every rank on this host has a CPU of its own, polling for 50 µs
// turns a wake-up across CPUs (13–20 µs on the machines measured) into a
// cache-line transfer: shm 8-byte ping-pong between two processes went from
// 7–18 µs to 1.2–1.9 µs one-way. With more ranks than CPUs, or when the
// count is unknown, the provider's short default leaves the CPUs to them.
func spinFor(localRanks int) time.Duration {
	if localRanks > 0 && localRanks <= runtime.NumCPU() {
		return 50 * time.Microsecond
	}
	return 0
}
