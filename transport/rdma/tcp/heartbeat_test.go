package tcp

import (
	"net"
	"testing"
	"time"
)

// A link is cut after heartbeatSilent without acknowledgements, or later
// where its round trips say its queues hold data long.
func TestSilentAfter(t *testing.T) {
	for _, tc := range []struct {
		srtt, rttvar, want time.Duration
	}{
		{50 * time.Microsecond, 20 * time.Microsecond, heartbeatSilent},  // loopback, veth
		{100 * time.Millisecond, 25 * time.Millisecond, heartbeatSilent}, // 4 × 200 ms = 800 ms
		{300 * time.Millisecond, 50 * time.Millisecond, 2 * time.Second}, // a full shaped queue
	} {
		if got := silentAfter(linkState{srtt: tc.srtt, rttvar: tc.rttvar}); got != tc.want {
			t.Errorf("silentAfter(srtt %v, rttvar %v) = %v, want %v", tc.srtt, tc.rttvar, got, tc.want)
		}
	}
}

// A link is silent when nothing was acknowledged for silentAfter with data
// in flight, or sent since; a loopback connection is never cut for it
// (CI's conformance child: 2.4 s without an acknowledgement on a starved
// host, 2 segments in flight).
func TestSilentNotCutOnLoopback(t *testing.T) {
	starved := linkState{sinceAck: 2388 * time.Millisecond, sinceTx: 10 * time.Millisecond, unacked: 2, srtt: 50 * time.Microsecond}
	for _, tc := range []struct {
		st   linkState
		want bool
	}{
		{starved, true},
		{linkState{sinceAck: 2 * time.Second, sinceTx: 3 * time.Second}, false},                       // idle: nothing sent since the last ack
		{linkState{sinceAck: 2 * time.Second, sinceTx: time.Second}, true},                            // sent well after it, nothing leaves
		{linkState{sinceAck: 900 * time.Millisecond, unacked: 5, srtt: 50 * time.Microsecond}, false}, // not yet
	} {
		if got := silent(tc.st); got != tc.want {
			t.Errorf("silent(%+v) = %v, want %v", tc.st, got, tc.want)
		}
	}
	// A peer at this host's own address is reached through lo as well:
	// local ranks over tcp connect at the host's address.
	local := &net.TCPAddr{IP: net.IPv4(10, 9, 8, 7), Port: 2}
	for _, tc := range []struct {
		peer string
		want bool
	}{{"127.0.0.1:1", true}, {"127.3.0.9:1", true}, {"[::1]:1", true}, {"10.9.8.7:1", true}, {"10.0.0.2:1", false}, {"[fe80::1]:1", false}} {
		a, err := net.ResolveTCPAddr("tcp", tc.peer)
		if err != nil {
			t.Fatal(err)
		}
		c := &conn{nc: fakeRemote{local: local, remote: a}}
		if got := c.loopback(); got != tc.want {
			t.Errorf("loopback with peer %s = %v, want %v", tc.peer, got, tc.want)
		}
	}
	// And at any address of this host's interfaces.
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range addrs {
		n, ok := x.(*net.IPNet)
		if !ok || n.IP.IsLoopback() {
			continue
		}
		c := &conn{nc: fakeRemote{local: local, remote: &net.TCPAddr{IP: n.IP, Port: 1}}}
		if !c.loopback() {
			t.Errorf("loopback with peer %s, an address of this host, = false", n.IP)
		}
	}
}

// fakeRemote is a net.Conn that only knows its addresses.
type fakeRemote struct {
	net.Conn
	local, remote net.Addr
}

func (f fakeRemote) LocalAddr() net.Addr  { return f.local }
func (f fakeRemote) RemoteAddr() net.Addr { return f.remote }
