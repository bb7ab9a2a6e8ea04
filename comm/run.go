package comm

import (
	"context"
	"errors"
	"fmt"
	"unsafe"

	"github.com/gorun-hpc/gorun/collectives"
	"github.com/gorun-hpc/gorun/internal/engine"
	"github.com/gorun-hpc/gorun/internal/kernels"
)

// ticket reserves the caller's place in the communicator's operation order.
// Started ISends and IRecvs waiting to run (p2p.go) run first, as a group
// with a ticket of its own.
func (c *Comm) ticket() uint64 {
	if c.p2pPending.Load() != 0 {
		c.turnMu.Lock()
		defer c.turnMu.Unlock()
		if len(c.p2p) > 0 {
			c.flushP2PLocked()
		}
	}
	return c.tickets.Add(1) - 1
}

// enter blocks until ticket t is served (the caller then holds the turn
// and must release it) or ctx ends. A ticket given up is skipped when its
// turn comes, and the communicator is aborted: every rank must run the same
// operations in the same order, so the peers would otherwise wait for one
// this rank will never run. The uncontended path is one atomic load and
// allocates nothing; a waiter counts itself in waiters, then sleeps on a
// channel that the next release closes.
func (c *Comm) enter(ctx context.Context, t uint64, op string) error {
	if c.serving.Load() == t {
		return nil
	}
	// Counted before it looks again: a release that advances serving
	// after this look sees the count and closes the channel.
	c.waiters.Add(1)
	defer c.waiters.Add(-1)
	c.turnMu.Lock()
	for c.serving.Load() != t {
		if c.turnCh == nil {
			c.turnCh = make(chan struct{})
		}
		ch := c.turnCh
		c.turnMu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return c.giveUp(ctx, t, op)
		}
		c.turnMu.Lock()
	}
	c.turnMu.Unlock()
	return nil
}

// giveUp abandons ticket t after ctx ended while it waited for its turn.
// The caller is still counted in waiters, so a release that reaches t
// takes the lock and skips it.
func (c *Comm) giveUp(ctx context.Context, t uint64, op string) error {
	c.turnMu.Lock()
	if c.serving.Load() == t {
		c.advanceLocked() // served as ctx ended: pass the turn on
	} else {
		if c.skip == nil {
			c.skip = map[uint64]struct{}{}
		}
		c.skip[t] = struct{}{}
		c.skips.Add(1)
	}
	c.turnMu.Unlock()
	kind := ErrAborted
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		kind = ErrTimeout
	}
	err := fmt.Errorf("%w: %s gave up waiting for the operation ahead of it: %w", kind, op, ctx.Err())
	c.eng.Withdraw(err)
	return &RankError{Rank: c.rank, Op: op, Err: err}
}

// release ends the current operation. With nobody waiting and no ticket
// given up it is one atomic addition.
func (c *Comm) release() {
	c.serving.Add(1)
	if c.waiters.Load() == 0 && c.skips.Load() == 0 {
		return
	}
	c.turnMu.Lock()
	c.wakeLocked()
	c.turnMu.Unlock()
}

// advanceLocked serves the next ticket not given up and wakes the waiters.
func (c *Comm) advanceLocked() {
	c.serving.Add(1)
	c.wakeLocked()
}

// wakeLocked skips the given-up tickets from serving on and wakes the
// waiters; turnMu is held.
func (c *Comm) wakeLocked() {
	for len(c.skip) > 0 {
		s := c.serving.Load()
		if _, ok := c.skip[s]; !ok {
			break
		}
		delete(c.skip, s)
		c.skips.Add(-1)
		c.serving.Add(1)
	}
	if c.turnCh != nil {
		close(c.turnCh)
		c.turnCh = nil
	}
}

type planKey struct {
	coll  collectives.Collective
	algo  collectives.Algo
	root  int
	count int
	chunk int
	send  bool
	// fromInput: the schedule reads the caller's input where Work has not
	// been written yet (collectives.ReadInput), instead of a copy first.
	fromInput bool
}

// algoFor picks c's algorithm for coll moving bytes: the one forced
// (WithAlgorithm, GORUN_ALGO), the first where the reductions must be
// deterministic, else the selection table derived from the cost model for
// c's provider, size and CPUs (c.table, from collectives.TableFor when c
// was made: an array lookup, no allocation, no map). Every rank has the
// same table: its provider, size and CPUs (costCPUs) are the same on all.
func (c *Comm) algoFor(coll collectives.Collective, bytes int) collectives.Algo {
	if a := c.cfg.algos[coll]; a != collectives.Auto && collectives.Supports(coll, a) {
		return a
	}
	if c.cfg.deterministic {
		return collectives.Algos(coll)[0]
	}
	return c.table.Algo(coll, bytes)
}

