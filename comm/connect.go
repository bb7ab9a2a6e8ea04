package comm

// Connections are made when first needed, as NCCL does, not as a full
// mesh: a rank holds links to the peers its algorithms talk to (ring
// neighbours, tree parents and children, recursive-doubling partners:
// collectives.Peers), so its memory, goroutines and descriptors grow with
// those, about 2·log2(n), not with n.
//
// At start-up (Init, NewLocal, Split, Shrink, Grow) a rank connects
// collectives.InitPeers, the peers of the algorithms the selection table
// picks: the lower rank of each pair dials, the higher one waits for it.
// Any other peer (alltoall, gather and scatter at the root, Send and Recv,
// a broadcast from another root, an algorithm forced by GORUN_ALGO) is
// connected when an operation first needs it, before the operation runs:
// exec asks the engine which peers of the plan have no link (one test
// once a plan is complete) and the connector dials them all at once.
//
// Either end may dial; each rank accepts at all times (one accept loop
// per listener, for the life of the communicator), so a rank busy in
// another operation still answers, and two ranks that dial each other at
// once agree on one connection: the one the lower rank dialed
// (engine.EstablishDial and EstablishAccept carry the choice). A join
// from a later world (a peer that shrank first) is refused as "later" and
// dialed again; one from an earlier world is refused for good.
//
// Ownership: connector.mu guards the peer states. A dial runs on a
// goroutine of its own (the operations waiting for it wait on the peer's
// wait channel, their context, and the engine's failure), an accepted
// connection's handshake on another; both end by installing the link in
// the engine (Engine.AddLink) or recording the error. stop ends the accept
// loops and the dials and waits for them; Close and Shrink call it before
// closing the engine.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gorun-hpc/gorun/bootstrap"
	"github.com/gorun-hpc/gorun/collectives"
	"github.com/gorun-hpc/gorun/internal/engine"
	"github.com/gorun-hpc/gorun/transport/rdma"
)

// peerState is where the connection to one peer stands.
type peerState uint8

const (
	peerIdle       peerState = iota
	peerDialing              // this rank dials
	peerAwaiting             // the peer dials (start-up, or it won a double dial)
	peerAccepting            // the peer's connection is in its handshake
	peerInstalling           // connected; being handed to the engine
	peerLinked
)

type peerConn struct {
	st   peerState
	wait chan struct{} // closed when st leaves dialing..installing
	err  error         // why the last attempt failed

	// For the debug log of a slow or failed reconnection (describe).
	since time.Time     // when st last changed from idle or linked
	tries int           // dials refused as "later" (the peer was in an earlier world)
	took  time.Duration // from since to linked
	steps string        // how long the last connection's steps took
}

// connector makes c's links; see the file comment.
type connector struct {
	c      *Comm
	op     string // "init", "shrink", "grow": names errors
	world  uint32
	eps    []*endpoint
	devs   map[string]*engine.Device
	lns    map[string]rdma.Listener
	params engine.LinkParams

	ctx    context.Context // ends with stop
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	stopped bool
	peers   []peerConn
}

// Times of the connection protocol.
const (
	// handshakeTimeout bounds an accepted connection's handshake (a dialer
	// that never speaks).
	handshakeTimeout = time.Minute
	// redialDelay is the wait before dialing a peer again that is still
	// in an earlier world (it is shrinking too): the first retry's, doubled
	// up to maxRedialDelay.
	redialDelay    = 5 * time.Millisecond
	maxRedialDelay = 200 * time.Millisecond
)

// startConnector makes c's connector for the world described by eps (op
// names it in errors, world numbers it) and starts accepting on every
// listener. c.eng must exist.
func (c *Comm) startConnector(op string, world uint32, eps []*endpoint, devs map[string]*engine.Device, lns map[string]rdma.Listener) {
	ctx, cancel := context.WithCancel(context.Background())
	cn := &connector{c: c, op: op, world: world, eps: eps, devs: devs, lns: lns,
		params: stagingFor(c.cfg, c.size), ctx: ctx, cancel: cancel, peers: make([]peerConn, c.size)}
	c.conn = cn
	for name, ln := range lns {
		cn.wg.Add(1)
		go cn.acceptLoop(ln, devs[name])
	}
}

// stop ends the accept loops and the dials in progress and waits for them.
// Links already installed stay with the engine, which closes them.
func (cn *connector) stop() {
	cn.mu.Lock()
	cn.stopped = true
	cn.mu.Unlock()
	cn.cancel()
	cn.wg.Wait()
}

