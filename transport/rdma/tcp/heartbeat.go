package tcp

import (
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"
)

// Heartbeat: a silent peer is found within a few hundred ms of idle.
//
// Keepalive (liveness_linux.go) cuts a connection whose peer's host
// vanished, but it counts in seconds, and an idle connection sends nothing
// that could go unacknowledged. (TCP_USER_TIMEOUT is not used: it also
// aborts on a zero window, a peer that is alive but not reading.) So every
// heartbeatTick each connection reads its socket's TCP_INFO from the
// kernel (nothing is added to the per-message path):
//
//   - when it has sent nothing for heartbeatIdle, it sends a ping frame
//     (opPing, a header only; the peer drops it), so that an idle
//     connection always has something for the peer's kernel to
//     acknowledge;
//   - when nothing has been acknowledged by the peer's kernel for
//     silentAfter although data went out since (or is in flight),
//     the connection fails naming the peer.
//
// Only the peer's kernel must answer, not the peer process: a rank starved
// of CPU on a loaded host, or frozen, is not cut here (its kernel still
// acknowledges; the gossip detector and the witnesses judge processes).
// A link dropping everything is cut within silentAfter plus at most
// heartbeatIdle + heartbeatTick of going idle. A middlebox that
// acknowledges for the peer (a proxy) hides a silent peer from this check.
//
// A loopback connection (the peer at 127.0.0.0/8 or ::1, or at an address
// of this host: ranks on one host reach each other at the host's address,
// and Linux routes that through lo) is never cut for silence: no link can go dark there, a dead peer's kernel resets the
// connection and a frozen peer's still acknowledges, so only a starved
// kernel is late, and late is not dead. CI's race runs (2 CPUs, load 4 and
// more) saw 2.4 s without an acknowledgement on loopback: a 64 MiB read
// through a conformance child was cut in two CI runs of three, and in one
// of three runs here beside shm's tests.
const (
	heartbeatTick   = 100 * time.Millisecond
	heartbeatIdle   = 200 * time.Millisecond
	heartbeatSilent = time.Second // ≥ 3 retransmissions at the least RTO (200 ms); see silentAfter
)

// silentAfter is how long st's link may go without an acknowledgement:
// heartbeatSilent, or 4 retransmission timeouts of its smoothed round trip
// (RFC 6298, before back-off) on a link whose queues hold data long. 500
// ms cut live links: behind a full shaped queue, and on hosts so loaded
// that their kernels acknowledged 650-700 ms late (the namespace cluster
// at load 18-25).
func silentAfter(st linkState) time.Duration {
	return max(heartbeatSilent, 4*(st.srtt+4*st.rttvar))
}

var errSilent = errors.New("peer silent (no TCP acknowledgement)")

// silent reports whether st's link has gone silent: nothing acknowledged
// for silentAfter, and segments are in flight, or were sent well after the
// last acknowledgement (a link down here: the kernel keeps trying, nothing
// leaves).
func silent(st linkState) bool {
	return st.sinceAck >= silentAfter(st) && (st.unacked > 0 || st.sinceTx+heartbeatIdle < st.sinceAck)
}

// loopback reports whether c's peer is reached over loopback, where
// silence is never cut (see above): a loopback address, or one of this
// host's (the connection's own local address, or any interface's; asked
// only of a connection found silent).
func (c *conn) loopback() bool {
	if c.nc == nil {
		return false
	}
	a, ok := c.nc.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return false
	}
	if a.IP.IsLoopback() {
		return true
	}
	if l, ok := c.nc.LocalAddr().(*net.TCPAddr); ok && l.IP.Equal(a.IP) {
		return true
	}
	return hostAddr(a.IP)
}

// hostAddr reports whether ip is assigned to an interface of this host
// (in this network namespace).
func hostAddr(ip net.IP) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}

// linkState is what the heartbeat needs of TCP_INFO.
type linkState struct {
	unacked  uint32        // segments sent and not acknowledged
	sinceAck time.Duration // since the last acknowledgement arrived
	sinceTx  time.Duration // since data was last sent
	srtt     time.Duration // smoothed round trip
	rttvar   time.Duration // its variation
}

// heartbeatOff is for the tests that damage a byte at a counted offset
// of a stream: a ping sent first, by a connection idle for 200 ms on a
// loaded machine, would move it.
var heartbeatOff atomic.Bool

// startHeartbeat arms the connection's heartbeat: a timer, no goroutine
// between ticks; each tick arms the next until the connection fails or
// closes. Decoder tests, with no socket, have none.
func (c *conn) startHeartbeat() {
	if c.rc == nil || !heartbeatSupported || heartbeatOff.Load() {
		return
	}
	c.mu.Lock()
	c.hbTimer = time.AfterFunc(heartbeatTick, c.heartbeat)
	c.mu.Unlock()
}

// heartbeat is one tick: cut a silent link, ping an idle one, and re-arm.
func (c *conn) heartbeat() {
	if c.failing.Load() {
		return
	}
	if st, ok := c.linkState(); ok {
		switch {
		case silent(st) && !c.loopback():
			c.fail(fmt.Errorf("%w for %v with %d segments in flight", errSilent, st.sinceAck.Round(time.Millisecond), st.unacked))
			return
		case st.sinceTx >= heartbeatIdle:
			c.ping()
		}
	}
	c.mu.Lock()
	t := c.hbTimer
	c.mu.Unlock()
	t.Reset(heartbeatTick)
}

// ping queues an opPing frame unless something is queued or being
// written (the connection is not idle then) and writes it.
func (c *conn) ping() {
	c.mu.Lock()
	if c.state != stateOK || c.writing || len(c.resp) > 0 || c.tx < c.tail {
		c.mu.Unlock()
		return
	}
	c.resp = append(c.resp, response{h: header{op: opPing}})
	c.encodeResp(&c.resp[len(c.resp)-1])
	c.mu.Unlock()
	c.flush()
}