// costProvider is the provider whose constants choose c's algorithms: the
// slowest of its links. Across hosts (but for the mem provider's simulated
// hosts) the network, "net", whose constants were fitted on the namespace
// cluster (collectives' cost_net.go). Otherwise tcp
// where every link is tcp (linksAllTCP, loopback); the provider forced
// (GORUN_TRANSPORT, WithTransport; verbs takes tcp's constants); on auto,
// mem in one process and shm on one host.
func (c *Comm) costProvider() string {
	switch {
	case len(c.topo.Hosts) > 1 && c.cfg.transport != "mem":
		return "net"
	case c.allTCP:
		return "tcp"
	case c.cfg.transport != "auto":
		return c.cfg.transport
	case c.cfg.local:
		return "mem"
	}
	return "shm"
}

// costCPUs is the CPUs the model gives c's ranks (0: one per rank),
// where the ranks outnumber the CPUs they run on, if every rank counts
// the same. In one process (NewLocal) it is c's share of them,
// cpus·size/sharers (a Split communicator counts its parent's sharers:
// the other ranks still run there). Between processes it is the CPUs
// where all of c's ranks run on one set of them on one host (oneCPUSet,
// from the endpoints every rank has alike, also after a Grow, where the
// ranks that joined count only the new world): each has that set and its
// count. Ranks of a Split communicator do not count the parent's other
// ranks there, as a rank that joined by Grow could not. Otherwise a rank
// knows which ranks share its CPUs but not how many CPUs the others have,
// and ranks bound to different CPUs could count differently and choose
// different algorithms, which would not match: there the table assumes a
// CPU per rank. The model fitted on launched processes
// (collectives' TestCostPointsLaunch) gives a message and an idle turn
// microseconds of CPU where processes share CPUs; with one CPU per rank
// it would pick the ring or halving-doubling from a few KiB up, where 4
// processes on 2 CPUs took 1.3-1.7x as long as with recursive doubling
// or Bruck (README, cost model).
func (c *Comm) costCPUs() int {
	cfg := c.cfg
	switch {
	case cfg.cpus == 0:
		return 0
	case cfg.local:
		if cfg.cpuSharers > cfg.cpus {
			return max(1, cfg.cpus*c.size/cfg.cpuSharers)
		}
	case c.oneCPUSet && c.size > cfg.cpus:
		return cfg.cpus
	}
	return 0
}

// plan returns the cached compiled schedule.
func (c *Comm) plan(k planKey) (*engine.Plan, error) {
	for i := range c.recent {
		if r := &c.recent[i]; r.plan != nil && r.key == k {
			return r.plan, nil
		}
	}
	if p, ok := c.plans[k]; ok {
		c.remember(k, p)
		return p, nil
	}
	var s *collectives.Schedule
	switch {
	case k.coll == collectives.SendRecv:
		s = collectives.DirectSendRecv(c.rank, c.size, k.root, k.send, k.count, k.chunk)
	case k.count == 0:
		// No elements: the ranks exchange empty messages as a barrier
		// does, under this call's header, so that a rank whose count,
		// root or collective differs is found now (a schedule of no
		// messages would return at once there while the others waited
		// for its data until their timeout).
		var err error
		if s, err = collectives.Build(collectives.Barrier, collectives.Auto, c.rank, c.size, 0, 0, k.chunk); err != nil {
			return nil, err
		}
	default:
		var err error
		if s, err = collectives.Build(k.coll, k.algo, c.rank, c.size, k.root, k.count, k.chunk); err != nil {
			return nil, err
		}
	}
	if k.fromInput {
		n := k.count
		if k.coll == collectives.ReduceScatter {
			n *= c.size // Work holds every rank's block
		}
		s.ReadInput(n) // if it declines, exec copies the input first
	}
	if len(c.plans) >= 256 {
		clear(c.plans)
	}
	p := engine.Compile(s)
	c.plans[k] = p
	c.remember(k, p)
	return p, nil
}

// remember puts plan p of k first among the recent plans.
func (c *Comm) remember(k planKey, p *engine.Plan) {
	copy(c.recent[1:], c.recent[:len(c.recent)-1])
	c.recent[0].key, c.recent[0].plan = k, p
}

// spec is one operation's parameters.
type spec struct {
	coll  collectives.Collective
	dt    kernels.DType
	op    kernels.Op
	root  int // root; for SendRecv the tag
	count int // elements (per-rank block for the blocked collectives)
	work  []byte
	input []byte
	peer  int // SendRecv: the other rank
	send  bool
	group bool // a group of point-to-point messages (p2p.go)
	// outOfPlace: work starts undefined, input holds the data a
	// reduction's work would start with (an out-of-place AllReduce, a
	// Reduce, a ReduceScatter); keep is the part of work the caller
	// reads afterwards, in elements (what must hold a result).
	outOfPlace bool
	keep       collectives.Span
	// build, when set, makes this call's schedule (the v-collectives,
	// whose schedules depend on counts that the plan cache does not key).
	build func(chunk int) *collectives.Schedule
	// quiet: not the caller's operation (Init's agreement): no timeline
	// span, no metrics.
	quiet bool
}

