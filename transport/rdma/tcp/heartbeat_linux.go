package tcp

import (
	"time"

	"golang.org/x/sys/unix"
)

const heartbeatSupported = true

// linkState reads the socket's TCP_INFO.
func (c *conn) linkState() (linkState, bool) {
	var info *unix.TCPInfo
	var err error
	if cerr := c.rc.Control(func(fd uintptr) {
		info, err = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); cerr != nil || err != nil {
		return linkState{}, false
	}
	return linkState{
		unacked:  info.Unacked,
		sinceAck: time.Duration(info.Last_ack_recv) * time.Millisecond,
		sinceTx:  time.Duration(info.Last_data_sent) * time.Millisecond,
		srtt:     time.Duration(info.Rtt) * time.Microsecond,
		rttvar:   time.Duration(info.Rttvar) * time.Microsecond,
	}, true
}
