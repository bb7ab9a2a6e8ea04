package engine

// Failure handling: the engine's first error wins and is final; abort
// notices carry it to every peer; Close says bye.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gorun-hpc/gorun/collectives"
	"github.com/gorun-hpc/gorun/transport/rdma"
)

// fail records err (the first one wins) with the notice that passes it on
// (Engine.note), and wakes the run loop.
func (e *Engine) fail(err error, from uint64) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err != nil {
		return false
	}
	e.err, e.from = err, from
	e.failed.Store(true)
	close(e.dead)
	return true
}

// Abort fails the engine with a *PeerError{culprit, err} and sends an abort
// notice to every peer, whose operations then fail with the same culprit.
func (e *Engine) Abort(culprit int, err error) { e.abort(culprit, err, 0) }

// Withdraw fails this rank's engine with a *PeerError naming itself, and
// its peers' from the first collective it has not completed: a peer still
// in an earlier one finishes it. Call it for a failure of this rank's own
// that leaves its peers well (a bad argument, a cancelled call, a
// disagreement it found), not for a peer's: a rank that completed a
// collective has sent all that call needed from it, so the call completes
// on every rank.
func (e *Engine) Withdraw(err error) {
	// From the call after the last completed; before any, from call 0
	// (1<<32 | 0: a notice's 0 is an abort of every call, Abort's).
	e.abort(e.Rank, err, max(e.next.Load(), 1<<32))
}

// abort fails the engine and sends the abort notice, which carries from:
// 0, or 1<<32 | the sequence number of the first collective call it fails
// (Withdraw).
func (e *Engine) abort(culprit int, err error, from uint64) {
	if !e.fail(&PeerError{Rank: culprit, Err: err}, from) {
		return
	}
	code, text := e.noticeOf(culprit, err)
	for i := range e.links {
		l := e.links[i].Load()
		if l != nil && !l.closed.Load() {
			l.sendAbort(culprit, code, text, from)
		}
	}
}

// noticeOf is what an abort notice says of err, culprit's failure: its
// reason code and, where the words are the culprit's own, those words: a
// failure of this rank's (an Abort's reason, a bad argument, a timeout),
// or the text a notice brought (givenReason). What this rank saw of
// another's failure (a broken link to it) describes this rank's view,
// not the culprit's: its kind only.
// A failure of this rank's device (ErrDeviceFailed) is, to the peers, the
// failure of this rank: ErrPeerFailed, in words that say it was its
// device.
func (e *Engine) noticeOf(culprit int, err error) (code uint32, text string) {
	code = reasonOf(err)
	var given *givenReason
	switch {
	case errors.As(err, &given):
		text = given.text
	case culprit == e.Rank && errors.Is(err, ErrDeviceFailed):
		code, text = reasonPeerFailed, err.Error()
	case culprit == e.Rank && err.Error() != reasonErr(code).Error():
		text = err.Error()
	}
	return code, text
}

// DeviceFailed fails the engine for err, a failure of this rank's own
// device (Device.Err, which wraps ErrDeviceFailed), with a *PeerError
// naming this rank, and sends the abort notice: the peers see this rank
// as failed (ErrPeerFailed, in err's words). Its operations, pending and
// later, fail with it; none of them blames a peer.
func (e *Engine) DeviceFailed(err error) {
	if !errors.Is(err, ErrDeviceFailed) {
		err = fmt.Errorf("%w: %w", ErrDeviceFailed, err)
	}
	e.Abort(e.Rank, err)
}

// withdrawal is a peer's Withdraw that this rank has yet to act on.
type withdrawal struct {
	culprit int
	err     error
	from    uint32 // the first collective call (Call.Seq) it fails
}

// deferAbort handles an abort notice that fails collectives from call
// from on: an earlier one that runs, or has yet to start, goes on.
func (e *Engine) deferAbort(culprit int, err error, from uint32) {
	if e.pending.CompareAndSwap(nil, &withdrawal{culprit, err, from}) {
		e.poke() // a running call past from fails at its next look (wait.go)
	}
}