// connectInit connects the start-up peers: it dials those above this rank
// and waits for those below to dial it.
func (cn *connector) connectInit(ctx context.Context) error {
	c := cn.c
	peers := collectives.InitPeers(c.rank, c.size)
	cn.mu.Lock()
	for _, q := range peers {
		if pc := &cn.peers[q]; q < c.rank && pc.st == peerIdle {
			pc.st, pc.wait, pc.since = peerAwaiting, make(chan struct{}), time.Now()
		}
	}
	cn.mu.Unlock()
	return cn.ensure(ctx, peers)
}

// ensure returns once every peer in peers has a link, dialing those that
// have none and nobody is connecting. It fails if a connection fails (the
// engine is then aborted, naming the peer, so that the other ranks learn
// of it), ctx ends, or the engine fails. A peer whose connection would go
// over a device of this rank's that failed (engine.Device.Err) fails it at
// once with that device's error (ErrDeviceFailed), naming this rank.
func (cn *connector) ensure(ctx context.Context, peers []int) error {
	type waiting struct {
		q    int
		wait chan struct{}
		dev  *engine.Device // the device the connection goes over, or nil
	}
	var ws []waiting
	e := cn.c.eng
	cn.mu.Lock()
	if cn.stopped {
		cn.mu.Unlock()
		return &engine.PeerError{Rank: cn.c.rank, Err: ErrClosed}
	}
	for _, q := range peers {
		pc := &cn.peers[q]
		switch pc.st {
		case peerLinked:
			continue
		case peerIdle:
			if cn.c.eng.Linked(q) { // installed by an earlier communicator's engine: cannot happen
				continue
			}
			pc.st, pc.wait, pc.since = peerDialing, make(chan struct{}), time.Now()
			cn.wg.Add(1)
			go cn.dial(q)
		}
		ws = append(ws, waiting{q, pc.wait, cn.devFor(q)})
	}
	cn.mu.Unlock()
	for _, w := range ws {
		var down <-chan struct{} // nil: never ready
		if w.dev != nil {
			down = w.dev.Down()
		}
		select {
		case <-w.wait:
		case <-e.Done():
			return e.Err()
		case <-down:
			// Failed before or while waiting: dialOnce dials nothing
			// over it, and a peer that would dial this rank never gets
			// through.
			e.DeviceFailed(w.dev.Err())
			return e.Err()
		case <-ctx.Done():
			if q, cause := deathCause(ctx); cause != nil {
				// Shrink's reconnection stopped by a report that q died.
				e.Abort(q, fmt.Errorf("%w: %w", ErrPeerFailed, cause))
			} else if errors.Is(ctx.Err(), context.Canceled) {
				e.Withdraw(fmt.Errorf("%w: connecting to rank %d: %w", ErrAborted, e.Name(w.q), ctx.Err()))
			} else {
				e.Abort(w.q, fmt.Errorf("%w: connecting: %w", ErrTimeout, ctx.Err()))
			}
			return e.Err()
		}
		cn.mu.Lock()
		pc := &cn.peers[w.q]
		linked, err := pc.st == peerLinked, pc.err
		cn.mu.Unlock()
		if !linked {
			if errors.Is(err, ErrDeviceFailed) { // this rank's, not the peer's
				e.DeviceFailed(err)
				return e.Err()
			}
			if err == nil {
				err = errors.New("not connected")
			}
			e.Abort(w.q, fmt.Errorf("%w: connecting: %w", ErrPeerFailed, err))
			return e.Err()
		}
	}
	return nil
}

// devFor is the device of this rank's that a connection to q goes over
// (dialOnce's choice), or nil if there is none.
func (cn *connector) devFor(q int) *engine.Device {
	me, ep := cn.eps[cn.c.rank], cn.eps[q]
	if me == nil || ep == nil {
		return nil
	}
	return cn.devs[pickProvider(cn.c.cfg.transport, me, ep)]
}

// deathCause says whether ctx was ended by the bootstrap's report that a
// member died (Shrink's and Grow's reconnection, shrink.go): the report,
// and the member's rank; nil if not.
func deathCause(ctx context.Context) (int, error) {
	var be *bootstrap.OpError
	if cause := context.Cause(ctx); errors.As(cause, &be) && be.Peer >= 0 {
		return be.Peer, cause
	}
	return 0, nil
}

