package tcp

import (
	"net"
	"time"
)

var longAgo = time.Unix(1, 0)

// tuneSocket sets what helps a bulk stream. SO_SNDBUF/SO_RCVBUF are left
// to autotuning: on Linux a fixed size is capped by net.core.[rw]mem_max
// and turns autotuning off, and 4 MiB buffers measured no better than
// autotuning on loopback at 1 and 16 MiB writes.
func tuneSocket(nc *net.TCPConn) {
	nc.SetNoDelay(true) // frames are whole requests: never wait for more
	setLiveness(nc)     // keepalive (liveness_linux.go)
}