// admit fails the engine for a withdrawal that call reaches: a collective
// numbered from or later, or a point-to-point call (whose numbers are per
// pair); it returns the engine's error.
func (e *Engine) admit(call *Call) error {
	if d := e.pending.Load(); d != nil && (call.Coll == collectives.SendRecv || int32(call.Seq-d.from) >= 0) {
		e.abort(d.culprit, d.err, 1<<32|uint64(d.from))
	}
	return e.Err()
}

// Admit is the engine's error for a call of coll numbered seq about to
// start (Run checks it too; the caller checks before connecting).
func (e *Engine) Admit(coll collectives.Collective, seq uint32) error {
	if !e.failed.Load() && e.pending.Load() == nil {
		return nil
	}
	return e.admit(&Call{Coll: coll, Seq: seq})
}

// Expel fails the engine with a *PeerError{culprit, err} and sends no
// notice: for a failure that every rank finds by itself at the same point
// (comm's membership check), where a notice from the first rank to act
// would reach the others ahead of their own finding and put its reason
// code (ErrPeerFailed) in place of their err.
func (e *Engine) Expel(culprit int, err error) {
	e.fail(&PeerError{Rank: culprit, Err: err}, 0)
}

// PeerFailed reports from outside (the bootstrap) that rank died. A peer
// whose link said bye had closed its communicator after every call it
// made, and all it sent before the bye has arrived: the report is of its
// process's end after that (seen on its host before its leave reached
// the gossip), and fails nothing, as linkFailed does not for such a link;
// an operation that still needs it fails (Run).
func (e *Engine) PeerFailed(rank int, err error) {
	if rank >= 0 && rank < len(e.links) {
		if l := e.links[rank].Load(); l != nil && l.closed.Load() {
			e.poke()
			return
		}
	}
	if err == nil {
		err = ErrPeerFailed
	} else if !errors.Is(err, ErrPeerFailed) {
		err = fmt.Errorf("%w: %w", ErrPeerFailed, err)
	}
	e.Abort(rank, err)
}

// byeGrace bounds how long a send side that saw its connection break waits
// for the receive side to get to a bye.
const byeGrace = 100 * time.Millisecond

// linkFailed reports l's connection broken. fromRecv: the receive loop saw
// it, after everything the peer sent (a bye included) was processed, so
// closed is final; the send loop instead gives the receive loop a moment
// to get to a bye first. A killed peer is thus blamed at once.
func (e *Engine) linkFailed(l *Link, err error, fromRecv bool) {
	// (fromRecv false runs on a goroutine of its own: it may wait.)
	l.broken.Store(true)
	if !fromRecv && !l.closed.Load() {
		// Everything the peer sent, a bye included, is in once the
		// receive side ends; a peer that is gone ends it at once.
		t := time.NewTimer(byeGrace)
		select {
		case <-l.recvEnd:
		case <-t.C:
		}
		t.Stop()
	}
	if l.closed.Load() {
		// The peer said bye: it finished every call it made, and all it
		// sent before the bye has arrived (in order). That is no failure;
		// only an operation that still needs this peer fails (Run).
		e.poke()
		return
	}
	e.blameLink(l, err)
}

// blameLink fails the engine for err, a failure of link l: the peer's
// (ErrPeerFailed naming it), unless it is this rank's own device's (its
// CQ failed, Device.failCQ; or the transport says so of the connection,
// rdma.ErrDeviceFailed: a verbs device that died, a port that went
// down), which is this rank's failure (DeviceFailed), and its peers see
// it as failed.
func (e *Engine) blameLink(l *Link, err error) {
	if cerr := l.conn.Err(); cerr != nil && errors.Is(cerr, rdma.ErrDeviceFailed) && !errors.Is(err, rdma.ErrDeviceFailed) {
		err = cerr // a post's error, say, that does not tell
	}
	if errors.Is(err, ErrDeviceFailed) || errors.Is(err, rdma.ErrDeviceFailed) {
		e.DeviceFailed(err)
		return
	}
	e.Abort(l.Peer, fmt.Errorf("%w: %w", ErrPeerFailed, err))
}

