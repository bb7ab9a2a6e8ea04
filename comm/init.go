package comm

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorun-hpc/gorun/bootstrap"
	"github.com/gorun-hpc/gorun/internal/jobctl"
	"github.com/gorun-hpc/gorun/internal/jobenv"
	"github.com/gorun-hpc/gorun/internal/numa"
)

// Init joins the job the launcher (gorun, srun, mpirun or torchrun)
// started: it reads the job environment (env.go), starts this rank's
// gossip node (package bootstrap), agrees with the other ranks on the
// world and their endpoints, and connects to them. Without any launcher
// variables it returns a world of one rank.
//
// Seeds. GORUN_SEEDS lists host:port gossip seeds; rank i < len(seeds)
// listens on the port of the i-th seed (the launcher sets one seed: rank 0),
// every other rank on a free port. When GORUN_SEEDS is unset:
//
//   - torchrun (MASTER_ADDR, MASTER_PORT): the seed is rank 0 at
//     MASTER_ADDR:MASTER_PORT+1, since torchrun's own store holds
//     MASTER_PORT;
//   - Slurm: the seed is rank 0 on the first host of SLURM_NODELIST (where
//     block distribution puts it), port 20000 + SLURM_JOB_ID mod 20000
//     (an FNV hash of the id if it is not a number);
//   - Open MPI: there is no seed address; Init fails and asks for
//     GORUN_SEEDS.
//
// Timeout. The world must form within GORUN_TIMEOUT (or WithTimeout) when
// set, otherwise 60 s; if it does not, Init fails with a
// *bootstrap.FormError listing the ranks seen and missing.
//
// Failures. After Init, a rank whose process dies is reported by the
// gossip layer within seconds and fails the communicator's operations
// with ErrPeerFailed naming it, even where the transport would not notice
// (a dead host, a partition). A rank that Closes is not reported that way:
// its connections end with ErrPeerClosed when needed. Close leaves the
// gossip group. A rank whose Init fails once the world formed, for
// whatever reason, tells the others, whose Init then fails at once naming
// it and its reason (initagree.go), as Init fails everywhere when a rank
// dies.
//
// Once. In a launched job a process joins once at a time: an Init while
// the communicator of an earlier one is open fails at once with ErrInvalid
// (as MPI_Init twice does; the ports it would take are the first one's).
// Make more communicators with Dup, Split or CreateGroup; after Close, Init
// may join again.
func Init(ctx context.Context, opts ...Option) (*Comm, error) {
	if !jobenv.Launched(osGetenv) {
		return initFromEnv(ctx, osGetenv, opts...)
	}
	if initOpen.Add(1) > 1 {
		initOpen.Add(-1)
		rank := -1
		if j, err := jobenv.Read(osGetenv); err == nil {
			rank = j.Rank
		}
		return nil, &RankError{Rank: rank, Op: "init", Err: fmt.Errorf("%w: Init called while the communicator of an earlier Init is open: Close it first, or make another with Dup, Split or CreateGroup", ErrInvalid)}
	}
	c, err := initFromEnv(ctx, osGetenv, opts...)
	if err != nil {
		initOpen.Add(-1)
		return nil, err
	}
	// Shrink and Grow hand onClose on to the communicator they make.
	c.onClose = append(c.onClose, func() { initOpen.Add(-1) })
	return c, nil
}

// initOpen counts this process's communicators of a launched job's Init
// not yet closed (0 or 1).
var initOpen atomic.Int32

// ErrJobGone: this rank was restarted (gorun --max-restarts) and none of
// the job's other ranks is left to admit it: they finished or died before
// it was seen. Init returns it about 10 s after the rank finds itself
// alone, not at its timeout; the job's work is done or lost without it,
// and examples/train exits 0.
var ErrJobGone = bootstrap.ErrJobGone

// ErrSeedPortInUse: this rank serves the job's gossip seed (rank 0
// under gorun) and another process on its host holds the seed's port.
// Init fails with it at once; the error names the seed and the
// launcher's way to choose another port (gorun --gossip-port).
var ErrSeedPortInUse = bootstrap.ErrPortInUse

// initRan is set by the process's first Init (bc.Restarted in initFromEnv).
var initRan atomic.Bool

// finalized holds, by job id, the digest of the world this process's last
// gossip node of that job formed, recorded when Close (or a failed Init)
// takes the node out: the next Init's node is told it
// (bootstrap.Config.Finalized), so that a node of that world still open,
// its rank slow to finalize, does not make it take the job for running
// and ignore deaths while the new world forms.
var finalized struct {
	sync.Mutex
	digest map[string]worldDigest
}

