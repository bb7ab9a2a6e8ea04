package comm

// Init's outcome agrees across ranks, as ncclCommInitRank's does: either
// every rank's Init returns a communicator, or every survivor's fails
// naming the rank that died.
//
// Init connects only each rank's start-up peers (connect.go), so a rank
// that dies once the world is agreed, before or while the others connect,
// is seen at once only by its own peers; a rank with no link to it used
// to return a communicator whose first operation failed. Three things
// close that:
//
//   - The bootstrap's failure reports reach the engine from the moment it
//     exists (engineMade), not from Init's end: a rank waiting for the
//     dead rank's dial, or for anything else, stops on its report.
//   - Init ends with a barrier over the start-up links (agreeInit; the
//     dissemination barrier's peers are among collectives.InitPeers, so it
//     connects nobody new). No rank completes it unless every rank entered
//     it, having done every step of Init that can fail; a rank that dies
//     before that fails the barrier everywhere, through the engine's abort
//     (which floods the links) or the gossip report of its death.
//   - A failed Init names the rank whose death started it (initCause): a
//     survivor whose connection broke because another survivor gave up
//     first waits, up to initCauseGrace, for the bootstrap to report the
//     death, rather than name the survivor.
//
// What remains cannot be closed by any protocol (the two generals): a
// rank that dies after it sent its last barrier message may let some
// ranks complete the barrier and not others, and one that dies after the
// barrier completed everywhere leaves every rank with a communicator. In
// both cases the death is an error of a later call, naming it, on every
// rank that needs it, as for any death after Init.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gorun-hpc/gorun/bootstrap"
	"github.com/gorun-hpc/gorun/collectives"
	"github.com/gorun-hpc/gorun/internal/engine"
	"github.com/gorun-hpc/gorun/internal/kernels"
)

// initCauseGrace bounds how long a failed Init waits for the bootstrap to
// report the death that started it: a killed process is reported within
// milliseconds (a refused gossip port, evidence.go), a dead host by the
// gossip detector in about 1.25 s, more on an oversubscribed host
// (relaxProbes). A failure that no death started (a rank that gave up for
// a reason of its own) is named as it was found once this passes.
const initCauseGrace = 5 * time.Second

// engineMade starts forwarding the bootstrap's failure reports to c, whose
// engine newComm has just made, before it connects (see the file comment).
func (g *gossipRendezvous) engineMade(c *Comm) {
	g.fw = &failureSink{c: c, epoch: g.node.World().Epoch, died: make(chan struct{})}
	g.fwDone = make(chan struct{})
	go forwardFailures(g.fw, g.node, g.fwDone)
}

// agreeInit is Init's last step: a barrier over the start-up links, which
// no rank completes unless every rank reached it.
func (c *Comm) agreeInit(ctx context.Context) error {
	if c.size < 2 {
		return nil
	}
	ctx, cancel := c.cfg.bound(ctx)
	defer cancel()
	if err := c.enter(ctx, c.ticket(), "init"); err != nil {
		return err
	}
	defer c.release()
	// The flat barrier even where the job spans hosts (not hierBarrier):
	// its peers are start-up peers, it adds no connection, and it is not
	// an operation of the caller's (quiet: no span, no metrics).
	s := spec{coll: collectives.Barrier, dt: kernels.Uint8, quiet: true}
	return rankErr("init", c.exec(ctx, &s))
}

// initCause returns the error a failed Init reports: err, or, when err
// blames another rank that the bootstrap has not reported dead, the report
// of the death that started it, if one comes within initCauseGrace (or
// before ctx ends). It asks the bootstrap to check the rank err blames.
func (g *gossipRendezvous) initCause(ctx context.Context, err error) error {
	var pe *engine.PeerError
	var re *RankError
	q := -1
	switch {
	case errors.As(err, &re):
		q = re.Rank
	case errors.As(err, &pe):
		q = pe.Rank
	}
	fw := g.fw
	if fw == nil || q < 0 || q == g.placed.Rank {
		return err
	}
	if f, ok := fw.firstDeath(); ok && f.Rank == q {
		return err
	}
	g.node.Suspect(q) // if q itself is gone, its report comes at once
	t := time.NewTimer(initCauseGrace)
	defer t.Stop()
	select {
	case <-fw.died:
	case <-t.C:
	case <-ctx.Done():
	}
	f, ok := fw.firstDeath()
	if !ok || f.Rank == q {
		return err
	}
	g.ctl.Blame(f.Rank)
	return &RankError{Rank: f.Rank, Op: "init", Err: fmt.Errorf("%w: %w (then %v)", ErrPeerFailed, f.Err, err)}
}

// firstDeath is the first death reported in fw's world, if any.
func (fw *failureSink) firstDeath() (bootstrap.Failure, bool) {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if fw.dead == nil {
		return bootstrap.Failure{}, false
	}
	return *fw.dead, true
}
