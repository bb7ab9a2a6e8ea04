//go:build linux && cgo && rdma

package verbs

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"crypto/hmac"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"unsafe"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// resolveTimeoutMS bounds rdma_resolve_addr and rdma_resolve_route; the
// context bounds the whole dial.
const resolveTimeoutMS = 5000

// cmChannel is an rdma_cm event channel whose events are read through the
// netpoller.
type cmChannel struct {
	ch *C.struct_rdma_event_channel
	w  *fdWaiter
	// gone, if set, is asked after a kick whether to give up: a dial's
	// channel (connect) ends with the device's death or close.
	gone func() error
}

func newCMChannel() (*cmChannel, error) {
	ch, err := C.rdma_create_event_channel()
	if ch == nil {
		return nil, errnoErr(err)
	}
	if r, err := C.gorun_set_nonblock(ch.fd); r != 0 {
		C.rdma_destroy_event_channel(ch)
		return nil, errnoErr(err)
	}
	w, err := newFDWaiter(int(ch.fd), "rdma_cm")
	if err != nil {
		C.rdma_destroy_event_channel(ch)
		return nil, err
	}
	return &cmChannel{ch: ch, w: w}, nil
}

type cmEvent struct {
	typ, status        int
	id                 *C.struct_rdma_cm_id
	respRes, initDepth int
	priv               []byte // private data (requests, replies, rejects)
}

// next returns the next event (already acked). Errors: ctx's, errKicked,
// os.ErrClosed.
func (c *cmChannel) next(ctx context.Context) (cmEvent, error) {
	var ev C.struct_gorun_cm_event
	var cerr error
	err := c.w.wait(ctx, func() bool {
		r, err := C.gorun_get_cm_event(c.ch, &ev)
		if r == 0 {
			return true
		}
		if err == syscall.EAGAIN || err == syscall.EINTR {
			return false
		}
		cerr = err
		return true
	})
	if err == nil {
		err = cerr
	}
	if err != nil {
		return cmEvent{}, err
	}
	return cmEvent{typ: int(ev.event), status: int(ev.status), id: ev.id,
		respRes: int(ev.responder_resources), initDepth: int(ev.initiator_depth),
		priv: C.GoBytes(unsafe.Pointer(&ev.priv[0]), ev.priv_len)}, nil
}

// expect waits for event want on id and maps the failure events onto errors.
func (c *cmChannel) expect(ctx context.Context, want int) (cmEvent, error) {
	for {
		ev, err := c.next(ctx)
		if errors.Is(err, errKicked) {
			if c.gone != nil {
				if err := c.gone(); err != nil {
					return ev, err
				}
			}
			continue
		}
		if err != nil {
			return ev, err
		}
		if ev.typ == want && ev.status == 0 {
			return ev, nil
		}
		switch ev.typ {
		case C.RDMA_CM_EVENT_REJECTED:
			return ev, fmt.Errorf("connection rejected (status %d): %w", ev.status, errRejected)
		case C.RDMA_CM_EVENT_UNREACHABLE, C.RDMA_CM_EVENT_ADDR_ERROR, C.RDMA_CM_EVENT_ROUTE_ERROR,
			C.RDMA_CM_EVENT_CONNECT_ERROR:
			return ev, fmt.Errorf("%s (status %d): %w", C.GoString(C.rdma_event_str(uint32(ev.typ))),
				ev.status, syscall.EHOSTUNREACH)
		case C.RDMA_CM_EVENT_DEVICE_REMOVAL, C.RDMA_CM_EVENT_DISCONNECTED:
			return ev, fmt.Errorf("%s: %w", C.GoString(C.rdma_event_str(uint32(ev.typ))), rdma.ErrClosed)
		}
		// anything else (e.g. a stale TIMEWAIT_EXIT) is ignored
	}
}

func (c *cmChannel) destroy() {
	c.w.close()
	C.rdma_destroy_event_channel(c.ch)
}

// splitAddr splits host:port. A loopback host becomes the device's own
// IPv4 address (its first RoCE GID): rdma_cm cannot resolve loopback on
// RoCE devices, and transport/rdma wants "127.0.0.1:0" to work everywhere.
func (d *device) splitAddr(addr string) (host, port string, err error) {
	host, port, err = net.SplitHostPort(addr)
	if err != nil {
		return "", "", fmt.Errorf("%w: %v", rdma.ErrInvalid, err)
	}
	if port == "" {
		port = "0"
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		d.loopOnce.Do(func() { d.loopIP = firstIPv4GID("/", d.name) })
		if d.loopIP != nil {
			host = d.loopIP.String()
		}
	}
	return host, port, nil
}

