package tcp

import (
	"fmt"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

var errPeerClosed = fmt.Errorf("peer closed the connection: %w", rdma.ErrClosed)

// peerError names the peer an error came from.
type peerError struct {
	peer string
	err  error
}

func (e *peerError) Error() string { return "peer " + e.peer + ": " + e.err.Error() }
func (e *peerError) Unwrap() error { return e.err }