// exec runs one operation; the caller holds the turn.
func (c *Comm) exec(ctx context.Context, s *spec) error {
	return c.failed(c.execute(ctx, s))
}

// execute is exec without the count of a failure.
func (c *Comm) execute(ctx context.Context, s *spec) error {
	if err := c.eng.Err(); err != nil {
		return err
	}
	if done := ctx.Done(); done != nil {
		select {
		case <-done:
			// Ended before the call: it fails as one whose context
			// ended while it waited would (the engine's wait), on every
			// rank, though it might have completed without waiting.
			kind := ErrAborted
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				kind = ErrTimeout
			}
			c.eng.Withdraw(fmt.Errorf("%w: %w", kind, ctx.Err()))
			return c.eng.Err()
		default:
		}
	}
	es := s.dt.Size()
	k := planKey{coll: s.coll, algo: collectives.Direct, root: s.root, count: s.count, fromInput: s.outOfPlace}
	seq := c.seq
	if s.coll == collectives.SendRecv {
		k.root, k.send = s.peer, s.send
		if s.send {
			seq = c.sendSeq[s.peer]
			c.sendSeq[s.peer]++
		} else {
			seq = c.recvSeq[s.peer]
			c.recvSeq[s.peer]++
		}
	} else {
		k.algo = c.algoFor(s.coll, s.count*es)
		c.seq++
	}
	if err := c.eng.Admit(s.coll, seq); err != nil { // a peer's withdrawal that reaches this call
		return err
	}
	// An op must fit in the peer's staging window, or two ranks that each
	// wait for their own send before applying the other's (recursive
	// doubling) would deadlock on credits.
	var err error
	k.chunk = max(1, min(collectives.ChunkBytes(k.algo, c.size, s.count*es), engine.Window(stagingFor(c.cfg, c.size)))/es)
	var p *engine.Plan
	if s.build != nil {
		p = engine.Compile(s.build(k.chunk))
	} else if p, err = c.plan(k); err != nil {
		return err
	}
	if err := c.connectPlan(ctx, p); err != nil { // connect.go
		return err
	}
	if s.outOfPlace {
		// What of keep no receive writes comes from the input (all of
		// it where ReadInput declined the schedule).
		copies := p.S.InputCopies
		if !p.S.ReadsInput {
			copies = []collectives.Span{{Off: 0, Len: len(s.work) / es}}
		}
		for _, sp := range copies {
			lo, hi := max(sp.Off, s.keep.Off), min(sp.Off+sp.Len, s.keep.Off+s.keep.Len)
			if lo < hi {
				copy(s.work[lo*es:hi*es], s.input[lo*es:])
			}
		}
	}
	c.call = engine.Call{Coll: s.coll, DType: s.dt, Op: s.op, Root: s.root, Count: s.count, Seq: seq, Work: s.work, Input: s.input}
	c.ctl.Enter(s.coll.String(), uint64(seq))
	if observable && c.obs != nil && !s.quiet {
		err = c.obs.run(ctx, c, p, k.algo, s)
	} else {
		err = c.eng.Run(ctx, p, &c.call, c.cfg.timeout)
	}
	c.ctl.Leave()
	c.call = engine.Call{}
	if err != nil && c.shrink.node != nil {
		if r, ok := brokenPeer(err); ok {
			c.shrink.node.Suspect(r) // the bootstrap checks whether r is gone (shrink.go)
		}
	}
	return err
}

// invalid fails the operation on every rank: this rank aborts the
// communicator naming itself, from its first collective not completed (a
// peer still in an earlier one finishes it).
func (c *Comm) invalid(op, format string, args ...any) error {
	err := fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
	c.eng.Withdraw(err)
	return &RankError{Rank: c.rank, Op: op, Err: err}
}

// bytesOf views s as bytes.
func bytesOf[T Number](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(z)))
}

func sameSlice[T Number](a, b []T) bool {
	return len(a) == len(b) && (len(a) == 0 || unsafe.SliceData(a) == unsafe.SliceData(b))
}

// overlap says whether a and b share memory.
func overlap(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	pa, pb := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return pa < pb+uintptr(len(b)) && pb < pa+uintptr(len(a))
}

// scratchFor returns c's scratch buffer with at least n bytes (reused, so
// its registration is cached).
func (c *Comm) scratchFor(n int) []byte {
	if cap(c.scratch) < n {
		c.scratch = make([]byte, max(n, 2*cap(c.scratch)))
	}
	return c.scratch[:n]
}