// dial connects to q for an operation (peer state dialing).
func (cn *connector) dial(q int) {
	defer cn.wg.Done()
	delay := redialDelay
	for {
		l, err := cn.dialOnce(q)
		reason := engine.RejectReason(err)
		if reason == engine.RejectLater && cn.ctx.Err() == nil {
			cn.mu.Lock()
			cn.peers[q].tries++
			cn.mu.Unlock()
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-cn.ctx.Done():
				t.Stop()
			}
			delay = min(2*delay, maxRedialDelay)
			continue
		}
		cn.mu.Lock()
		pc := &cn.peers[q]
		if pc.st != peerDialing { // q's own connection won
			cn.mu.Unlock()
			if l != nil {
				l.Close()
			}
			return
		}
		switch {
		case err == nil:
			pc.st = peerInstalling
			cn.mu.Unlock()
			cn.install(l)
		case reason == engine.RejectDuplicate:
			pc.st = peerAwaiting // q dialed this rank too, and its connection wins
			cn.mu.Unlock()
		default:
			cn.failedLocked(q, err)
			cn.mu.Unlock()
		}
		return
	}
}

// dialOnce dials q and runs the dialer's handshake.
func (cn *connector) dialOnce(q int) (*engine.Link, error) {
	c := cn.c
	me, ep := cn.eps[c.rank], cn.eps[q]
	prov := pickProvider(c.cfg.transport, me, ep)
	d := cn.devs[prov]
	if prov == "" || d == nil {
		return nil, fmt.Errorf("no common transport (this rank has %v, it has %v)", sortedKeys(me.addrs), sortedKeys(ep.addrs))
	}
	if err := d.Err(); err != nil { // its CQ failed: no connection on it works
		return nil, err
	}
	ctx, cancel := context.WithTimeout(cn.ctx, handshakeFor(c.cfg, c.size))
	defer cancel()
	t0 := time.Now()
	conn, err := d.Dev.DialQP(ctx, ep.addrs[prov], d.QPInit())
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", prov, limitHint(err))
	}
	t1 := time.Now()
	l, err := engine.EstablishDial(ctx, conn, d, c.eng, q, cn.world, cn.params)
	if c.cfg.debug >= debugInfo {
		cn.mu.Lock()
		cn.peers[q].steps = fmt.Sprintf("dial %v, join %v", t1.Sub(t0).Round(time.Millisecond), time.Since(t1).Round(time.Millisecond))
		cn.mu.Unlock()
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	return l, nil
}

// handshakeFor is how long a connection's handshake may take in a world
// of size ranks: handshakeTimeout, and in a world in one process, where a
// rank cannot fail apart from the others and all share the CPUs, as long
// as such a world may take to form, 30 ms a rank: 4,096 ranks formed in
// 39-99 s on 2 CPUs (13-15 s since the endpoints are shared), ranks
// reaching their accept loops that late, and a handshake timed out at a
// minute in one of the 4 of 9 worlds that failed to form (2026-11-29).
func handshakeFor(cfg *config, size int) time.Duration {
	if cfg.local {
		return max(handshakeTimeout, time.Duration(size)*30*time.Millisecond)
	}
	return handshakeTimeout
}

// acceptLoop accepts connections on ln until stop.
func (cn *connector) acceptLoop(ln rdma.Listener, d *engine.Device) {
	defer cn.wg.Done()
	for {
		conn, err := ln.AcceptQP(cn.ctx, d.QPInit())
		if err != nil {
			if cn.ctx.Err() != nil || errors.Is(err, rdma.ErrClosed) {
				return
			}
			// A client that failed the transport's own handshake (a bad
			// token): the listener serves on.
			cn.c.debugf(debugInfo, "accept on %s: %v", d.Dev.Name(), err)
			continue
		}
		cn.wg.Add(1)
		go cn.accepted(conn, d)
	}
}

