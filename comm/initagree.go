package comm

// Init's outcome agrees across ranks, as ncclCommInitRank's does: either
// every rank's Init returns a communicator, or every survivor's fails
// naming the rank that died.
//
// Init connects only each rank's start-up peers (connect.go), so a rank
// that dies once the world is agreed, before or while the others connect,
// is seen at once only by its own peers; a rank with no link to it used
// to return a communicator whose first operation failed. Four things
// close that:
//
//   - The bootstrap's failure reports reach the engine from the moment it
//     exists (engineMade), not from Init's end: a rank waiting for the
//     dead rank's dial, or for anything else, stops on its report.
//   - A rank whose Init fails once the world formed, for a reason of its
//     own (its device, its context, its own connection to a peer) or
//     because of another's failure, does not just leave: it abandons the
//     world (leave; bootstrap's abandon.go), naming the rank it blames and
//     why, and the others' bootstrap reports that as a failure, so a rank
//     waiting for its dial or its barrier message stops at once rather
//     than at its timeout. A leave after Init (Close) stays a leave.
//   - Init ends with a barrier over the start-up links (agreeInit; the
//     dissemination barrier's peers are among collectives.InitPeers, so it
//     connects nobody new). No rank completes it unless every rank entered
//     it, having done every step of Init that can fail; a rank that dies
//     before that fails the barrier everywhere, through the engine's abort
//     (which floods the links) or the gossip report of its death.
//   - A failed Init names the rank whose death or abandonment started it
//     (initCause): a survivor whose connection broke because another
//     survivor gave up first waits, up to initCauseGrace, for the
//     bootstrap to report the first failure, rather than name the
//     survivor; and, where that report is a death, up to abandonGrace for
//     the rank's abandonment, which says why it went (a rank that gives
//     up ends, and its refused port may be found before its word comes).
//   - Its error is of the kind of that first failure: an abandonment
//     carries the kind of its rank's error (abandonKinds), and the others'
//     Init fails with it, as an operation fails on every rank with the
//     kind of the rank that withdrew (ErrInvalid for its bad argument,
//     ErrTimeout for its timeout), not with ErrPeerFailed, whose words
//     alone said it; a death, a leave or an abandonment of no such kind is
//     ErrPeerFailed.
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
	"strings"
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
// (relaxProbes), a rank that abandons the world in a few milliseconds. A
// failure that neither started is named as it was found once this passes.
const initCauseGrace = 5 * time.Second

// abandonGrace bounds how long a failed Init whose first report is a death
// waits for that rank's abandonment, which says why it gave up: a rank
// whose Init failed abandons and ends, and its refused gossip port may be
// found before its msgAbandon (one UDP packet) or its meta update (a few
// gossip rounds) is heard (failureSink.amended).
const abandonGrace = 500 * time.Millisecond

// engineMade starts forwarding the bootstrap's failure reports to c, whose
// engine newComm has just made, before it connects (see the file comment).
func (g *gossipRendezvous) engineMade(c *Comm) {
	g.fw = &failureSink{c: c, epoch: g.node.World().Epoch, died: make(chan struct{}), amended: make(chan struct{})}
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
	rank, size := c.rank, c.size
	s := spec{coll: collectives.Barrier, dt: kernels.Uint8, quiet: true,
		build: func(int) *collectives.Schedule { return collectives.DisseminationBarrier(rank, size) }}
	return rankErr("init", c.exec(ctx, &s))
}

// leave takes this rank out of the gossip group when Init ends with
// err: a Close if err is nil or the world is not the first; otherwise it
// abandons the world (bootstrap's abandon.go), blaming the rank whose
// failure reached it first, in that failure's words (failureWords) and of
// its kind, or itself, in err's words and of err's kind (abandonKind), so
// that every other rank's Init fails at once naming it (see the file
// comment). A chain of abandonments thus passes on the first rank's words
// and kind, not each rank's account of the one before.
func (g *gossipRendezvous) leave(err error) {
	noteFinalized(g.cfg.JobID, g.node.World()) // for the next Init (init.go)
	inProcess.Delete(g.node.Name())            // no longer running (witness.go)
	if err == nil || g.placed.Epoch > 1 {
		g.node.Close()
		return
	}
	why := bootstrap.AbandonError{Cause: g.placed.Rank, Kind: abandonKindName(abandonKind(err)), Reason: strings.TrimPrefix(err.Error(), "gorun: init: ")}
	var re *RankError
	if errors.As(err, &re) && re.Rank == why.Cause {
		why.Reason = re.Err.Error() // not "rank r:" of its own rank
	}
	if g.fw != nil {
		if f, ok := g.fw.firstDeath(); ok {
			why = bootstrap.AbandonError{Cause: f.Rank, Kind: abandonKindName(abandonKind(f.Err)), Reason: failureWords(f.Err)}
		}
	}
	g.node.Abandon(why)
}

