package engine

import (
	"errors"
	"fmt"
	"strings"
)

// Errors of the executor; package comm re-exports them.
var (
	ErrAborted    = errors.New("communicator aborted")
	ErrMismatch   = errors.New("ranks disagree on the collective call (operation, count, type, op or root, or a message's tag or length)")
	ErrInvalid    = errors.New("invalid argument")
	ErrTimeout    = errors.New("operation timed out")
	ErrPeerFailed = errors.New("peer failed")
	ErrPeerClosed = errors.New("peer closed the communicator")
	ErrProtocol   = errors.New("protocol violation")
	ErrClosed     = errors.New("communicator closed")
	// ErrDeviceFailed: this rank's own device failed (its completion
	// queue, Device.Err; or a connection the transport failed for it,
	// rdma.ErrDeviceFailed), not a peer. Its peers see the rank as failed:
	// an abort notice carries it as ErrPeerFailed (noticeOf).
	// (Its words name no rank: they follow the rank's number, in this
	// rank's error and in its peers'.)
	ErrDeviceFailed = errors.New("the rank's own device failed")
)

// PeerError attributes Err to Rank.
type PeerError struct {
	Rank int
	Err  error
}

func (e *PeerError) Error() string { return fmt.Sprintf("rank %d: %v", e.Rank, e.Err) }
func (e *PeerError) Unwrap() error { return e.Err }

// givenReason is another rank's failure in its own words, which its abort
// notice brought (ctrlAbortText), of the kind its reason code says.
type givenReason struct {
	kind error
	text string
}

func (g *givenReason) Error() string {
	if strings.HasPrefix(g.text, g.kind.Error()) {
		return g.text
	}
	return g.kind.Error() + ": " + g.text
}

func (g *givenReason) Unwrap() error { return g.kind }

// Abort reasons carried by abort notices.
const (
	reasonAborted uint32 = iota + 1
	reasonMismatch
	reasonInvalid
	reasonTimeout
	reasonPeerFailed
	reasonPeerClosed
	reasonProtocol
)

var reasons = []error{nil, ErrAborted, ErrMismatch, ErrInvalid, ErrTimeout, ErrPeerFailed, ErrPeerClosed, ErrProtocol}

// reasonOf maps an error to the code sent in an abort notice.
func reasonOf(err error) uint32 {
	for i := len(reasons) - 1; i > 0; i-- {
		if errors.Is(err, reasons[i]) {
			return uint32(i)
		}
	}
	return reasonAborted
}

func reasonErr(code uint32) error {
	if code > 0 && int(code) < len(reasons) {
		return reasons[code]
	}
	return ErrAborted
}