// accepted runs the acceptor's handshake on conn and installs the link.
func (cn *connector) accepted(conn rdma.Conn, d *engine.Device) {
	defer cn.wg.Done()
	ctx, cancel := context.WithTimeout(cn.ctx, handshakeFor(cn.c.cfg, cn.c.size))
	defer cancel()
	chosen := -1
	decide := func(q int) uint32 {
		cn.mu.Lock()
		defer cn.mu.Unlock()
		pc := &cn.peers[q]
		switch {
		case cn.stopped:
			return engine.RejectClosing
		case pc.st == peerIdle, pc.st == peerAwaiting:
		case pc.st == peerDialing && q < cn.c.rank: // both dialed: the lower rank's connection wins
		default:
			return engine.RejectDuplicate
		}
		if pc.wait == nil {
			pc.wait = make(chan struct{})
		}
		if pc.st == peerIdle {
			pc.since = time.Now()
		}
		pc.st, pc.err = peerAccepting, nil
		chosen = q
		return 0
	}
	t0 := time.Now()
	l, err := engine.EstablishAccept(ctx, conn, d, cn.c.eng, cn.world, cn.params, decide)
	if cn.c.cfg.debug >= debugInfo && chosen >= 0 {
		cn.mu.Lock()
		cn.peers[chosen].steps = fmt.Sprintf("accepted, join %v", time.Since(t0).Round(time.Millisecond))
		cn.mu.Unlock()
	}
	if err != nil {
		conn.Close()
		if chosen >= 0 {
			cn.mu.Lock()
			cn.failedLocked(chosen, err)
			cn.mu.Unlock()
		} else {
			cn.c.debugf(debugTrace, "refused a connection: %v", err)
		}
		return
	}
	cn.mu.Lock()
	cn.peers[chosen].st = peerInstalling
	cn.mu.Unlock()
	cn.install(l)
}

// install hands l to the engine and wakes the operations waiting for it.
func (cn *connector) install(l *engine.Link) {
	err := cn.c.eng.AddLink(l)
	if err != nil {
		l.Close()
	} else if cn.op != "init" {
		cn.c.obs.reconnected(1) // metrics.go
	}
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if err != nil {
		cn.failedLocked(l.Peer, err)
		return
	}
	pc := &cn.peers[l.Peer]
	pc.st = peerLinked
	if !pc.since.IsZero() {
		pc.took = time.Since(pc.since)
	}
	close(pc.wait)
	pc.wait = nil
}

// failedLocked records that connecting to q failed and wakes its waiters.
func (cn *connector) failedLocked(q int, err error) {
	pc := &cn.peers[q]
	pc.st, pc.err = peerIdle, err
	if pc.wait != nil {
		close(pc.wait)
		pc.wait = nil
	}
}

// describe says where the connections not yet made stand, for the debug
// log of a slow or failed reconnection (shrink.go): each peer's state,
// for how long, the dials it refused as "later", and the last error.
func (cn *connector) describe() string {
	names := [...]string{"idle", "dialing", "awaiting its dial", "in the acceptor's handshake", "installing", "linked"}
	cn.mu.Lock()
	defer cn.mu.Unlock()
	var b []byte
	for q, pc := range cn.peers {
		if q == cn.c.rank || (pc.st == peerIdle && pc.err == nil) {
			continue
		}
		if pc.st == peerLinked {
			if pc.took >= 100*time.Millisecond {
				b = fmt.Appendf(b, "; rank %d linked in %v", q, pc.took.Round(time.Millisecond))
				if pc.tries > 0 {
					b = fmt.Appendf(b, " after %d dials refused as later", pc.tries)
				}
				if pc.steps != "" {
					b = fmt.Appendf(b, " (%s)", pc.steps)
				}
			}
			continue
		}
		b = fmt.Appendf(b, "; rank %d %s", q, names[pc.st])
		if !pc.since.IsZero() {
			b = fmt.Appendf(b, " since %v", time.Since(pc.since).Round(time.Millisecond))
		}
		if pc.tries > 0 {
			b = fmt.Appendf(b, ", refused %d times as later", pc.tries)
		}
		if pc.steps != "" {
			b = fmt.Appendf(b, ", last %s", pc.steps)
		}
		if pc.err != nil {
			b = fmt.Appendf(b, " (%v)", pc.err)
		}
	}
	if len(b) == 0 {
		return "every link within 100 ms"
	}
	return string(b[2:])
}

// Connections is the number of peers this rank has a connection to: the
// start-up peers (collectives.InitPeers, about 2·log2(Size)) and those
// connected since for an operation that needed them; 0 on a nil *Comm.
func (c *Comm) Connections() int {
	if c == nil {
		return 0
	}
	return c.eng.Links()
}

// connectPlan connects the peers of p that have no link yet; the caller
// holds the turn. It costs one test once p's peers are all connected.
func (c *Comm) connectPlan(ctx context.Context, p *engine.Plan) error {
	c.missing = c.eng.Missing(p, c.missing[:0])
	if len(c.missing) == 0 {
		return nil
	}
	if err := c.conn.ensure(ctx, c.missing); err != nil {
		return err
	}
	if c.missing = c.eng.Missing(p, c.missing[:0]); len(c.missing) > 0 {
		return &engine.PeerError{Rank: c.missing[0], Err: fmt.Errorf("%w: not connected", ErrPeerFailed)}
	}
	return nil
}
