package tcp

import (
	"fmt"
	"net"
	"time"

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

var (
	noDeadline time.Time
	longAgo    = time.Unix(1, 0)
)

// socketBuffer is the SO_SNDBUF/SO_RCVBUF asked for. Linux caps it at
// net.core.[rw]mem_max and fixing it turns off autotuning, so it is only
// set when it is larger than what autotuning would start from.
const socketBuffer = 0

func tuneSocket(nc *net.TCPConn) {
	if socketBuffer > 0 {
		nc.SetReadBuffer(socketBuffer)
		nc.SetWriteBuffer(socketBuffer)
	}
}
