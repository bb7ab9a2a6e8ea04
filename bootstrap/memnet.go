package bootstrap

// An in-process network for gossip.
//
// n memberlist nodes in one process over real UDP spend their CPU on the
// kernel and on memberlist's NetTransport, which reads every packet into a
// fresh 64 KiB buffer (a ~1.4 KB packet): at 1,000 members a third of the
// process's time was allocation and a fifth clearing memory. A MemNetwork
// carries the same packets and streams through channels: a packet is
// copied into a buffer of its own size and queued at the receiver (and
// dropped, as UDP drops it, when the receiver's queue is full); a stream is
// a net.Pipe. memberlist runs unchanged above it: the same encryption,
// probes, gossip and push/pull. It is for tests and measurements of many
// nodes in one process (Config.Network); jobs use the real network.

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/memberlist"
)

// memQueue is how many packets a node's receive queue holds before further
// packets to it are dropped: about a default Linux UDP receive buffer
// (212 KiB) of 1.4 KB gossip packets, rounded up.
var memQueue = 256

// MemNetwork is an in-process network for gossip nodes. Nodes whose
// Config.Network is the same MemNetwork reach each other without the
// kernel; their addresses (127.0.0.1 and a port the network assigns) are
// names in the network, not sockets. Its methods are safe for concurrent
// use.
type MemNetwork struct {
	mu     sync.RWMutex // guards byAddr, port
	byAddr map[string]*memTransport
	port   int
}

// NewMemNetwork returns an empty network.
func NewMemNetwork() *MemNetwork {
	return &MemNetwork{byAddr: make(map[string]*memTransport)}
}

// attach creates the transport of a node at port (0: the next free one).
func (nw *MemNetwork) attach(port int) (*memTransport, error) {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	if port == 0 {
		for {
			nw.port = nw.port%65535 + 1
			if nw.byAddr[memAddr(nw.port)] == nil {
				break
			}
			if len(nw.byAddr) >= 65535 {
				return nil, fmt.Errorf("memory network: all 65,535 ports in use")
			}
		}
		port = nw.port
	}
	addr := memAddr(port)
	if nw.byAddr[addr] != nil {
		return nil, fmt.Errorf("memory network: %s: %w", addr, syscall.EADDRINUSE)
	}
	t := &memTransport{nw: nw, port: port, addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port},
		packets: make(chan *memberlist.Packet, memQueue), streams: make(chan net.Conn),
		done: make(chan struct{}), counters: &counters{}}
	nw.byAddr[addr] = t
	return t, nil
}

func (nw *MemNetwork) lookup(addr string) *memTransport {
	nw.mu.RLock()
	defer nw.mu.RUnlock()
	return nw.byAddr[addr]
}

func (nw *MemNetwork) detach(t *memTransport) {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	if nw.byAddr[t.addr.String()] == t {
		delete(nw.byAddr, t.addr.String())
	}
}

