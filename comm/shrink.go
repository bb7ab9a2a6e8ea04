package comm

// Shrink: elastic recovery after a rank failure, as ULFM's
// MPIX_Comm_shrink and ncclCommShrink. This file is owned by the
// reliability maintainer.

import (
	"context"
	"fmt"

	"github.com/gorun-hpc/gorun/bootstrap"
	"github.com/gorun-hpc/gorun/collectives"
	"github.com/gorun-hpc/gorun/transport/rdma"
)

// shrinkState is what Shrink needs from Init.
type shrinkState struct {
	node     *bootstrap.Node // Init's gossip membership; nil for NewLocal and Split
	failures *failureSink    // where node's failure reports go (init.go)
}

// Shrink returns a communicator of the ranks of c that are still alive,
// renumbered 0..n-1 in the order of their ranks in c. Every surviving rank
// must call it, typically after an operation failed with ErrPeerFailed;
// they agree on the survivors through the gossip bootstrap, then connect
// again over the providers and listeners c already had open (no new
// ports). c is left closed: Shrink takes over its transport and its
// membership, and c's later operations fail with ErrClosed.
//
// Only communicators made by Init can shrink. After Shrink, the gossip
// failure reports go to the new communicator: a survivor that dies later
// fails its operations with ErrPeerFailed naming its new rank, as in the
// first world (and a rank that dies during Shrink's reconnection is
// reported to the new communicator as soon as it exists).
func (c *Comm) Shrink(ctx context.Context) (_ *Comm, err error) {
	const op = "shrink"
	node := c.shrink.node
	if node == nil {
		return nil, &RankError{Rank: c.rank, Op: op, Err: fmt.Errorf("%w: only a communicator made by Init can shrink", ErrInvalid)}
	}
	if c.closed.Load() {
		return nil, &RankError{Rank: c.rank, Op: op, Err: ErrClosed}
	}
	if c.cfg.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.timeout)
		defer cancel()
	}
	// Stop every operation on c, wait for the one running, and close its
	// links; the devices and listeners stay open for the new world.
	c.eng.Abort(c.rank, fmt.Errorf("%w: shrinking", ErrAborted))
	if err := c.enter(ctx, c.ticket(), op); err != nil {
		return nil, err
	}
	defer c.release()
	if c.closed.Swap(true) {
		return nil, &RankError{Rank: c.rank, Op: op, Err: ErrClosed}
	}
	c.eng.Close()

	w, err := node.Shrink(ctx)
	if err != nil {
		c.releaseTransport()
		return nil, &RankError{Rank: c.rank, Op: op, Err: err}
	}
	eps := make([]*endpoint, w.Size)
	for r, m := range w.Members {
		if eps[r], err = unmarshalEndpoint(m.Blob); err != nil {
			c.releaseTransport()
			return nil, &RankError{Rank: r, Op: op, Err: err}
		}
	}
	cfg := *c.cfg
	n := &Comm{rank: w.Rank, size: w.Size, cfg: &cfg, sendSeq: make([]uint32, w.Size), recvSeq: make([]uint32, w.Size),
		plans: map[planKey]*collectives.Plan{}, devs: c.devs, lns: c.lns,
		onClose: c.onClose, ctl: c.ctl, shrink: c.shrink}
	c.devs, c.lns, c.onClose, c.ctl, c.shrink = nil, nil, nil, nil, shrinkState{}
	if err := n.reconnect(ctx, eps); err != nil {
		n.releaseTransport()
		for _, f := range n.onClose {
			f()
		}
		return nil, &RankError{Rank: -1, Op: op, Err: err}
	}
	if n.shrink.failures != nil {
		n.shrink.failures.install(n, w.Epoch)
	}
	n.debugf(debugInfo, "shrunk from rank %d of %d to rank %d of %d (epoch %d)", c.rank, c.size, n.rank, n.size, w.Epoch)
	return n, nil
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

// reconnect connects c to the ranks described by eps over its open
// devices and listeners, as newComm does after its rendezvous: each rank
// dials the lower ranks and accepts the higher ones.
func (c *Comm) reconnect(ctx context.Context, eps []*endpoint) error {
	rank, size := c.rank, c.size
	me := eps[rank]
	devByName := map[string]*collectives.Device{}
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
	links, err := c.connectMesh(ctx, "shrink", eps, devByName, lnByName)
	if err != nil {
		return err
	}
	c.eng = collectives.NewEngine(rank, size, links, c.devs)
	c.eng.SetWait(c.cfg.waitPolicy())
	return nil
}
