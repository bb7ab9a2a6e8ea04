//go:build linux

package shm

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/gorun-hpc/gorun/transport/rdma"
	"github.com/gorun-hpc/gorun/transport/rdma/internal/soft"
)

// cq is the shm provider's shared completion queue: a soft.CQ (the FIFO,
// Arm and Notify) that knows the connections whose receive queue it is,
// so that Poll drains their peers' rings on the caller's goroutine.
//
// Send completions are pushed by whoever executes the request (the
// poster, inline, or the connection's send-queue goroutine). Receive
// completions are pushed by whoever drains the peer's ring: Poll when the
// caller spins, the connection's progress goroutine when the queue is
// armed (it sleeps on the peer's data doorbell only then, so that while
// the caller spins, senders make no wake-up write), or a flush.
type cq struct {
	dev *Device
	q   *soft.CQ
	// queued counts pushes minus completions handed out: never below the
	// number queued, so Poll skips q's lock when it is zero.
	queued atomic.Int64
	// arm is Arm's count times two, plus one while armed: Arm sets the
	// bit, the next push clears it (the push soft.CQ sends the token for)
	// unless an Arm came since the push began. The bit may be set while q
	// is not armed (harmless: a progress goroutine sleeps on the doorbell
	// once more), never the other way round while a poller waits (Arm).
	arm    atomic.Uint64
	closed atomic.Bool

	mu    sync.Mutex              // serializes changes of conns
	conns atomic.Pointer[[]*conn] // receive queues bound here (copy on write)
	// Polls in flight, by the parity of phase when they began: a
	// connection leaving conns waits until every Poll that may still see
	// it has returned (unbind) before its memory is unmapped, so that Poll
	// may look at a ring without a lock.
	phase   atomic.Uint32
	polling [2]atomic.Int32
}

// CreateCQ returns a completion queue that this device's connections may
// share (rdma.QPInit). depth is not needed: the queue grows.
func (d *Device) CreateCQ(depth int) (rdma.CQ, error) {
	if depth < 0 {
		return nil, rdma.NewOpError(provider, "create_cq", rdma.ErrInvalid)
	}
	q := &cq{dev: d, q: soft.NewCQ()}
	q.conns.Store(new([]*conn))
	return q, nil
}

// Poll drains the rings of the connections whose receive queue is q (the
// ones nobody else is draining right now), then hands out up to len(wcs)
// completions. With nothing to do it costs two atomic additions, plus
// three atomic loads per connection.
func (q *cq) Poll(wcs []rdma.WC) int {
	if q.closed.Load() || len(wcs) == 0 {
		return 0
	}
	out := wcBuf{wcs: wcs}
	in := &q.polling[q.phase.Load()&1]
	in.Add(1)
	for _, c := range *q.conns.Load() {
		c.pollRing(&out)
	}
	in.Add(-1)
	// What the drains put in out was found with nothing queued: nothing
	// queued now is older than it.
	n := out.n
	if n < len(wcs) && q.queued.Load() > 0 {
		k := q.q.Poll(wcs[n:])
		q.queued.Add(int64(-k))
		n += k
	}
	return n
}

// wcBuf is where a Poll's drains put the receive completions they find.
type wcBuf struct {
	wcs []rdma.WC
	n   int
}

// Arm asks for a token on Notify at the next completion, and sends the
// progress goroutines of the bound connections to sleep on their peers'
// doorbells, so that a record published from now on is drained and
// completed without a poller.
//
// No lost wake-up: the armed bit is set before q.q.Arm, and a push clears
// it only if it read the bit set by this very Arm before pushing into q.q
// (a push that read an older Arm's bit fails its compare-and-swap). So once
// the bit is clear again after this Arm, a push reached q.q after the bit
// was set, and soft.CQ sends a token for it (its Push sees q.q armed, or
// q.q.Arm sees the completion). Until then, each progress goroutine either
// is parked on armKick (which this Arm fills) or checks the bit before
// its sleep, and the data doorbell protocol (bell.go) makes a record
// published after that check wake it. And while the bit is set, no drain
// hands a completion straight to a Poll (completeRecv): every completion
// after Arm reaches q.q.
func (q *cq) Arm() {
	for {
		v := q.arm.Load()
		if q.arm.CompareAndSwap(v, (v|1)+2) {
			break
		}
	}
	q.q.Arm()
	for _, c := range *q.conns.Load() {
		select {
		case c.armKick <- struct{}{}:
		default:
		}
	}
}