func addrString(id *C.struct_rdma_cm_id, peer bool) string {
	var buf [80]C.char
	p := C.int(0)
	if peer {
		p = 1
	}
	C.gorun_addr_string(id, p, &buf[0], C.int(len(buf)))
	return C.GoString(&buf[0])
}

// errRejected is a connect request the peer rejected (no listener, or an
// authentication step).
var errRejected = fmt.Errorf("rejected: %w", syscall.ECONNREFUSED)

// dial connects, authenticating with Config.Token when either side has one
// (see auth.go): a server with a token answers the first request with a
// challenge, and the second request carries the proof.
func (d *device) dial(ctx context.Context, addr string, init rdma.QPInit) (rdma.Conn, error) {
	op := "dial " + addr
	if err := d.refuse(op); err != nil {
		return nil, err
	}
	if err := d.checkInit(init); err != nil {
		return nil, opErr(op, err)
	}
	host, port, err := d.splitAddr(addr)
	if err != nil {
		return nil, opErr(op, err)
	}
	c, ev, err := d.connect(ctx, host, port, nil, init)
	if errors.Is(err, errRejected) {
		if m, ok := parseAuth(ev.priv); ok {
			if m.kind != authChallenge {
				return nil, opErr(op, fmt.Errorf("%w: the peer refused the connection", rdma.ErrAuth))
			}
			if len(d.cfg.Token) == 0 {
				return nil, opErr(op, fmt.Errorf("%w: the peer wants a token and this device has none", rdma.ErrAuth))
			}
			nonceC := newNonce()
			proof := authMsg{kind: authProof, nonceS: m.nonceS, nonceC: nonceC,
				mac: authMAC(d.cfg.Token, "client", m.nonceS, nonceC)}.encode()
			c, ev, err = d.connect(ctx, host, port, proof, init)
			if err == nil {
				a, ok := parseAuth(ev.priv)
				if !ok || a.kind != authAccept || !hmac.Equal(a.mac, authMAC(d.cfg.Token, "server", nonceC, m.nonceS)) {
					c.abort()
					d.counts.auth.Add(1)
					return nil, opErr(op, fmt.Errorf("%w: the peer's proof is wrong", rdma.ErrAuth))
				}
			} else if m2, ok := parseAuth(ev.priv); ok && m2.kind == authRefused {
				return nil, opErr(op, fmt.Errorf("%w: the peer refused the proof (different token)", rdma.ErrAuth))
			}
		}
	} else if err == nil && len(d.cfg.Token) > 0 {
		c.abort()
		d.counts.auth.Add(1)
		return nil, opErr(op, fmt.Errorf("%w: the peer accepted without authenticating", rdma.ErrAuth))
	}
	if err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, opErr(op, err)
	}
	return d.established(c, op)
}

// connect is rdma_resolve_addr, rdma_resolve_route, rdma_create_qp and
// rdma_connect on a fresh id with its own event channel. On an error the
// id is gone; the event says why (a reject's private data).
func (d *device) connect(ctx context.Context, host, port string, priv []byte, init rdma.QPInit) (*conn, cmEvent, error) {
	ch, err := newCMChannel()
	if err != nil {
		return nil, cmEvent{}, err
	}
	// A device that dies (IBV_EVENT_DEVICE_FATAL) or closes while the
	// dial waits for an event kicks the channel: the dial ends with that
	// error, not at its context or rdma_cm's own retries (a connect
	// request that no one accepts was still waiting 5 s on:
	// TestDialInProgressEnds).
	ch.gone = d.gone
	if err := d.trackDial(ch); err != nil {
		ch.destroy()
		return nil, cmEvent{}, err
	}
	defer d.forgetDial(ch)
	var id *C.struct_rdma_cm_id
	if r, err := C.rdma_create_id(ch.ch, &id, nil, C.RDMA_PS_TCP); r != 0 {
		ch.destroy()
		return nil, cmEvent{}, errnoErr(err)
	}
	var c *conn
	fail := func(ev cmEvent, err error) (*conn, cmEvent, error) {
		if c != nil {
			c.destroy()
		}
		C.rdma_destroy_id(id)
		ch.destroy()
		return nil, ev, err
	}
	chost, cport := C.CString(host), C.CString(port)
	r, cerr := C.gorun_resolve_addr(id, chost, cport, resolveTimeoutMS)
	C.free(unsafe.Pointer(chost))
	C.free(unsafe.Pointer(cport))
	if r != 0 {
		return fail(cmEvent{}, errnoErr(cerr))
	}
	if ev, err := ch.expect(ctx, C.RDMA_CM_EVENT_ADDR_RESOLVED); err != nil {
		return fail(ev, err)
	}
	if r, err := C.rdma_resolve_route(id, resolveTimeoutMS); r != 0 {
		return fail(cmEvent{}, errnoErr(err))
	}
	if ev, err := ch.expect(ctx, C.RDMA_CM_EVENT_ROUTE_RESOLVED); err != nil {
		return fail(ev, err)
	}
	if c, err = d.newConn(id, ch, init); err != nil {
		return fail(cmEvent{}, err)
	}
	var p unsafe.Pointer
	if len(priv) > 0 {
		p = unsafe.Pointer(&priv[0])
	}
	if r, err := C.gorun_connect(id, C.int(d.rdAtom), C.int(d.rnr), p, C.int(len(priv))); r != 0 {
		return fail(cmEvent{}, errnoErr(err))
	}
	ev, err := ch.expect(ctx, C.RDMA_CM_EVENT_ESTABLISHED)
	if err != nil {
		return fail(ev, err)
	}
	return c, ev, nil
}