// Close says bye to every peer, stops the progress goroutines and closes
// the connections and the links' memory. It does not close the devices.
func (e *Engine) Close() error { return e.CloseContext(context.Background()) }

// CloseContext is Close whose wait for the byes to go out also ends with ctx.
func (e *Engine) CloseContext(ctx context.Context) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	e.mu.Unlock()
	// Stop a running operation (it returns at its next wakeup) and wait for
	// it: Run uses the links' memory, which Close frees.
	failedBefore := e.Err()
	e.fail(&PeerError{Rank: e.Rank, Err: ErrClosed}, 0)
	e.runMu.Lock()
	defer e.runMu.Unlock()
	for _, d := range e.devs {
		d.unwatchEngine(e) // it runs no more
	}
	// A rank that failed before closing passes the failure on ahead of its
	// bye (in order on each link), so that a peer still waiting on this
	// rank blames the culprit, not this rank's departure.
	var pe *PeerError
	if errors.As(failedBefore, &pe) && pe.Rank != e.Rank {
		code, text := e.noticeOf(pe.Rank, pe.Err)
		for i := range e.links {
			l := e.links[i].Load()
			if l != nil && !l.closed.Load() && !l.broken.Load() {
				l.sendAbort(pe.Rank, code, text, e.note())
			}
		}
	}
	// Say bye on every link and wait (briefly) until the byes have gone
	// out: an abort notice posted before must reach the peers before the
	// connections close, or they would blame this rank instead.
	dead := -1 // a peer known dead: its bye would only wait out the deadline
	if pe != nil && errors.Is(pe.Err, ErrPeerFailed) {
		dead = pe.Rank
	}
	var sent []*Link
	for i := range e.links {
		l := e.links[i].Load()
		if l == nil || l.Peer == dead || l.broken.Load() || l.conn.Err() != nil {
			continue
		}
		// Credits first: a peer that sees the bye takes the count as final.
		if l.consumed != l.creditsSent {
			l.creditsSent = l.consumed
			l.sendCtrl(ctrlCredit, 0, l.consumed) // best effort
		}
		if l.sendCtrl(ctrlBye, 0, 0) == nil {
			sent = append(sent, l)
		}
	}
	// One deadline for all byes; this goroutine polls for their
	// completions (a bye to a peer that already closed never completes).
	grace, stop := context.WithTimeout(ctx, 500*time.Millisecond)
	for _, l := range sent {
		for !e.byeDone(l) && grace.Err() == nil {
			e.pollOrSleep(grace)
		}
	}
	stop()
	var first error
	for i := range e.links {
		l := e.links[i].Load()
		if l != nil {
			if err := l.conn.Close(); err != nil && first == nil {
				first = err
			}
		}
	}
	// Nothing touches the links' memory once they are out of dispatch.
	for i := range e.links {
		l := e.links[i].Load()
		if l != nil {
			l.dev.removeLink(l)
			l.free()
		}
	}
	return first
}

// byeDone reports whether l's bye has completed or can no longer.
func (e *Engine) byeDone(l *Link) bool {
	select {
	case <-l.byeSent:
		return true
	case <-l.sendOut:
		return true
	default:
		return l.broken.Load()
	}
}

// pollOrSleep polls the devices and, if nothing came, sleeps until a
// completion is dispatched to this engine or ctx ends (outside Run).
func (e *Engine) pollOrSleep(ctx context.Context) {
	if e.poll() > 0 {
		return
	}
	e.sleeping.Store(true)
	raceFence()
	for _, d := range e.devs {
		d.CQ.Arm()
	}
	if e.poll() == 0 {
		select {
		case <-e.wake:
		case <-ctx.Done():
		}
	}
	e.sleeping.Store(false)
}

// note is the from of the engine's failure (abort).
func (e *Engine) note() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.from
}