// Notify implements rdma.CQ.
func (q *cq) Notify() <-chan struct{} { return q.q.Notify() }

// Err implements rdma.CQ: the queue grows, so it never fails.
func (q *cq) Err() error { return nil }

// Close implements rdma.CQ: a later Poll returns 0; a sleeper gets a token.
func (q *cq) Close() error {
	q.closed.Store(true)
	return q.q.Close()
}

// push queues a completion of a bound connection.
func (q *cq) push(wc rdma.WC) {
	v := q.arm.Load()
	q.queued.Add(1)
	q.q.Push(wc)
	if v&1 != 0 {
		q.arm.CompareAndSwap(v, v&^1)
	}
}

// armed reports whether a poller may be waiting for a token.
func (q *cq) armed() bool { return q.arm.Load()&1 != 0 }

// wait is GetSendComp and GetRecvComp on a queue bound to q.
func (q *cq) wait(ctx context.Context) (rdma.WC, error) {
	return rdma.WaitComp(ctx, q, q.q.Closed())
}

func (q *cq) bind(c *conn) {
	q.mu.Lock()
	defer q.mu.Unlock()
	old := *q.conns.Load()
	next := make([]*conn, len(old), len(old)+1)
	copy(next, old)
	next = append(next, c)
	q.conns.Store(&next)
}

// unbind removes c from conns and returns once no Poll can be looking at
// it: every Poll that began before the removal has returned. Two flips of
// phase, as in user-space RCU: a Poll counted under the parity a flip
// waits for has returned, or began after that flip's wait and so after
// the removal, and loads the new list.
func (q *cq) unbind(c *conn) {
	q.mu.Lock()
	defer q.mu.Unlock()
	old := *q.conns.Load()
	next := make([]*conn, 0, len(old))
	for _, o := range old {
		if o != c {
			next = append(next, o)
		}
	}
	q.conns.Store(&next)
	for range 2 {
		was := q.phase.Add(1) - 1
		for q.polling[was&1].Load() != 0 {
			runtime.Gosched() // a Poll never blocks
		}
	}
}

// sharedCQ checks that a CQ of init belongs to this device.
func (d *Device) sharedCQ(op string, x rdma.CQ) (*cq, error) {
	if x == nil {
		return nil, nil
	}
	q, ok := x.(*cq)
	if !ok || q.dev != d {
		return nil, rdma.NewOpError(provider, op, rdma.ErrInvalid)
	}
	if q.closed.Load() {
		return nil, rdma.NewOpError(provider, op, rdma.ErrClosed)
	}
	return q, nil
}

// bindCQs attaches c's queues to the CQs of init. Nothing has completed on
// a new connection yet (no request was posted), so the private queues have
// nothing to hand over.
func (c *conn) bindCQs(sq, rq *cq) {
	if sq != nil {
		c.sendShared.Store(sq)
	}
	if rq != nil {
		c.recvShared.Store(rq)
		rq.bind(c)
		// The progress goroutine may be asleep on the doorbell in private
		// mode: wake it so that it parks instead (else the peer's first
		// record would cost a wake-up write).
		c.progMu.Lock()
		if c.state.Load() != stateClosed {
			c.peer.dataBell().wake()
		}
		c.progMu.Unlock()
		if c.state.Load() == stateClosed { // Device.Close got there first
			rq.unbind(c)
		}
	}
}

// DialQP implements rdma.Device.
func (d *Device) DialQP(ctx context.Context, addr string, init rdma.QPInit) (rdma.Conn, error) {
	sq, err := d.sharedCQ("dial", init.SendCQ)
	if err != nil {
		return nil, err
	}
	rq, err := d.sharedCQ("dial", init.RecvCQ)
	if err != nil {
		return nil, err
	}
	c, err := d.dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	c.bindCQs(sq, rq)
	return c, nil
}

// AcceptQP implements rdma.Listener.
func (l *listener) AcceptQP(ctx context.Context, init rdma.QPInit) (rdma.Conn, error) {
	sq, err := l.dev.sharedCQ("accept", init.SendCQ)
	if err != nil {
		return nil, err
	}
	rq, err := l.dev.sharedCQ("accept", init.RecvCQ)
	if err != nil {
		return nil, err
	}
	c, err := l.accept(ctx)
	if err != nil {
		return nil, err
	}
	c.bindCQs(sq, rq)
	return c, nil
}

var _ rdma.CQ = (*cq)(nil)
