package comm

// Shrink: elastic recovery after a rank failure, as ULFM's
// MPIX_Comm_shrink and ncclCommShrink. This file is owned by the
// reliability maintainer.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gorun-hpc/gorun/bootstrap"
	"github.com/gorun-hpc/gorun/internal/engine"
	"github.com/gorun-hpc/gorun/transport/rdma"
)

// shrinkState is what Shrink needs from Init.
type shrinkState struct {
	node     *bootstrap.Node // Init's gossip membership; nil for NewLocal and Split
	failures *failureSink    // where node's failure reports go (init.go)
	base     quorumBase      // the ranks the next Shrink's or Grow's quorum counts (quorum.go)
}

// Shrink returns a communicator of the ranks of c that are still alive,
// renumbered 0..n-1 in the order of their ranks in c. Every surviving rank
// must call it, typically after an operation failed with ErrPeerFailed;
// they agree on the survivors through the gossip bootstrap, then connect
// again over the providers and listeners c already had open (no new
// ports). c is left closed: Shrink takes over its transport and its
// membership, and c's later operations fail with ErrAborted (Shrink
// aborts c first, to end its running operation).
//
// A rank whose own device failed (ErrDeviceFailed) cannot go on: its
// Shrink (and Grow) fails with that error, naming this rank, and leaves
// the job's gossip group, so that the others shrink without it; it
// shrinks out no peer because of it.
//
// Only communicators made by Init can shrink. After Shrink, the gossip
// failure reports go to the new communicator: a survivor that dies later
// fails its operations with ErrPeerFailed naming its new rank, as in the
// first world (and a rank that dies during Shrink's reconnection is
// reported to the new communicator as soon as it exists). Where its ranks
// span hosts, the new communicator runs the hierarchical algorithms, as
// Init's does: every member splits them off again.
func (c *Comm) Shrink(ctx context.Context) (*Comm, error) {
	return c.remake(ctx, "shrink", (*bootstrap.Node).Shrink)
}

// Grow returns a communicator of every live rank of the job: the ranks of
// c and the ranks waiting to join it (restarted by gorun --max-restarts,
// or started later), ordered by the rank each was started with, so that a
// job whose every rank is back has its original ranks (GORUN_RANK). Every
// rank of c must call it, at a point they agree on (Joiners says when
// ranks wait; agree on it with an AllReduce of Max, say); a joining rank's
// comm.Init returns its communicator when they do. The application then
// re-broadcasts its state to the newcomers. Joiners that are gone before
// the members agree are not admitted: a Grow whose every joiner left
// returns a communicator of c's ranks alone. c is left closed, as by
// Shrink. If a rank dies while Grow connects, Grow still returns the
// grown communicator, as on the ranks that connected before the death:
// its operations fail with ErrPeerFailed, and every rank calls Shrink.
func (c *Comm) Grow(ctx context.Context) (*Comm, error) {
	return c.remake(ctx, "grow", (*bootstrap.Node).Grow)
}

// Joiners is the number of ranks of the job waiting to join this
// communicator through Grow, in this rank's view of the gossip group (0
// for a communicator not made by Init, or nil). Ranks see a joiner at slightly
// different times: agree before calling Grow.
//
// A joiner is a new process: a rank restarted (gorun --max-restarts) or
// started later. A process the job went on without (a rank the others
// shrank without while it was frozen, starved or cut off, or expelled)
// is not one while it keeps running: its state is stale and it cannot be
// admitted, as ULFM's shrunk-out processes and torchrun's and Horovod
// Elastic's removed workers are not; its own Shrink or Grow fails with
// ErrExpelled, and its restart counts. On a rank of the side of a healed
// partition that does not go on, the other side's ranks count, so that
// its Grow fails with ErrExpelled.
func (c *Comm) Joiners() int {
	if c == nil || c.shrink.node == nil {
		return 0
	}
	return c.shrink.node.Joiners()
}