type worldDigest = [len(bootstrap.World{}.Digest)]byte

// noteFinalized records w, the world of a node of job that is leaving,
// if it formed one.
func noteFinalized(job string, w bootstrap.World) {
	if w.Epoch == 0 {
		return
	}
	finalized.Lock()
	defer finalized.Unlock()
	if finalized.digest == nil {
		finalized.digest = make(map[string]worldDigest)
	}
	finalized.digest[job] = w.Digest
}

// finalizedWorld is the digest noteFinalized last recorded for job, or
// zero.
func finalizedWorld(job string) worldDigest {
	finalized.Lock()
	defer finalized.Unlock()
	return finalized.digest[job]
}

// initHook, when set (by tests only), is called at named steps of rank's
// Init: "formed" once this rank has acknowledged the agreed world, before
// it connects; "connected" once it has connected, before the agreement
// (initagree.go). A test kills its rank there, or makes Init fail there
// with the error it returns (the ranks of one process tell themselves
// apart by rank).
var initHook func(rank int, step string) error

// initStep runs initHook's step, if set; its error is this rank's.
func initStep(rank int, step string) error {
	h := initHook
	if h == nil {
		return nil
	}
	if err := h(rank, step); err != nil {
		return &RankError{Rank: rank, Op: "init", Err: err}
	}
	return nil
}

// defaultFormTimeout bounds world formation when GORUN_TIMEOUT is unset.
const defaultFormTimeout = 60 * time.Second

func initFromEnv(ctx context.Context, getenv func(string) string, opts ...Option) (*Comm, error) {
	cfg, err := newConfig(opts...)
	if err != nil {
		return nil, err
	}
	job, err := readJobEnv(getenv)
	if err != nil {
		return nil, err
	}
	if job.Source == "" { // not started by a launcher: a world of one
		job.Rank, job.Size = 0, 1
	}
	if job.LocalSize > 0 {
		cfg.localRanks = job.LocalSize
	}
	cfg.localRank = job.LocalRank // offsets GORUN_METRICS_ADDR's port (metrics.go)
	if err := reachesRanks(cfg.transport, job); err != nil {
		return nil, &RankError{Rank: job.Rank, Op: "init", Err: err}
	}
	bc, err := bootstrapConfig(job, getenv, cfg)
	if err != nil {
		return nil, &RankError{Rank: job.Rank, Op: "init", Err: err}
	}
	// GORUN_RESTART says how this process was started: its first Init
	// joins the running job, and fails with ErrJobGone if the job's other
	// ranks are gone. A later Init (a finalize and init again) is the
	// job's own.
	bc.Restarted = !initRan.Swap(true) && getenv(jobenv.Restart) != ""
	bc.Finalized = finalizedWorld(bc.JobID)
	if len(cfg.token) == 0 {
		cfg.token = []byte(job.Token)
	}
	ctl := jobctl.FromEnv() // the launcher's live view; nil without gorun
	ctl.Phase(bc.Rank, "bootstrap")
	rv := &gossipRendezvous{cfg: bc, ctl: ctl}
	if job.Rank < len(job.Seeds) {
		seed := job.Seeds[job.Rank]
		rv.seedInUse = func(err error) error {
			return &RankError{Rank: job.Rank, Op: "init", Err: job.SeedInUse(seed, err)}
		}
	}
	c, err := newComm(ctx, cfg, rv)
	if err != nil {
		err = rv.initCause(ctx, err) // with the node still in the gossip group
		if rv.node != nil {
			rv.leave(err) // closes node.Failures(), which ends forwardFailures
		}
		if rv.fwDone != nil {
			<-rv.fwDone
		}
		ctl.Close()
		return nil, err
	}
	c.ctl, c.jobRanks = ctl, true
	if o := cfg.obs; o != nil { // the timeline's clock offset, the metrics' port (observe.go)
		o.mu.Lock()
		o.clock = ctl.ClockOffset
		o.mu.Unlock()
		if o.met != nil {
			ctl.SetMetricsPort(o.met.Addr().(*net.TCPAddr).Port)
		}
	}
	ctl.Joined(c.rank)
	ctl.Phase(c.rank, "ready")
	node, fw, done := rv.node, rv.fw, rv.fwDone // forwarding since newComm made the engine (initagree.go)
	c.shrink.node, c.shrink.failures = node, fw // for Shrink (shrink.go)
	stopWitness, witnessDone := make(chan struct{}), make(chan struct{})
	go witness(node, stopWitness, witnessDone) // frozen ranks on this host (witness.go)
	var failed error                           // Init's, set before the Close of a failed Init
	c.onClose = append(c.onClose, func() {
		close(stopWitness)
		<-witnessDone
		rv.leave(failed) // closes node.Failures(), which ends forwardFailures
		<-done
		ctl.Close()
	})
	if w := node.World(); w.Epoch <= 1 {
		c.shrink.base = baseOf(w) // the quorum's (quorum.go)
	} else { // joined a running job: a member back from exclusion? (expel.go)
		switch out, err := c.checkMembership(ctx, w, nil); {
		case err == nil && len(out) > 0:
			// This rank among them: the others went on without it and
			// fail naming it; it fails, as in Shrink and Grow.
			if err := c.expelled(out, "init"); err != nil {
				c.debugf(debugInfo, "init: epoch %d: this rank came back from a world the others had left it out of", w.Epoch)
				failed = err
				c.Close()
				return nil, failed
			}
		case err == nil: // where the members that admitted it take theirs (remake)
			c.shrink.base = baseOf(w)
			c.remakeHier(ctx, "init")
		}
		// A check that failed leaves the base empty: this rank, failed,
		// can never count a quorum, where the members kept theirs.
	}
	if err := applyBind(c, getenv); err != nil { // GORUN_BIND (bind.go)
		failed = &RankError{Rank: c.rank, Op: "init", Err: err}
		c.Close()
		return nil, failed
	}
	if mode, _ := numa.ParseBindMode(getenv(jobenv.Bind)); mode == numa.BindNone {
		shareProcs(c, getenv) // procs.go
	}
	if node.World().Epoch <= 1 { // the first world: Init's outcome agrees (initagree.go)
		err := initStep(c.rank, "connected")
		if err == nil {
			err = c.agreeInit(ctx)
		}
		if err != nil {
			failed = rv.initCause(ctx, err)
			c.Close()
			return nil, failed
		}
	}
	c.debugf(debugInfo, "joined job %q as rank %d of %d (gossip %s)", bc.JobID, c.rank, c.size, node.Addr())
	// Collect Init's garbage (the gossip layer's buffers, the connections'
	// set-up) now rather than in a cycle that starts during the job's first
	// operations: with one P per rank (GOMAXPROCS=1 from the launcher), a
	// background mark worker there held the rank's CPU for up to 8 ms at a
	// stretch while its peer waited (an execution trace of a 2-rank barrier
	// loop right after Init).
	runtime.GC()
	return c, nil
}

