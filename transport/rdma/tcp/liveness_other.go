//go:build !linux

package tcp

import "net"

// setLiveness: keepalive only (TCP_USER_TIMEOUT is Linux's).
func setLiveness(nc *net.TCPConn) { nc.SetKeepAlive(true) }
