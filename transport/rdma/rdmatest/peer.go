package rdmatest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// rbuf names a buffer on the peer.
type rbuf struct {
	ID   int
	Addr uint64
	RKey uint32
	Len  int
}

// seg is a range of a peer buffer, one entry of a peer-side list.
type seg struct {
	Buf      int
	Off, Len int
}

// postReq is a request the peer posts towards the test side. Count > 1
// posts it Count times with WRIDs WRID, WRID+1, ..., each repetition
// moving its local ranges and RAddr Stride bytes further.
type postReq struct {
	Op     string // "send", "write", "writeimm", "read"
	WRID   uint64
	Segs   []seg
	Flags  rdma.Flags
	RAddr  uint64
	RKey   uint32
	Imm    uint32
	Count  int
	Stride int
}

// peer is the far end of a case's connection. Its methods are called by
// one goroutine at a time.
type peer interface {
	// Listen opens the peer's device with cfg and listens on addr; the
	// test side dials the returned address while Accept waits.
	Listen(cfg rdma.Config, addr string) (string, error)
	Accept(timeout time.Duration) error
	// Buf allocates (Alloc) or, if heap, registers Go memory.
	Buf(n int, access rdma.Access, heap bool) (rbuf, error)
	Fill(b rbuf, off, n int, seed uint64) error
	Sum(b rbuf, off, n int) (uint32, error)
	Read(b rbuf, off, n int) ([]byte, error)
	Deregister(b rbuf) error
	PostRecv(wrid uint64, segs []seg) error
	// Post posts the requests in order, without waiting between them.
	Post(rs ...postReq) error
	RecvComp(timeout time.Duration) (rdma.WC, error)
	SendComp(timeout time.Duration) (rdma.WC, error)
	// RecvCompSum waits for a receive completion and checksums a range
	// of b as soon as it arrives.
	RecvCompSum(timeout time.Duration, b rbuf, off, n int) (rdma.WC, uint32, error)
	ConnErr() (error, error)
	CloseConn() error
	// Close ends the session: closes the conns and the device.
	Close() error

	// ListenMore listens on addr again, on the same device, for one more
	// connection, which AcceptMore accepts; AcceptMore returns its index
	// for On. (The conn Accept made is index 0.)
	ListenMore(addr string) (string, error)
	AcceptMore(timeout time.Duration) (int, error)
	// On returns the peer with conn k as its conn: PostRecv, Post, the
	// completions, ConnErr and CloseConn act on that conn; the rest is
	// shared with the peer On was called on.
	On(k int) peer
}

// localPeer serves the peer in this process. The child process serves
// its requests with one too.
type localPeer struct {
	*peerDev
	conn rdma.Conn // the one its conn methods act on
}

// peerDev is what the views On returns share: the device, buffers and
// every accepted conn.
type peerDev struct {
	provider string

	mu    sync.Mutex
	dev   rdma.Device
	ln    rdma.Listener
	more  rdma.Listener
	conns []rdma.Conn // conns[0] is Accept's
	bufs  map[int]*rdma.MR
	next  int
}

func newLocalPeer(provider string) *localPeer {
	return &localPeer{peerDev: &peerDev{provider: provider, bufs: map[int]*rdma.MR{}}}
}

// On implements peer; an unknown k gives a peer whose conn methods fail
// with ErrNotConnected.
func (p *localPeer) On(k int) peer { return p.on(k) }

func (p *localPeer) on(k int) *localPeer {
	p.mu.Lock()
	defer p.mu.Unlock()
	v := &localPeer{peerDev: p.peerDev}
	if k >= 0 && k < len(p.conns) {
		v.conn = p.conns[k]
	}
	return v
}