// remake replaces c by a communicator of the world agree forms (Shrink,
// Grow), over c's devices and listeners.
func (c *Comm) remake(ctx context.Context, op string, agree func(*bootstrap.Node, context.Context) (bootstrap.World, error)) (_ *Comm, err error) {
	if c == nil {
		return nil, nilComm(op)
	}
	node := c.shrink.node
	if node == nil {
		return nil, &RankError{Rank: c.rank, Op: op, Err: fmt.Errorf("%w: only a communicator made by Init can %s", ErrInvalid, op)}
	}
	if c.closed.Load() {
		return nil, &RankError{Rank: c.rank, Op: op, Err: ErrClosed}
	}
	ctx, cancel := c.cfg.bound(ctx)
	defer cancel()
	start := time.Now() // GORUN_DEBUG=info logs how long closing c took, beside the phases below
	// Shrink: stop every operation on c (they are failing anyway). Grow:
	// the peers may still be finishing the operation that told them to
	// grow, so no abort notice: the links close with a bye, after the data.
	// Then wait for the running operation and close the links; the devices
	// and listeners stay open for the new world. A rank whose device
	// failed goes no further: its peers learn that it failed (an abort
	// notice of ErrPeerFailed), and it leaves (below).
	devErr := c.ownDeviceErr()
	switch {
	case devErr != nil:
		c.eng.DeviceFailed(devErr)
	case op == "shrink":
		c.eng.Abort(c.rank, fmt.Errorf("%w: %s", ErrAborted, op))
	}
	if err := c.enter(ctx, c.ticket(), op); err != nil {
		return nil, err
	}
	defer c.release()
	if c.closed.Swap(true) {
		return nil, &RankError{Rank: c.rank, Op: op, Err: ErrClosed}
	}
	failed := c.eng.Err()
	from := node.World() // c's world, for checkMembership (expel.go)
	c.conn.stop()
	c.eng.CloseContext(ctx)
	// c's hierarchical sub-communicators go with it: their peers may be
	// dead, and the new communicator makes its own (remakeHier).
	if c.hier != nil {
		c.hier.close(ctx)
	}
	// A peer whose connection broke may be gone: the bootstrap checks at
	// once (a refused connection is evidence) instead of waiting for
	// gossip to declare it dead.
	if rank, ok := brokenPeer(failed); ok {
		node.Suspect(rank)
	}

	cfg := *c.cfg
	n := &Comm{cfg: &cfg, devs: c.devs, lns: c.lns, onClose: c.onClose, ctl: c.ctl, shrink: c.shrink}
	if cfg.obs != nil {
		n.obs = cfg.obs.attach() // observe.go
	}
	c.devs, c.lns, c.onClose, c.ctl, c.shrink = nil, nil, nil, nil, shrinkState{}
	fail := func(rank int, err error) (*Comm, error) {
		n.releaseTransport()
		for _, f := range n.onClose {
			f()
		}
		return nil, &RankError{Rank: rank, Op: op, Err: err}
	}
	if devErr == nil {
		devErr = deviceErr(n.devs) // failed while c closed
	}
	if devErr != nil {
		// It would fail every connection of the new world, and its peers
		// would be suspected of it: this rank leaves instead (fail: the
		// gossip group too), and the others shrink without it.
		return fail(c.rank, fmt.Errorf("this rank cannot continue: %w", devErr))
	}
	// A rank that dies while the survivors reconnect fails the
	// reconnection; they agree again, without it. GORUN_DEBUG=info logs
	// how long each phase took (the chaos soak's slow recoveries).
	begin := time.Now()
	shrinking := op == "shrink"
	for attempt := 1; ; attempt++ {
		t0 := time.Now()
		w, err := agree(node, ctx)
		if err != nil {
			return fail(c.rank, err)
		}
		if kept, ok := n.shrink.base.quorum(w); cfg.quorum && !ok {
			// Every rank of w decides so from w and its base: none waits
			// for another to connect (quorum.go).
			c.debugf(debugInfo, "%s: epoch %d keeps %d of the %d ranks of the last whole world: no quorum", op, w.Epoch, kept, len(n.shrink.base.names))
			return fail(c.rank, n.shrink.base.noQuorum(w, kept))
		}
		if shrinking { // every member holds w: the next quorum counts its ranks
			n.shrink.base = baseOf(w)
		}
		t1 := time.Now()
		n.rank, n.size, n.localRank, n.localSize = w.Rank, w.Size, 0, 0
		n.eng, n.conn = nil, nil
		n.sendSeq, n.recvSeq = make([]uint32, w.Size), make([]uint32, w.Size)
		n.plans = map[planKey]*engine.Plan{}
		err = n.reconnectWatched(ctx, node, w, op)
		if n.eng == nil { // a member's endpoint did not decode
			return fail(c.rank, err)
		}
		if devErr := deviceErr(n.devs); err != nil && devErr != nil {
			// This rank's device failed meanwhile: as above.
			n.conn.stop()
			n.eng.CloseContext(ctx)
			return fail(c.rank, fmt.Errorf("this rank cannot continue: %w", devErr))
		}
		if err == nil || (op == "grow" && ctx.Err() == nil) {
			// A Grow whose reconnection failed returns the grown
			// communicator, failed as it would be on the ranks whose Grow
			// completed before the death: every rank then sees its next
			// operation fail and calls Shrink. (Agreeing again in here, as
			// Shrink does, would return from Grow on this rank what is a
			// Shrink on the others, and the application would run its
			// after-Grow steps against their after-Shrink steps.)
			if err != nil {
				n.eng.Abort(n.rank, fmt.Errorf("%w: %s: %w", ErrAborted, op, err)) // no-op: ensure failed it
				n.debugf(debugInfo, "%s: epoch %d (attempt %d) agreed in %v; reconnecting failed after %v (%v); returned failed; links: %s",
					op, w.Epoch, attempt, t1.Sub(t0).Round(time.Microsecond), time.Since(t1).Round(time.Microsecond), err, n.conn.describe())
			}
			if n.shrink.failures != nil {
				n.shrink.failures.install(n, w.Epoch)
			}
			if err != nil {
				return n, nil
			}
			// A member the others had left out, back (expel.go). A check
			// that failed or expelled a member leaves n failed: no
			// hierarchical communicators for it.
			out, cerr := n.checkMembership(ctx, w, &from)
			if cerr == nil && len(out) > 0 {
				n.debugf(debugInfo, "%s: epoch %d: ranks %v came back from a world the others had left them out of", op, w.Epoch, out)
				if xerr := n.expelled(out, op); xerr != nil {
					n.conn.stop()
					n.eng.CloseContext(ctx)
					return fail(n.rank, ErrExpelled)
				}
			}
			if cerr == nil && len(out) == 0 {
				n.shrink.base = baseOf(w) // a Grow's newcomers count from here (quorum.go)
				n.remakeHier(ctx, op)     // topology.go
			}
			n.debugf(debugInfo, "%s: from rank %d of %d to rank %d of %d (epoch %d, attempt %d): closed the old communicator in %v, agreed in %v, connected in %v, %v in all; links: %s",
				op, c.rank, c.size, n.rank, n.size, w.Epoch, attempt, begin.Sub(start).Round(time.Microsecond), t1.Sub(t0).Round(time.Microsecond),
				time.Since(t1).Round(time.Microsecond), time.Since(begin).Round(time.Microsecond), n.conn.describe())
			return n, nil
		}
		n.conn.stop()
		n.eng.CloseContext(ctx)
		if ctx.Err() != nil {
			return fail(-1, err)
		}
		n.debugf(debugInfo, "%s: epoch %d (attempt %d) agreed in %v; reconnecting failed after %v (%v); links: %s; checking the members and shrinking",
			op, w.Epoch, attempt, t1.Sub(t0).Round(time.Microsecond), time.Since(t1).Round(time.Microsecond), err, n.conn.describe())
		for r := range w.Size {
			node.Suspect(r)
		}
		agree, shrinking = (*bootstrap.Node).Shrink, true
	}
}

