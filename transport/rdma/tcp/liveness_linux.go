package tcp

import (
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// Liveness of a connection whose peer vanished without a FIN or RST (a
// host that lost power, a cut cable, a partition): the kernel finds out by
// itself, independently of the gossip failure detector.
//
//   - keepalive probes an idle connection after keepAliveIdle, every
//     keepAliveInterval (the kernel's units are seconds: 1 s is the least);
//   - TCP_USER_TIMEOUT aborts the connection when data it sent, or a
//     keepalive probe, stays unacknowledged for userTimeout. It overrides
//     keepalive's probe count. A peer that is alive but slow, or frozen,
//     still has its kernel acknowledge (a full receive window answers
//     zero-window probes), so only a peer whose host is unreachable is cut.
//
// A connection whose peer vanished then fails with ETIMEDOUT within
// keepAliveIdle + userTimeout of going idle (≈ 2.5 s), or within
// userTimeout of a write that is never acknowledged.
const (
	keepAliveIdle     = time.Second
	keepAliveInterval = time.Second
	keepAliveCount    = 2
	userTimeout       = 1500 * time.Millisecond
)

// setLiveness applies the settings above to nc, best effort.
func setLiveness(nc *net.TCPConn) {
	nc.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: keepAliveIdle, Interval: keepAliveInterval, Count: keepAliveCount})
	rc, err := nc.SyscallConn()
	if err != nil {
		return
	}
	rc.Control(func(fd uintptr) {
		unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(userTimeout/time.Millisecond))
	})
}