// forwardFailures turns the bootstrap's reports of dead ranks, and of
// ranks whose Init failed (they abandon the world: initagree.go), into
// failures of the communicator fw holds: Init's, then each one Shrink
// makes. Ranks that left (Closed) are not forwarded: the transport
// reports them as ErrPeerClosed when an operation needs them.
func forwardFailures(fw *failureSink, node *bootstrap.Node, done chan<- struct{}) {
	defer close(done)
	for f := range node.Failures() {
		if errors.Is(f.Err, bootstrap.ErrPeerDead) || errors.Is(f.Err, bootstrap.ErrPeerAbandoned) {
			fw.deliver(f)
		}
	}
}

// failureSink routes gossip failure reports to the communicator of the
// world they belong to. A report carries the epoch of its world and the
// rank in that world: a report for the current epoch goes to the current
// communicator; one for a later epoch (Shrink's agreement is done but its
// communicator not yet connected) waits until Shrink installs that
// communicator; one for an earlier epoch concerns a closed communicator
// and is dropped. Safe for concurrent use.
type failureSink struct {
	mu      sync.Mutex
	c       *Comm
	epoch   uint32
	pending []bootstrap.Failure // reports for epochs after epoch

	// Shrink's reconnection to the world of epoch connecting stops on a
	// report for that world (shrink.go).
	connecting uint32
	stop       context.CancelCauseFunc

	// The first death (or abandonment, as the rank it blames: causeOf)
	// reported in the world of Init, and a channel closed then
	// (initCause); died is nil in a sink that does not watch for it.
	dead *bootstrap.Failure
	died chan struct{}
	// first is the report that set dead. A second report of its member
	// carrying the member's abandonment (its process ended before its
	// word came: bootstrap.Node.Failures) replaces it, once, and closes
	// amended; superseded keeps the replaced report's error.
	first      bootstrap.Failure
	amended    chan struct{}
	superseded error
}

// watch makes a report for world epoch (one that arrived already, or a later
// one) call stop until the returned function is called.
func (fw *failureSink) watch(epoch uint32, stop context.CancelCauseFunc) (unwatch func()) {
	fw.mu.Lock()
	fw.connecting, fw.stop = epoch, stop
	for _, f := range fw.pending {
		if f.Epoch == epoch {
			stop(f.Err)
		}
	}
	fw.mu.Unlock()
	return func() {
		fw.mu.Lock()
		fw.stop = nil
		fw.mu.Unlock()
	}
}