// established finishes a connection on either side.
func (d *device) established(c *conn, op string) (rdma.Conn, error) {
	c.local, c.remote = addrString(c.id, false), addrString(c.id, true)
	// Best effort: rxe and most NICs accept min_rnr_timer in RTS. The
	// accepting side set it already (accept).
	C.gorun_set_min_rnr_timer(C.gorun_id_qp(c.id), C.int(d.rnrCode))
	if err := d.track(c, nil); err != nil {
		c.destroy()
		C.rdma_destroy_id(c.id)
		c.ch.destroy()
		return nil, opErr(op, err)
	}
	c.start()
	return c, nil
}

// listener is a listening rdma_cm id.
type listener struct {
	d    *device
	id   *C.struct_rdma_cm_id
	ch   *cmChannel
	addr *net.TCPAddr

	nonces    challenges // issued authentication challenges
	acceptMu  sync.Mutex // one Accept reads the channel at a time
	closeOnce sync.Once
	closed    chan struct{}
}

func (d *device) listen(ctx context.Context, addr string) (rdma.Listener, error) {
	op := "listen " + addr
	if err := d.refuse(op); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, opErr(op, err)
	}
	host, port, err := d.splitAddr(addr)
	if err != nil {
		return nil, opErr(op, err)
	}
	ch, err := newCMChannel()
	if err != nil {
		return nil, opErr(op, err)
	}
	var id *C.struct_rdma_cm_id
	if r, err := C.rdma_create_id(ch.ch, &id, nil, C.RDMA_PS_TCP); r != 0 {
		ch.destroy()
		return nil, opErr(op, errnoErr(err))
	}
	var chost *C.char
	if host != "" {
		chost = C.CString(host)
		defer C.free(unsafe.Pointer(chost))
	}
	cport := C.CString(port)
	defer C.free(unsafe.Pointer(cport))
	fail := func(err error) (rdma.Listener, error) {
		C.rdma_destroy_id(id)
		ch.destroy()
		return nil, opErr(op, err)
	}
	if r, err := C.gorun_bind_addr(id, chost, cport); r != 0 {
		return fail(errnoErr(err))
	}
	if v := C.gorun_id_verbs(id); v != nil && v != d.ctx {
		return fail(fmt.Errorf("%w: address is not on device %s", rdma.ErrInvalid, d.name))
	}
	if r, err := C.rdma_listen(id, 128); r != 0 {
		return fail(errnoErr(err))
	}
	ip := net.ParseIP(host)
	if ip == nil {
		ip = net.IPv4zero
	}
	l := &listener{d: d, id: id, ch: ch, closed: make(chan struct{}),
		addr: &net.TCPAddr{IP: ip, Port: int(C.ntohs(C.rdma_get_src_port(id)))}}
	if err := d.track(nil, l); err != nil {
		return fail(err)
	}
	return l, nil
}

func (l *listener) Addr() net.Addr { return l.addr }

// Accept implements rdma.Listener.
func (l *listener) Accept(ctx context.Context) (rdma.Conn, error) {
	return l.AcceptQP(ctx, rdma.QPInit{})
}

