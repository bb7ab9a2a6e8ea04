package tcp

import (
	"net"
	"time"
)

// Liveness of a connection whose peer vanished without a FIN or RST (a
// host that lost power, a cut cable, a partition): the kernel finds out by
// itself, independently of the gossip failure detector.
//
//   - keepalive probes an idle connection after keepAliveIdle, every
//     keepAliveInterval (the kernel's units are seconds: 1 s is the least),
//     and gives up after keepAliveCount unanswered probes;
//   - the heartbeat (heartbeat.go) cuts a connection whose sent data or
//     ping stays unacknowledged for 500 ms.
//
// TCP_USER_TIMEOUT is not set: since Linux 5.x it also aborts a
// connection whose peer keeps advertising a zero window for that long, that
// is, a peer that is alive and simply not reading (a rank computing, in a
// garbage collection, descheduled on a loaded host) while a large message
// waits for it. At 1.5 s it cut such connections (ETIMEDOUT), and CI's
// 64 MiB read through a busy child process failed with it. The heartbeat
// needs no such timeout: a zero window leaves nothing unacknowledged
// (TestZeroWindowNotCut).
const (
	keepAliveIdle     = time.Second
	keepAliveInterval = time.Second
	keepAliveCount    = 2
)

// setLiveness applies the settings above to nc, best effort.
func setLiveness(nc *net.TCPConn) {
	nc.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: keepAliveIdle, Interval: keepAliveInterval, Count: keepAliveCount})
}