func memAddr(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

// Cut cuts the node at addr off the network (cut true) or joins it again,
// as a broken link would: packets to and from it are lost and dials to and
// from it time out (one with no timeout waits until the dialling node
// shuts down). Streams already open stay open. Its address stays
// taken, so a probe of it finds no evidence of death (evidence.go), as
// for a host that does not answer.
func (nw *MemNetwork) Cut(addr string, cut bool) {
	if t := nw.lookup(addr); t != nil {
		t.cut.Store(cut)
	}
}

// memTransport is one node's attachment to a MemNetwork. Senders write
// into its packets and streams channels; memberlist's listeners read
// them. done is closed by Shutdown, after which nothing is delivered.
type memTransport struct {
	nw      *MemNetwork
	port    int
	addr    *net.TCPAddr
	packets chan *memberlist.Packet
	streams chan net.Conn
	done    chan struct{}
	once    sync.Once
	cut     atomic.Bool // Cut
	*counters
}

var _ memberlist.NodeAwareTransport = (*memTransport)(nil)

func (t *memTransport) FinalAdvertiseAddr(string, int) (net.IP, int, error) {
	return t.addr.IP, t.port, nil
}

func (t *memTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

// WriteToAddress copies b and queues it at the node at a.Addr; like UDP it
// succeeds when nobody listens there or the receiver's queue is full, and
// the packet is lost.
func (t *memTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	now := time.Now()
	select {
	case <-t.done:
		return now, net.ErrClosed
	default:
	}
	t.pktOut.Add(1)
	t.pktBytesOut.Add(uint64(len(b)))
	dst := t.nw.lookup(a.Addr)
	if dst == nil || t.cut.Load() || dst.cut.Load() {
		t.pktLost.Add(1)
		return now, nil
	}
	p := &memberlist.Packet{Buf: append([]byte(nil), b...), From: t.addr, Timestamp: now}
	select {
	case <-dst.done:
		t.pktLost.Add(1)
	case dst.packets <- p:
		dst.pktIn.Add(1)
		dst.pktBytesIn.Add(uint64(len(b)))
	default:
		t.pktLost.Add(1)
	}
	return now, nil
}

func (t *memTransport) PacketCh() <-chan *memberlist.Packet { return t.packets }
func (t *memTransport) StreamCh() <-chan net.Conn           { return t.streams }

func (t *memTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

// DialAddressTimeout connects a net.Pipe to the node at a.Addr: refused
// when nobody is there, a timeout when its listener does not take the
// connection in time.
func (t *memTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	dst := t.nw.lookup(a.Addr)
	if dst == nil {
		return nil, &net.OpError{Op: "dial", Net: "mem", Addr: memName(a.Addr), Err: syscall.ECONNREFUSED}
	}
	var timer <-chan time.Time
	if timeout > 0 {
		tm := time.NewTimer(timeout)
		defer tm.Stop()
		timer = tm.C
	}
	if t.cut.Load() || dst.cut.Load() {
		err := error(errMemTimeout)
		select {
		case <-timer:
		case <-t.done:
			err = net.ErrClosed
		}
		return nil, &net.OpError{Op: "dial", Net: "mem", Addr: dst.addr, Err: err}
	}
	local, remote := net.Pipe()
	var err error
	select {
	case dst.streams <- &memConn{Conn: remote, c: dst.counters, local: dst.addr, remote: t.addr}:
		dst.accepted.Add(1)
		t.dialled.Add(1)
		return &memConn{Conn: local, c: t.counters, local: t.addr, remote: dst.addr}, nil
	case <-dst.done:
		err = syscall.ECONNREFUSED
	case <-t.done:
		err = net.ErrClosed
	case <-timer:
		err = errMemTimeout
	}
	local.Close()
	remote.Close()
	return nil, &net.OpError{Op: "dial", Net: "mem", Addr: dst.addr, Err: err}
}

var errMemTimeout = memTimeout{}

// memTimeout is a dial that timed out; it is a net.Error, as the kernel's is.
type memTimeout struct{}

func (memTimeout) Error() string   { return "i/o timeout" }
func (memTimeout) Timeout() bool   { return true }
func (memTimeout) Temporary() bool { return true }

// IngestPacket and IngestStream let a wrapping transport hand memberlist a
// packet read from a stream, or a stream, as NodeAwareTransport requires.
func (t *memTransport) IngestPacket(conn net.Conn, addr net.Addr, now time.Time, shouldClose bool) error {
	if shouldClose {
		defer conn.Close()
	}
	b, err := io.ReadAll(conn)
	if err != nil {
		return fmt.Errorf("memory network: read packet: %w", err)
	}
	if len(b) == 0 {
		return errors.New("memory network: empty packet")
	}
	select {
	case t.packets <- &memberlist.Packet{Buf: b, From: addr, Timestamp: now}:
		return nil
	case <-t.done:
		return net.ErrClosed
	}
}

func (t *memTransport) IngestStream(conn net.Conn) error {
	select {
	case t.streams <- conn:
		return nil
	case <-t.done:
		return net.ErrClosed
	}
}

// Shutdown leaves the network: packets to this node are lost and dials
// are refused from now on.
func (t *memTransport) Shutdown() error {
	t.once.Do(func() {
		close(t.done)
		t.nw.detach(t)
	})
	return nil
}

// memConn is one end of a stream: it counts bytes and names both ends
// with their network addresses.
type memConn struct {
	net.Conn
	c             *counters
	local, remote net.Addr
}

func (c *memConn) LocalAddr() net.Addr  { return c.local }
func (c *memConn) RemoteAddr() net.Addr { return c.remote }

func (c *memConn) Read(b []byte) (int, error) {
	k, err := c.Conn.Read(b)
	c.c.streamIn.Add(uint64(k))
	return k, err
}

func (c *memConn) Write(b []byte) (int, error) {
	k, err := c.Conn.Write(b)
	c.c.streamOut.Add(uint64(k))
	return k, err
}

// memName is an address that no node holds.
type memName string

func (a memName) Network() string { return "mem" }
func (a memName) String() string  { return string(a) }

// probeRefused is the evidence probe (evidence.go) over the node's network: on
// a MemNetwork a node is gone once nobody holds its address.
func (n *Node) probeRefused(addr string) bool {
	if nw := n.cfg.Network; nw != nil {
		return nw.lookup(addr) == nil
	}
	return refused(addr)
}