func (p *localPeer) ListenMore(addr string) (string, error) {
	if p.dev == nil {
		return "", rdma.ErrNotConnected
	}
	if p.more != nil {
		p.more.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ln, err := p.dev.Listen(ctx, addr)
	if err != nil {
		return "", err
	}
	p.more = ln
	return ln.Addr().String(), nil
}

func (p *localPeer) AcceptMore(timeout time.Duration) (int, error) {
	if p.more == nil {
		return 0, fmt.Errorf("accept before listen: %w", rdma.ErrInvalid)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := p.more.Accept(ctx)
	p.more.Close()
	p.more = nil
	if err != nil {
		return 0, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.conns) == 0 {
		p.conns = append(p.conns, nil) // index 0 stays Accept's
	}
	p.conns = append(p.conns, c)
	return len(p.conns) - 1, nil
}

func (p *localPeer) Listen(cfg rdma.Config, addr string) (string, error) {
	dev, err := rdma.OpenConfig(p.provider, cfg)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ln, err := dev.Listen(ctx, addr)
	if err != nil {
		dev.Close()
		return "", err
	}
	p.dev, p.ln = dev, ln
	return ln.Addr().String(), nil
}

func (p *localPeer) Accept(timeout time.Duration) error {
	if p.ln == nil {
		return fmt.Errorf("accept before listen: %w", rdma.ErrInvalid)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := p.ln.Accept(ctx)
	if err != nil {
		return err
	}
	p.conn = c
	p.mu.Lock()
	if len(p.conns) == 0 {
		p.conns = append(p.conns, c)
	} else {
		p.conns[0] = c
	}
	p.mu.Unlock()
	p.ln.Close()
	p.ln = nil
	return nil
}

func (p *localPeer) Buf(n int, access rdma.Access, heap bool) (rbuf, error) {
	if p.dev == nil {
		return rbuf{}, rdma.ErrNotConnected
	}
	var mr *rdma.MR
	var err error
	if heap {
		mr, err = p.dev.Register(make([]byte, n), access)
	} else {
		mr, err = p.dev.Alloc(n, access)
	}
	if err != nil {
		return rbuf{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.next++
	p.bufs[p.next] = mr
	return rbuf{ID: p.next, Addr: mr.Addr(), RKey: mr.RKey(), Len: mr.Len()}, nil
}

func (p *localPeer) mr(id int) (*rdma.MR, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	mr := p.bufs[id]
	if mr == nil {
		return nil, fmt.Errorf("peer buffer %d: %w", id, rdma.ErrInvalid)
	}
	return mr, nil
}

func (p *localPeer) rng(id, off, n int) ([]byte, *rdma.MR, error) {
	mr, err := p.mr(id)
	if err != nil {
		return nil, nil, err
	}
	if off < 0 || n < 0 || off+n > mr.Len() {
		return nil, nil, fmt.Errorf("peer buffer %d: range [%d,+%d) outside %d bytes: %w", id, off, n, mr.Len(), rdma.ErrInvalid)
	}
	return mr.Bytes()[off : off+n], mr, nil
}

func (p *localPeer) Fill(b rbuf, off, n int, seed uint64) error {
	buf, _, err := p.rng(b.ID, off, n)
	if err == nil {
		fill(buf, seed)
	}
	return err
}

func (p *localPeer) Sum(b rbuf, off, n int) (uint32, error) {
	buf, _, err := p.rng(b.ID, off, n)
	if err != nil {
		return 0, err
	}
	return checksum(buf), nil
}

func (p *localPeer) Read(b rbuf, off, n int) ([]byte, error) {
	buf, _, err := p.rng(b.ID, off, n)
	if err != nil {
		return nil, err
	}
	return append([]byte(nil), buf...), nil
}

func (p *localPeer) Deregister(b rbuf) error {
	mr, err := p.mr(b.ID)
	if err != nil {
		return err
	}
	if err := mr.Deregister(); err != nil {
		return err
	}
	p.mu.Lock()
	delete(p.bufs, b.ID)
	p.mu.Unlock()
	return nil
}

func (p *localPeer) sgl(segs []seg) ([]rdma.SGE, error) {
	sgl := make([]rdma.SGE, len(segs))
	for i, s := range segs {
		buf, mr, err := p.rng(s.Buf, s.Off, s.Len)
		if err != nil {
			return nil, err
		}
		sgl[i] = rdma.SGE{Buf: buf, MR: mr}
	}
	return sgl, nil
}

func (p *localPeer) PostRecv(wrid uint64, segs []seg) error {
	if p.conn == nil {
		return rdma.ErrNotConnected
	}
	sgl, err := p.sgl(segs)
	if err != nil {
		return err
	}
	if len(sgl) == 1 {
		return p.conn.PostRecv(wrid, sgl[0].Buf, sgl[0].MR)
	}
	return p.conn.PostRecvv(wrid, sgl)
}

func (p *localPeer) Post(rs ...postReq) error {
	if p.conn == nil {
		return rdma.ErrNotConnected
	}
	type prepared struct {
		r   postReq
		sgl [][]rdma.SGE
	}
	all := make([]prepared, len(rs))
	for k, r := range rs {
		all[k].r = r
		for i := 0; i < max(r.Count, 1); i++ {
			segs := make([]seg, len(r.Segs))
			for j, s := range r.Segs {
				segs[j] = seg{Buf: s.Buf, Off: s.Off + i*r.Stride, Len: s.Len}
			}
			sgl, err := p.sgl(segs)
			if err != nil {
				return err
			}
			all[k].sgl = append(all[k].sgl, sgl)
		}
	}
	for _, pr := range all {
		r := pr.r
		for i, sgl := range pr.sgl {
			raddr := r.RAddr + uint64(i*r.Stride)
			if err := postOne(p.conn, r.Op, r.WRID+uint64(i), sgl, r.Flags, raddr, r.RKey, r.Imm); err != nil {
				return err
			}
		}
	}
	return nil
}

// postOne posts one request of kind op, using the single-buffer call for
// a one-entry list and the vector call otherwise.
func postOne(c rdma.Conn, op string, wrid uint64, sgl []rdma.SGE, f rdma.Flags, raddr uint64, rkey, imm uint32) error {
	one := len(sgl) == 1
	var b []byte
	var mr *rdma.MR
	if one {
		b, mr = sgl[0].Buf, sgl[0].MR
	}
	switch {
	case op == "send" && one:
		return c.PostSend(wrid, b, mr, f)
	case op == "send":
		return c.PostSendv(wrid, sgl, f)
	case op == "write" && one:
		return c.PostWrite(wrid, b, mr, f, raddr, rkey)
	case op == "write":
		return c.PostWritev(wrid, sgl, f, raddr, rkey)
	case op == "writeimm" && one:
		return c.PostWriteImm(wrid, b, mr, f, raddr, rkey, imm)
	case op == "writeimm" && len(sgl) == 0: // zero bytes, no MR
		return c.PostWriteImm(wrid, nil, nil, f, raddr, rkey, imm)
	case op == "read" && one:
		return c.PostRead(wrid, b, mr, f, raddr, rkey)
	case op == "read":
		return c.PostReadv(wrid, sgl, f, raddr, rkey)
	}
	return fmt.Errorf("post %q with %d entries: %w", op, len(sgl), rdma.ErrInvalid)
}

func (p *localPeer) comp(timeout time.Duration, recv bool) (rdma.WC, error) {
	if p.conn == nil {
		return rdma.WC{}, rdma.ErrNotConnected
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if recv {
		return p.conn.GetRecvComp(ctx)
	}
	return p.conn.GetSendComp(ctx)
}

func (p *localPeer) RecvComp(timeout time.Duration) (rdma.WC, error) { return p.comp(timeout, true) }
func (p *localPeer) SendComp(timeout time.Duration) (rdma.WC, error) { return p.comp(timeout, false) }

func (p *localPeer) RecvCompSum(timeout time.Duration, b rbuf, off, n int) (rdma.WC, uint32, error) {
	buf, _, err := p.rng(b.ID, off, n)
	if err != nil {
		return rdma.WC{}, 0, err
	}
	wc, err := p.comp(timeout, true)
	if err != nil {
		return wc, 0, err
	}
	return wc, checksum(buf), nil
}

// ConnErr returns the conn's Err() and, second, a failure to ask.
func (p *localPeer) ConnErr() (error, error) {
	if p.conn == nil {
		return nil, rdma.ErrNotConnected
	}
	return p.conn.Err(), nil
}

func (p *localPeer) CloseConn() error {
	if p.conn == nil {
		return rdma.ErrNotConnected
	}
	return p.conn.Close()
}

func (p *localPeer) Close() error {
	for _, ln := range []rdma.Listener{p.ln, p.more} {
		if ln != nil {
			ln.Close()
		}
	}
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		if c != nil {
			c.Close()
		}
	}
	if p.conn != nil {
		p.conn.Close()
	}
	var err error
	if p.dev != nil {
		err = p.dev.Close()
	}
	p.mu.Lock()
	p.bufs = map[int]*rdma.MR{}
	p.mu.Unlock()
	p.dev, p.ln, p.more, p.conn = nil, nil, nil, nil
	return err
}
