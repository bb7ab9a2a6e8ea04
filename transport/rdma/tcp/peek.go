package tcp

import "net"

// peerGone reports whether the peer has closed or reset the socket even
// though unread bytes may precede the end. The reader asks while it holds
// the stream in a receiver-not-ready wait, when it cannot read the EOF.
func (c *conn) peerGone() bool {
	tc, ok := c.nc.(*net.TCPConn)
	if !ok {
		return false
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return true
	}
	gone := false
	if err := rc.Control(func(fd uintptr) { gone = hungUp(fd) }); err != nil {
		return true
	}
	return gone
}
