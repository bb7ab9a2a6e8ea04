package faulty

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy is a TCP man-in-the-middle between dialers and Target, for faults
// on the wire. Offsets count the bytes of one connection in one direction
// (client to target, "forward"), from 1. Set the fields before the first
// connection; Partition may be toggled at any time.
type Proxy struct {
	Target string
	// CorruptAt flips the low bit of the forward byte at this offset (0: off).
	CorruptAt int64
	// CutAfter closes both sockets once this many forward bytes have passed (0: off).
	CutAfter int64
	// Delay is added before forwarding each chunk read (a slow link).
	Delay time.Duration

	ln          net.Listener
	partitioned atomic.Bool
	wg          sync.WaitGroup
	mu          sync.Mutex
	conns       []net.Conn
	Corrupted   atomic.Int64 // bytes corrupted so far
}

// Listen starts the proxy on addr (e.g. "127.0.0.1:0").
func (p *Proxy) Listen(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	p.ln = ln
	p.wg.Add(1)
	go p.accept()
	return nil
}

// Addr is where to dial instead of Target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Partition stops (true) or resumes (false) forwarding in both directions
// without closing anything: to both ends the peer looks frozen, as on a
// cut-off link.
func (p *Proxy) Partition(on bool) { p.partitioned.Store(on) }

// Close stops the proxy and closes every connection through it.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *Proxy) track(c net.Conn) {
	p.mu.Lock()
	p.conns = append(p.conns, c)
	p.mu.Unlock()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.Target)
		if err != nil {
			in.Close()
			continue
		}
		p.track(in)
		p.track(out)
		p.wg.Add(2)
		go p.pump(out, in, true)
		go p.pump(in, out, false)
	}
}

func (p *Proxy) pump(dst, src net.Conn, forward bool) {
	defer p.wg.Done()
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 64<<10)
	var off int64
	for {
		n, err := src.Read(buf)
		if n > 0 {
			for p.partitioned.Load() {
				time.Sleep(time.Millisecond)
			}
			if p.Delay > 0 {
				time.Sleep(p.Delay)
			}
			chunk := buf[:n]
			if forward {
				if c := p.CorruptAt; c > off && c <= off+int64(n) {
					chunk[c-off-1] ^= 1
					p.Corrupted.Add(1)
				}
				if p.CutAfter > 0 && off+int64(n) >= p.CutAfter {
					dst.Write(chunk[:p.CutAfter-off])
					return
				}
				off += int64(n)
			}
			if _, werr := dst.Write(chunk); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or a closed socket: the deferred closes pass it on
		}
	}
}