func (fw *failureSink) deliver(f bootstrap.Failure) {
	fw.mu.Lock()
	c := fw.c
	var ab *bootstrap.AbandonError
	switch {
	case fw.died == nil || f.Epoch != fw.epoch:
	case fw.dead == nil:
		fw.dead, fw.first = causeOf(f), f
		close(fw.died)
	case fw.superseded == nil && f.Name == fw.first.Name && errors.As(f.Err, &ab) && !errors.As(fw.first.Err, &ab):
		fw.superseded = fw.first.Err
		fw.dead, fw.first = causeOf(f), f
		if fw.amended != nil {
			close(fw.amended)
		}
		fw.mu.Unlock()
		return // the engine failed on the first report
	}
	switch {
	case f.Epoch > fw.epoch || c == nil:
		fw.pending = append(fw.pending, f)
		if fw.stop != nil && f.Epoch == fw.connecting {
			fw.stop(f.Err)
		}
		fw.mu.Unlock()
		return
	case f.Epoch < fw.epoch:
		fw.mu.Unlock()
		return
	}
	fw.mu.Unlock()
	c.debugf(debugWarn, "%s", failureLine(f))
	c.peerFailed(f.Rank, f.Err)
}

// install makes c, of world epoch, the communicator that receives
// failures, and hands it the reports that arrived for epoch before it.
func (fw *failureSink) install(c *Comm, epoch uint32) {
	fw.mu.Lock()
	fw.c, fw.epoch = c, epoch
	var now []bootstrap.Failure
	keep := fw.pending[:0]
	for _, f := range fw.pending {
		switch {
		case f.Epoch == epoch:
			now = append(now, f)
		case f.Epoch > epoch:
			keep = append(keep, f)
		}
	}
	fw.pending = keep
	fw.mu.Unlock()
	for _, f := range now {
		c.debugf(debugWarn, "%s", failureLine(f))
		c.peerFailed(f.Rank, f.Err)
	}
}

// gossipRendezvous is Init's rendezvous: the blob is published in the
// bootstrap meta and the agreed world returns every rank's blob.
type gossipRendezvous struct {
	cfg    bootstrap.Config
	node   *bootstrap.Node
	ctl    *jobctl.Client
	placed bootstrap.World // the world exchange joined
	// seedInUse, for a rank that serves a gossip seed, words the failure
	// to bind it (bootstrap.ErrPortInUse) with the launcher's way to
	// choose another port.
	seedInUse func(error) error

	// The bootstrap's failures go to fw from the moment newComm made the
	// engine (engineMade); fwDone is closed when forwarding ends.
	fw     *failureSink
	fwDone chan struct{}
}

func (g *gossipRendezvous) rank() int { return g.cfg.Rank }

// world numbers the agreed world (connect.go tells worlds apart by it).
func (g *gossipRendezvous) world() uint32 { return g.node.World().Epoch }
func (g *gossipRendezvous) size() int     { return g.cfg.Size }

func (g *gossipRendezvous) exchange(ctx context.Context, mine []byte) ([][]byte, error) {
	// A rank that ends before gossip saw it is known to the launcher
	// alone: it says so over jobctl, and Form fails at once naming it
	// (bootstrap's formloss.go), not at its deadline.
	cfg, stop, name := g.cfg, func() {}, ""
	cfg.Started = func(n *bootstrap.Node) {
		name = n.Name()
		inProcess.Store(name, struct{}{}) // until leave (witness.go)
		stop = g.ctl.WatchExits(func(e jobctl.Exit) { n.Exited(e.Rank, e.How) })
	}
	node, err := bootstrap.Join(ctx, cfg, mine)
	stop()
	if err != nil {
		inProcess.Delete(name) // Join closed the node
		if g.seedInUse != nil && errors.Is(err, bootstrap.ErrPortInUse) {
			return nil, g.seedInUse(err)
		}
		return nil, formLoss(err)
	}
	g.node = node
	g.ctl.Phase(g.cfg.Rank, "connecting")
	w := node.World()
	g.placed = w
	if w.Epoch <= 1 && (w.Rank != g.cfg.Rank || w.Size != g.cfg.Size) { // a later epoch: Grow placed this rank
		return nil, fmt.Errorf("gorun: bootstrap placed rank %d of %d at %d of %d", g.cfg.Rank, g.cfg.Size, w.Rank, w.Size)
	}
	if err := initStep(g.cfg.Rank, "formed"); err != nil {
		return nil, err
	}
	blobs := make([][]byte, w.Size)
	for r, m := range w.Members {
		blobs[r] = m.Blob
	}
	return blobs, nil
}