// abandonKinds are the kinds of error an abandonment carries
// (bootstrap.AbandonError.Kind), by their names there: those that say what
// went wrong on the rank, in the order abandonKind tries them (that of the
// engine's abort notices). ErrPeerFailed and ErrPeerClosed, which say that
// another rank went, are not among them: a rank that hears of an
// abandonment names the rank that went (initCause), which is
// ErrPeerFailed. Names are never reused: another build may read them.
var abandonKinds = []struct {
	name string
	err  error
}{{"timeout", ErrTimeout}, {"invalid", ErrInvalid}, {"mismatch", ErrMismatch}}

// abandonKind is the kind of err among abandonKinds, or nil: the kind a
// bootstrap report's abandonment carried, for a report (or an error made
// of one), else err's own, unless it says that a peer went.
func abandonKind(err error) error {
	var ab *bootstrap.AbandonError
	if errors.As(err, &ab) {
		for _, k := range abandonKinds {
			if k.name == ab.Kind {
				return k.err
			}
		}
		return nil
	}
	if errors.Is(err, ErrPeerFailed) || errors.Is(err, ErrPeerClosed) {
		return nil
	}
	for _, k := range abandonKinds {
		if errors.Is(err, k.err) {
			return k.err
		}
	}
	return nil
}

// abandonKindName is the name of kind, one of abandonKinds or nil ("").
func abandonKindName(kind error) string {
	for _, k := range abandonKinds {
		if k.err == kind {
			return k.name
		}
	}
	return ""
}

// failureKind is the kind of a failed Init whose cause is a bootstrap
// report's err: the kind its abandonment carried (abandonKind), else
// ErrPeerFailed.
func failureKind(err error) error {
	if k := abandonKind(err); k != nil {
		return k
	}
	return ErrPeerFailed
}

// causeOf is the failure a report f puts first: itself, or, for a rank
// that abandoned the world because another failed, that other rank's, in
// the words the abandoning rank gave (leave).
func causeOf(f bootstrap.Failure) *bootstrap.Failure {
	var ab *bootstrap.AbandonError
	if errors.As(f.Err, &ab) && ab.Cause >= 0 && ab.Cause != f.Rank {
		words := ab.Reason
		if words == "" {
			words = bootstrap.ErrPeerDead.Error()
		}
		f.Rank, f.Name, f.Err = ab.Cause, "", &spoken{words: words, errs: []error{f.Err}}
	}
	return &f
}

// failureLine is how GORUN_DEBUG logs the bootstrap's report f: as it
// came, or, for a rank that abandoned the world because another failed,
// naming that other rank and its failure in the words the rank gave
// (causeOf). Those words are the other's whole error: as it came, a
// relayed abandonment said "peer gave up on the world" twice.
func failureLine(f bootstrap.Failure) string {
	if cf := causeOf(f); cf.Rank != f.Rank {
		return fmt.Sprintf("rank %d failed: it gave up after rank %d's failure: %s", f.Rank, cf.Rank, failureWords(cf.Err))
	}
	return fmt.Sprintf("rank %d failed: %v", f.Rank, f.Err)
}

// failureWords is what a bootstrap report's err says of the failed rank:
// a death or a leave as the bootstrap names it ("peer failed
// (unreachable)"), an abandonment with its reason, an abandonment that
// blamed another rank in the words it gave (causeOf); without the
// report's "bootstrap gossip rank r peer q:", which is the reporter's.
func failureWords(err error) string {
	var sp *spoken
	var ab *bootstrap.AbandonError
	var oe *bootstrap.OpError
	switch {
	case errors.As(err, &sp):
		return sp.words
	case errors.As(err, &ab):
		return ab.Error()
	case errors.As(err, &oe):
		return oe.Err.Error()
	}
	return err.Error()
}

