package bootstrap

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// Traffic counts what one node's gossip sent and received on the wire:
// UDP packets (memberlist packs several gossip messages into one), TCP
// streams (joins, push/pull syncs, fallback probes) and their bytes,
// encryption included.
type Traffic struct {
	PacketsSent, PacketsRecv uint64
	PacketBytesSent          uint64
	PacketBytesRecv          uint64
	StreamsOpened            uint64 // dialled by this node
	StreamsAccepted          uint64
	StreamBytesSent          uint64
	StreamBytesRecv          uint64
	PacketsLost              uint64 // sent but not delivered (Config.Network only: a full queue or nobody there)
}

// Messages is packets and streams, both directions.
func (t Traffic) Messages() uint64 {
	return t.PacketsSent + t.PacketsRecv + t.StreamsOpened + t.StreamsAccepted
}

// Bytes is every byte sent and received.
func (t Traffic) Bytes() uint64 {
	return t.PacketBytesSent + t.PacketBytesRecv + t.StreamBytesSent + t.StreamBytesRecv
}

// Add returns the sum of t and u.
func (t Traffic) Add(u Traffic) Traffic {
	return Traffic{t.PacketsSent + u.PacketsSent, t.PacketsRecv + u.PacketsRecv,
		t.PacketBytesSent + u.PacketBytesSent, t.PacketBytesRecv + u.PacketBytesRecv,
		t.StreamsOpened + u.StreamsOpened, t.StreamsAccepted + u.StreamsAccepted,
		t.StreamBytesSent + u.StreamBytesSent, t.StreamBytesRecv + u.StreamBytesRecv,
		t.PacketsLost + u.PacketsLost}
}

// Traffic returns the node's gossip traffic so far (zero unless
// Config.CountTraffic or Config.Network).
func (n *Node) Traffic() Traffic {
	if n.traffic == nil {
		return Traffic{}
	}
	c := n.traffic
	return Traffic{c.pktOut.Load(), c.pktIn.Load(), c.pktBytesOut.Load(), c.pktBytesIn.Load(),
		c.dialled.Load(), c.accepted.Load(), c.streamOut.Load(), c.streamIn.Load(), c.pktLost.Load()}
}

// counters are a transport's traffic counts, updated as it sends and
// receives.
type counters struct {
	pktOut, pktIn, pktBytesOut, pktBytesIn atomic.Uint64
	dialled, accepted, streamOut, streamIn atomic.Uint64
	pktLost                                atomic.Uint64
}

// countingTransport wraps memberlist's NetTransport and counts its traffic.
// It forwards received packets and streams through its own channels: one
// goroutine each, ended by Shutdown.
type countingTransport struct {
	*memberlist.NetTransport
	packets chan *memberlist.Packet
	streams chan net.Conn
	stop    chan struct{}
	wg      sync.WaitGroup
	*counters
}

var _ memberlist.NodeAwareTransport = (*countingTransport)(nil)

// newCountingTransport binds a NetTransport as memberlist.Create would
// (retrying a port-0 bind that races another process) and wraps it.
func newCountingTransport(mc *memberlist.Config) (*countingTransport, error) {
	nc := &memberlist.NetTransportConfig{BindAddrs: []string{mc.BindAddr}, BindPort: mc.BindPort, Logger: mc.Logger}
	var nt *memberlist.NetTransport
	var err error
	for range 10 {
		if nt, err = memberlist.NewNetTransport(nc); err == nil || mc.BindPort != 0 ||
			!strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("gossip transport: %w", err)
	}
	if mc.BindPort == 0 {
		mc.BindPort = nt.GetAutoBindPort()
		mc.AdvertisePort = mc.BindPort
	}
	t := &countingTransport{NetTransport: nt, packets: make(chan *memberlist.Packet),
		streams: make(chan net.Conn), stop: make(chan struct{}), counters: &counters{}}
	t.wg.Add(2)
	go func() {
		defer t.wg.Done()
		for {
			select {
			case p := <-nt.PacketCh():
				t.pktIn.Add(1)
				t.pktBytesIn.Add(uint64(len(p.Buf)))
				select {
				case t.packets <- p:
				case <-t.stop:
					return
				}
			case <-t.stop:
				return
			}
		}
	}()
	go func() {
		defer t.wg.Done()
		for {
			select {
			case c := <-nt.StreamCh():
				t.accepted.Add(1)
				select {
				case t.streams <- &countingConn{Conn: c, t: t}:
				case <-t.stop:
					c.Close()
					return
				}
			case <-t.stop:
				return
			}
		}
	}()
	return t, nil
}

func (t *countingTransport) PacketCh() <-chan *memberlist.Packet { return t.packets }
func (t *countingTransport) StreamCh() <-chan net.Conn           { return t.streams }

func (t *countingTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	t.pktOut.Add(1)
	t.pktBytesOut.Add(uint64(len(b)))
	return t.NetTransport.WriteTo(b, addr)
}

func (t *countingTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	t.pktOut.Add(1)
	t.pktBytesOut.Add(uint64(len(b)))
	return t.NetTransport.WriteToAddress(b, a)
}

func (t *countingTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

func (t *countingTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	c, err := t.NetTransport.DialAddressTimeout(a, timeout)
	if err != nil {
		return nil, err
	}
	t.dialled.Add(1)
	return &countingConn{Conn: c, t: t}, nil
}

func (t *countingTransport) Shutdown() error {
	err := t.NetTransport.Shutdown()
	close(t.stop)
	t.wg.Wait()
	return err
}

type countingConn struct {
	net.Conn
	t *countingTransport
}

func (c *countingConn) Read(b []byte) (int, error) {
	k, err := c.Conn.Read(b)
	c.t.streamIn.Add(uint64(k))
	return k, err
}

func (c *countingConn) Write(b []byte) (int, error) {
	k, err := c.Conn.Write(b)
	c.t.streamOut.Add(uint64(k))
	return k, err
}