// AcceptQP waits for a connect request, moves the new id to its own event
// channel, creates its QP with the CQs of init and accepts it.
func (l *listener) AcceptQP(ctx context.Context, init rdma.QPInit) (rdma.Conn, error) {
	op := "accept " + l.addr.String()
	if err := l.d.refuse(op); err != nil {
		return nil, err
	}
	if err := l.d.checkInit(init); err != nil {
		return nil, opErr(op, err)
	}
	l.acceptMu.Lock()
	defer l.acceptMu.Unlock()
	// Close must not wait for a handshake in progress.
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-l.closed:
			cancel()
		case <-actx.Done():
		}
	}()
	for {
		select {
		case <-l.closed:
			return nil, opErr(op, rdma.ErrClosed)
		default:
		}
		if err := l.d.refuse(op); err != nil { // the device died while Accept waited (asyncFail kicks it)
			return nil, err
		}
		ev, err := l.ch.next(ctx)
		if errors.Is(err, errKicked) {
			continue
		}
		if err != nil {
			if ctx.Err() == nil {
				err = rdma.ErrClosed
			}
			return nil, opErr(op, err)
		}
		if ev.typ != C.RDMA_CM_EVENT_CONNECT_REQUEST {
			continue
		}
		reply, ok := l.authenticate(ev)
		if !ok {
			var p unsafe.Pointer
			if len(reply) > 0 {
				p = unsafe.Pointer(&reply[0])
			}
			C.rdma_reject(ev.id, p, C.uint8_t(len(reply)))
			C.rdma_destroy_id(ev.id)
			continue
		}
		c, err := l.accept(actx, ev, reply, init)
		if err != nil {
			if ctx.Err() != nil {
				return nil, opErr(op, ctx.Err())
			}
			continue // the peer gave up or could not be served; wait for the next one
		}
		return l.d.established(c, op)
	}
}

// authenticate checks a connect request against Config.Token. It returns
// the private data to accept with, or (ok false) to reject with.
func (l *listener) authenticate(ev cmEvent) (reply []byte, ok bool) {
	tok := l.d.cfg.Token
	if len(tok) == 0 {
		return nil, true
	}
	m, ok := parseAuth(ev.priv)
	if !ok || m.kind != authProof {
		if n := l.nonces.issue(); n != nil {
			return authMsg{kind: authChallenge, nonceS: n}.encode(), false
		}
		l.d.counts.auth.Add(1) // no challenge left to issue: refused
		return authMsg{kind: authRefused}.encode(), false
	}
	if !l.nonces.take(m.nonceS) || !hmac.Equal(m.mac, authMAC(tok, "client", m.nonceS, m.nonceC)) {
		l.d.counts.auth.Add(1)
		return authMsg{kind: authRefused}.encode(), false
	}
	return authMsg{kind: authAccept, mac: authMAC(tok, "server", m.nonceC, m.nonceS)}.encode(), true
}

func (l *listener) accept(ctx context.Context, ev cmEvent, priv []byte, init rdma.QPInit) (*conn, error) {
	id := ev.id
	if C.gorun_id_verbs(id) != l.d.ctx {
		C.rdma_reject(id, nil, 0)
		C.rdma_destroy_id(id)
		return nil, rdma.ErrInvalid
	}
	ch, err := newCMChannel()
	if err != nil {
		C.rdma_reject(id, nil, 0)
		C.rdma_destroy_id(id)
		return nil, err
	}
	fail := func(err error) (*conn, error) {
		C.rdma_destroy_id(id)
		ch.destroy()
		return nil, err
	}
	if r, err := C.rdma_migrate_id(id, ch.ch); r != 0 {
		C.rdma_reject(id, nil, 0)
		return fail(errnoErr(err))
	}
	c, err := l.d.newConn(id, ch, init)
	if err != nil {
		C.rdma_reject(id, nil, 0)
		return fail(err)
	}
	respRes := min(ev.initDepth, l.d.rdAtom)
	initDepth := min(ev.respRes, l.d.rdAtom)
	var p unsafe.Pointer
	if len(priv) > 0 {
		p = unsafe.Pointer(&priv[0])
	}
	// gorun_accept sets min_rnr_timer too, before the client can send.
	if r, err := C.gorun_accept(id, C.int(respRes), C.int(initDepth), C.int(l.d.rnr), C.int(l.d.rnrCode),
		p, C.int(len(priv))); r != 0 {
		c.destroy()
		return fail(errnoErr(err))
	}
	if _, err := ch.expect(ctx, C.RDMA_CM_EVENT_ESTABLISHED); err != nil {
		c.destroy()
		return fail(err)
	}
	return c, nil
}

func (l *listener) Close() error {
	l.closeOnce.Do(func() {
		close(l.closed)
		l.ch.w.close() // wakes Accept
		l.acceptMu.Lock()
		C.rdma_destroy_id(l.id)
		C.rdma_destroy_event_channel(l.ch.ch)
		l.acceptMu.Unlock()
		l.d.forget(nil, l)
	})
	return nil
}