// formLoss is the error of a Join that failed because a rank died or
// left while the first world formed (bootstrap's formloss.go): a
// *RankError naming that rank in its failure's words and of its kind
// (failureKind), as a failure once the world formed is (initCause),
// wrapping the *bootstrap.FormError, which named no rank ("bootstrap: job
// ...: world of 6 (epoch 1) not formed: ..."). (A rank locked on a world
// that a member abandons before its commit comes forms on it and hears
// the abandonment once formed: bootstrap's abandon.go.) Any other error
// is returned as it is.
func formLoss(err error) error {
	var fe *bootstrap.FormError
	var oe *bootstrap.OpError
	if !errors.As(err, &fe) || !errors.As(fe.Cause, &oe) || oe.Peer < 0 {
		return err
	}
	words := failureWords(oe) + " (while the world formed)"
	return &RankError{Rank: oe.Peer, Op: "init", Err: &spoken{words: words, errs: []error{failureKind(oe), err}}}
}

// spoken is an error in chosen words, wrapping errs.
type spoken struct {
	words string
	errs  []error
}

func (s *spoken) Error() string   { return s.words }
func (s *spoken) Unwrap() []error { return s.errs }

// initCause returns the error a failed Init reports: err, or, when err
// blames another rank, the bootstrap's first report of a death or an
// abandonment in Init's world (causeOf), which says what err may not (the
// death, or why that rank gave up), of its kind (failureKind), if one
// came or comes within initCauseGrace (or before ctx ends). It asks the
// bootstrap to check the rank err blames.
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
	f, ok := fw.firstDeath()
	if !ok {
		g.node.Suspect(q) // if q itself is gone, its report comes at once
		t := time.NewTimer(initCauseGrace)
		select {
		case <-fw.died:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		f, ok = fw.firstDeath()
	}
	if !ok {
		return err
	}
	if fw.deathOnly() { // its reason may come yet
		t := time.NewTimer(abandonGrace)
		select {
		case <-fw.amended:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		f, _ = fw.firstDeath()
	}
	g.ctl.Blame(f.Rank)
	// f's words, then what this rank saw after it, unless that is f
	// itself or another rank's abandonment because of f.
	words := failureWords(f.Err)
	var ab *bootstrap.AbandonError
	if !errors.Is(err, f.Err) && !(errors.As(err, &ab) && ab.Cause == f.Rank) && !fw.isSuperseded(err) {
		then := err.Error()
		if re != nil {
			then = re.Err.Error()
			if re.Rank != f.Rank {
				then = fmt.Sprintf("rank %d: %s", re.Rank, then)
			}
		}
		words += " (then " + then + ")"
	}
	// err stays in the chain unless it would add another kind: the
	// engine's own report of an abandonment of kind ErrInvalid is
	// ErrPeerFailed.
	kind := failureKind(f.Err)
	errs := []error{kind, f.Err}
	other := errors.Is(err, ErrPeerFailed) || errors.Is(err, ErrPeerClosed) || abandonKind(err) != nil && abandonKind(err) != kind
	if kind == ErrPeerFailed || !other {
		errs = append(errs, err)
	}
	return &RankError{Rank: f.Rank, Op: "init", Err: &spoken{words: words, errs: errs}}
}

// firstDeath is the first death reported in fw's world, or the rank the
// first abandonment blames (causeOf), if any.
func (fw *failureSink) firstDeath() (bootstrap.Failure, bool) {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if fw.dead == nil {
		return bootstrap.Failure{}, false
	}
	return *fw.dead, true
}

// deathOnly says whether fw's first report is a death, not an
// abandonment, and may still be replaced by one (deliver).
func (fw *failureSink) deathOnly() bool {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	var ab *bootstrap.AbandonError
	return fw.dead != nil && fw.amended != nil && fw.superseded == nil && !errors.As(fw.first.Err, &ab)
}

// isSuperseded says whether err is, or was made of, the report an
// abandonment replaced (deliver): its words are the abandonment's.
func (fw *failureSink) isSuperseded(err error) bool {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	return fw.superseded != nil && errors.Is(err, fw.superseded)
}