// reconnectWatched connects n to the members of world w. Members found gone
// meanwhile (a gossip or evidence report for w) end it early: it probes
// them every few tens of milliseconds while it waits.
func (n *Comm) reconnectWatched(ctx context.Context, node *bootstrap.Node, w bootstrap.World, op string) error {
	eps := make([]*endpoint, w.Size)
	for r, m := range w.Members {
		var err error
		if eps[r], err = unmarshalEndpoint(m.Blob); err != nil {
			return &RankError{Rank: r, Op: "reconnect", Err: err}
		}
	}
	n.place(eps) // the sub-communicators come after the membership check (remake)
	rctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	if fw := n.shrink.failures; fw != nil {
		defer fw.watch(w.Epoch, stop)()
	}
	probed := make(chan struct{})
	go func() {
		defer close(probed)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-t.C:
				for r := range w.Size {
					node.Check(r)
				}
			}
		}
	}()
	err := n.reconnect(rctx, eps, op, w.Epoch)
	stop(nil)
	<-probed
	if err != nil && ctx.Err() == nil {
		if cause := context.Cause(rctx); cause != nil && !errors.Is(cause, context.Canceled) {
			return fmt.Errorf("%w (%w)", cause, err)
		}
	}
	return err
}

// brokenPeer says which peer's broken connection, if any, failed err.
func brokenPeer(err error) (int, bool) {
	var pe *engine.PeerError
	if errors.As(err, &pe) && errors.Is(err, ErrPeerFailed) {
		return pe.Rank, true
	}
	return 0, false
}

