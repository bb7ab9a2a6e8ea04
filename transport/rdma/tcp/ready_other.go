//go:build !linux

package tcp

// readySet is epoll's readiness on Linux; elsewhere every Poll reads every
// socket.
type readySet struct{}

func (rs *readySet) init()                            {}
func (rs *readySet) add(c *conn)                      {}
func (rs *readySet) remove(c *conn)                   {}
func (rs *readySet) close()                           {}
func (rs *readySet) progressReady(conns []*conn) bool { return false }
