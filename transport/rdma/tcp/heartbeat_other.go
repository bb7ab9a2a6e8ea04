//go:build !linux

package tcp

// Without TCP_INFO there is no heartbeat: keepalive only (liveness_other.go).
const heartbeatSupported = false

func (c *conn) linkState() (linkState, bool) { return linkState{}, false }