// ownDeviceErr is the failure of this rank's own device: a CQ that
// failed (deviceErr), or a connection its device failed (verbs: a port
// down, a dead device), which failed the engine naming this rank with
// ErrDeviceFailed; or nil.
func (c *Comm) ownDeviceErr() error {
	if err := deviceErr(c.devs); err != nil {
		return err
	}
	var pe *engine.PeerError
	if errors.As(c.eng.Err(), &pe) && pe.Rank == c.rank && errors.Is(pe.Err, ErrDeviceFailed) {
		return pe.Err
	}
	return nil
}

// deviceErr is the failure of the first of devs whose completion queue
// failed (ErrDeviceFailed), or nil.
func deviceErr(devs []*engine.Device) error {
	for _, d := range devs {
		if err := d.Err(); err != nil {
			return err
		}
	}
	return nil
}

// releaseTransport closes the listeners and devices c still holds.
func (c *Comm) releaseTransport() {
	for _, ln := range c.lns {
		ln.Close()
	}
	for _, d := range c.devs {
		d.Close()
	}
	c.lns, c.devs = nil, nil
}

// reconnect connects c to the ranks described by eps, of world epoch, over
// its open devices and listeners, as newComm does after its rendezvous:
// the start-up peers now, the others when first needed (connect.go).
func (c *Comm) reconnect(ctx context.Context, eps []*endpoint, op string, epoch uint32) error {
	rank, size := c.rank, c.size
	me := eps[rank]
	devByName := map[string]*engine.Device{}
	lnByName := map[string]rdma.Listener{}
	for i, d := range c.devs {
		devByName[d.Dev.Name()] = d
		lnByName[d.Dev.Name()] = c.lns[i]
	}
	for r, ep := range eps {
		if ep.host == me.host {
			if r < rank {
				c.localRank++
			}
			c.localSize++
		}
	}
	c.eng = engine.NewEngine(rank, size, nil, c.devs)
	c.eng.SetWait(c.cfg.waitPolicy())
	c.startConnector(op, epoch, eps, devByName, lnByName)
	if err := c.conn.connectInit(ctx); err != nil {
		return rankErr("reconnect", err) // the caller closes c.conn and c.eng
	}
	return nil
}