// bootstrapConfig derives this rank's gossip configuration from the job.
func bootstrapConfig(job jobEnv, getenv func(string) string, cfg *config) (bootstrap.Config, error) {
	bc := bootstrap.DefaultLANConfig()
	bc.Rank, bc.Size, bc.MaxSize = job.Rank, job.Size, job.MaxNP
	bc.JobID = job.JobID
	if bc.JobID == "" {
		bc.JobID = "gorun"
	}
	bc.Token = cfg.token
	if len(bc.Token) == 0 {
		bc.Token = []byte(job.Token)
	}
	if cfg.probe > 0 { // GORUN_PROBE_INTERVAL, WithProbeInterval: as given
		bc.ProbeInterval = cfg.probe
		bc.ProbeTimeout = cfg.probe * 3 / 5 // the default's 150 ms of 250
	} else {
		relaxProbes(&bc, job)
	}
	bc.Running = runningHere // a starved rank on this host is not dead (witness.go)
	bc.Ended = endedHere     // and one whose process ended is, whoever holds its port
	bc.Timeout = defaultFormTimeout
	if getenv(jobenv.Timeout) != "" || cfg.timeout != defaultOpTimeout {
		bc.Timeout = cfg.timeout
		if bc.Timeout == 0 {
			bc.Timeout = -1 // the context alone
		}
	}
	if cfg.debug >= debugTrace {
		bc.Logger = log.New(os.Stderr, fmt.Sprintf("gorun rank %d: ", job.Rank), log.LstdFlags|log.Lmicroseconds)
	}
	seeds := seedsFor(job)
	bc.Seeds = seeds
	if len(seeds) == 0 {
		if job.Size > 1 {
			return bc, job.MissingSeeds()
		}
		bc.BindAddr = "127.0.0.1"
		return bc, nil
	}
	ip, err := gossipIP(seeds[0], cfg.socketIfname)
	if err != nil {
		return bc, err
	}
	bc.BindAddr = ip
	if job.Rank < len(seeds) {
		_, port, err := net.SplitHostPort(seeds[job.Rank])
		if err != nil {
			return bc, fmt.Errorf("seed %q: %w", seeds[job.Rank], err)
		}
		if bc.BindPort, err = strconv.Atoi(port); err != nil {
			return bc, fmt.Errorf("seed %q: bad port", seeds[job.Rank])
		}
		if !net.ParseIP(ip).IsLoopback() {
			bc.BindAddr, bc.AdvertiseAddr = "0.0.0.0", ip
		}
	}
	return bc, nil
}

// defaultOpTimeout is newConfig's default operation timeout.
const defaultOpTimeout = jobenv.DefaultTimeout

// seedsFor returns the job's gossip seeds: GORUN_SEEDS, or the seed
// internal/jobenv derives from torchrun's or Slurm's variables (see Init).
func seedsFor(job jobEnv) []string { return job.Seeds }

// gossipIP is the address this rank gossips on: loopback if the seed is on
// loopback (a single-host job), the GORUN_SOCKET_IFNAME interface's if set,
// else the local address of the route toward the seed.
func gossipIP(seed, ifname string) (string, error) {
	host, _, err := net.SplitHostPort(seed)
	if err != nil {
		return "", fmt.Errorf("seed %q: %w", seed, err)
	}
	if host == "localhost" {
		return "127.0.0.1", nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return ip.String(), nil
	}
	if ifname != "" {
		return advertiseIP(ifname)
	}
	if conn, err := net.Dial("udp", seed); err == nil { // no packet is sent
		defer conn.Close()
		if a, ok := conn.LocalAddr().(*net.UDPAddr); ok && !a.IP.IsUnspecified() {
			return a.IP.String(), nil
		}
	}
	return advertiseIP("")
}

// relaxProbes slows gossip failure detection on an oversubscribed host:
// with more than two of the job's ranks per CPU (64 ranks on 2 cores while
// they connect a full mesh), a busy rank cannot answer a 200 ms probe and
// would be declared dead. Probes scale with ranks per CPU / 2, at most 8×;
// dead processes are still seen at once through their connections.
func relaxProbes(bc *bootstrap.Config, job jobEnv) {
	local := job.LocalSize
	if local <= 0 {
		local = job.Size // unknown: assume all on this host, the worst case
	}
	factor := min(local/runtime.NumCPU()/2, 8)
	if factor > 1 {
		bc.ProbeInterval *= time.Duration(factor)
		bc.ProbeTimeout *= time.Duration(factor)
	}
}
