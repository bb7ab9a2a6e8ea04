package comm

import (
	"errors"
	"fmt"

	"github.com/gorun-hpc/gorun/internal/engine"
	"github.com/gorun-hpc/gorun/internal/kernels"
)

// Sentinel errors; a *RankError wraps one of them (or a transport error).
var (
	ErrAborted    = engine.ErrAborted    // Abort was called (on this or another rank)
	ErrMismatch   = engine.ErrMismatch   // ranks disagree on collective, count, type, op or root, or a message's tag or length
	ErrInvalid    = engine.ErrInvalid    // bad lengths, root or peer
	ErrTimeout    = engine.ErrTimeout    // the communicator's timeout elapsed
	ErrPeerFailed = engine.ErrPeerFailed // a peer's connection failed or the peer died
	ErrPeerClosed = engine.ErrPeerClosed // a peer closed its communicator
	ErrClosed     = engine.ErrClosed     // Close was called
	// ErrDeviceFailed: this rank's own device failed (a verbs CQ
	// overrun, a device that died, a port down for 2 s), not a peer. The
	// error names this rank and the device; this rank cannot go on (its
	// Shrink fails with it too), and its peers see it as ErrPeerFailed
	// naming this rank.
	ErrDeviceFailed = engine.ErrDeviceFailed
)

// RankError is the error of a failed operation: Op is the operation
// ("allreduce", ...), Rank the rank the failure is attributed to (the peer
// that failed, disagreed or aborted; this rank for local argument errors;
// -1 if unknown). errors.Is works on Err.
type RankError struct {
	Rank int
	Op   string
	Err  error
}

func (e *RankError) Error() string {
	if e.Rank < 0 {
		return fmt.Sprintf("gorun: %s: %v", e.Op, e.Err)
	}
	return fmt.Sprintf("gorun: %s: rank %d: %v", e.Op, e.Rank, e.Err)
}

func (e *RankError) Unwrap() error { return e.Err }

// rankErr converts an engine error into a *RankError for op.
func rankErr(op string, err error) error {
	if err == nil {
		return nil
	}
	var re *RankError
	if errors.As(err, &re) {
		if re.Op == op {
			return re
		}
		return &RankError{Rank: re.Rank, Op: op, Err: re.Err}
	}
	var pe *engine.PeerError
	if errors.As(err, &pe) {
		return &RankError{Rank: pe.Rank, Op: op, Err: pe.Err}
	}
	return &RankError{Rank: -1, Op: op, Err: err}
}

// named is err with the rank of its *RankError as c's texts call it
// (engine.NameRanks): a hierarchical sub-communicator's error names the
// rank of the communicator the user called on, as its text does.
func (c *Comm) named(err error) error {
	var re *RankError
	if c == nil || err == nil || !errors.As(err, &re) || re.Rank < 0 {
		return err
	}
	if r := c.eng.Name(re.Rank); r != re.Rank {
		return &RankError{Rank: r, Op: re.Op, Err: re.Err}
	}
	return err
}

// failed ends every operation that failed (exec, execP2P's group), one
// that ran or one that failed before it could (the communicator had failed
// already: a survivor that learns of a death between two operations fails
// the second one so): it counts the failure (metrics) and tells the
// launcher the rank it blames (blame). It returns err.
func (c *Comm) failed(err error) error {
	if err != nil {
		c.countFailure(err)
		c.blame(err)
	}
	return err
}

// blame tells the launcher that an operation failed because of another
// rank (one that failed, closed its communicator or aborted), so that gorun
// names that rank, not this one, when this rank then exits with an error.
func (c *Comm) blame(err error) {
	var pe *engine.PeerError
	if c.ctl == nil || !c.jobRanks || !errors.As(err, &pe) || pe.Rank < 0 || pe.Rank == c.rank {
		return
	}
	if errors.Is(err, ErrPeerFailed) || errors.Is(err, ErrPeerClosed) || errors.Is(err, ErrAborted) {
		c.ctl.Blame(pe.Rank)
	}
}

// badOp fails the operation on every rank for an op that element type dt
// does not have.
func (c *Comm) badOp(name string, op Op, dt DType) error {
	switch {
	case !opKnown(op):
		return c.invalid(name, "invalid op %d", uint8(op))
	case op.IntegerOnly():
		return c.invalid(name, "op %s is defined for integer types only, not %s", op, dt)
	case op == MinLoc || op == MaxLoc:
		return c.invalid(name, "op %s needs value-index pairs (AllReduceLoc, ReduceLoc), not %s", op, dt)
	}
	return c.invalid(name, "op %s is not defined for %s", op, dt)
}

// badPairOp fails the operation on every rank for an op other than MinLoc
// and MaxLoc on value-index pairs.
func (c *Comm) badPairOp(name string, op Op) error {
	if !opKnown(op) {
		return c.invalid(name, "invalid op %d on value-index pairs: want MinLoc or MaxLoc", uint8(op))
	}
	return c.invalid(name, "op %s on value-index pairs: want MinLoc or MaxLoc", op)
}

// opKnown says whether op is one of the reduction operators: one that some
// element type has (an Op converted from another number may be none).
func opKnown(op Op) bool {
	return op.Valid(kernels.Int64) || op.Valid(kernels.PairOf(kernels.Int64))
}
