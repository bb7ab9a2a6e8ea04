//go:build linux

package shm

import (
	"context"
	"runtime"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
	"github.com/gorun-hpc/gorun/transport/rdma/internal/soft"
)

// Waiting for completions. A send completion is pushed by whoever executes
// the request, so GetSendComp spins briefly, then sleeps on the queue. A
// receive completion comes from draining the peer's ring, so GetRecvComp
// drains it itself: it spins, draining, for a few microseconds, then
// sleeps on the peer's data doorbell, so that the sender's wake-up
// reaches the thread that returns the completion (one wake-up,
// not two). (On a queue bound to a shared CQ, both poll the CQ instead:
// rdma.WaitComp.) While a receive poller is inside GetRecvComp the progress
// goroutine stays parked off the doorbell; it takes over when the poller
// leaves, so that the ring keeps draining when nobody polls.

func (c *conn) GetSendComp(ctx context.Context) (rdma.WC, error) {
	if q := c.sendShared.Load(); q != nil {
		return q.wait(ctx)
	}
	wc, ok, err := c.spinComp(c.sendCQ, false, c.dev.spinWindow())
	if ok || err != nil {
		return wc, err
	}
	return c.sendCQ.Get(ctx)
}

func (c *conn) GetRecvComp(ctx context.Context) (rdma.WC, error) {
	if q := c.recvShared.Load(); q != nil {
		return q.wait(ctx)
	}
	c.pollers.Add(1)
	leave := func() {
		if c.pollers.Add(-1) == 0 {
			select {
			case c.pollIdle <- struct{}{}:
			default:
			}
		}
	}
	for {
		window := c.dev.spinWindow()
		if c.slept.Swap(false) {
			window = max(window, spinAfterWake)
		}
		wc, ok, err := c.spinComp(c.recvCQ, true, window)
		if ok || err != nil {
			leave()
			return wc, err
		}
		if err := ctx.Err(); err != nil {
			leave()
			return rdma.WC{}, err
		}
		if !c.sleepRecv(ctx) {
			// The connection ended: the queue has its last completions
			// and then its error.
			leave()
			return c.recvCQ.Get(ctx)
		}
	}
}

func (c *conn) spinComp(q *soft.CQ, drain bool, window time.Duration) (rdma.WC, bool, error) {
	start := time.Time{}
	for i := 0; ; i++ {
		wc, ok, err := q.Next()
		if ok || err != nil {
			return wc, ok, err
		}
		if drain && c.tryDrain(nil) {
			continue
		}
		if i == 0 {
			start = time.Now()
		} else if i&3 == 3 {
			el := time.Since(start)
			if el > window {
				return rdma.WC{}, false, nil
			}
			if el > spinFor {
				yieldCPU() // a long spin: let other processes run
				continue
			}
		}
		runtime.Gosched()
	}
}

// tryDrain drains the peer's ring unless someone else is, or the
// connection is closed (its memory may be unmapped).
func (c *conn) tryDrain(out *wcBuf) bool {
	if !c.progMu.TryLock() {
		return false
	}
	defer c.progMu.Unlock()
	if c.state.Load() == stateClosed {
		return false
	}
	return c.drain(out)
}

// pollRing is a shared CQ's Poll for one bound connection: drain the
// peer's ring into out if it has records, unless the connection is closed
// or someone else is draining it (then that one pushes what it finds). The
// segment stays mapped while a Poll may call it (cq.unbind).
func (c *conn) pollRing(out *wcBuf) {
	if pos := c.rxPos.Load(); c.state.Load() != stateClosed && ringStamp(c.peer.ring(), pos) == pos+1 {
		c.tryDrain(out)
	}
}

// sleepRecv sleeps until the peer publishes, a receive completion is
// pushed some other way (kickRecv), the connection ends or ctx is done. It
// holds progMu, so the segments stay mapped (Close wakes it first). It
// reports false when the connection has ended.
func (c *conn) sleepRecv(ctx context.Context) bool {
	if !c.progMu.TryLock() {
		// The progress goroutine is finishing a drain; it parks next.
		runtime.Gosched()
		return c.state.Load() != stateClosed && !c.peerGone.Load()
	}
	defer c.progMu.Unlock()
	if c.state.Load() == stateClosed || c.peerGone.Load() {
		return false
	}
	head, tail := c.peer.u64(offHead), c.peer.u64(offTail)
	bell := c.peer.dataBell()
	ready := func() bool {
		return head.Load() != tail.Load() || c.recvCQ.Len() > 0 || c.state.Load() == stateClosed ||
			c.peerGone.Load() || ctx.Err() != nil
	}
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		bell.wake()
		close(fired)
	})
	if _, slept := bell.waitNoSpin(ready, 0); slept {
		c.slept.Store(true)
	}
	if !stop() && ctx.Err() != nil {
		<-fired // the wake touches the segment: finish it while it is mapped
	}
	return true
}

// kickRecv wakes a receive poller sleeping in sleepRecv after a receive
// completion was pushed outside the ring (flushes). The segment must be
// mapped (the caller holds rqMu and the connection is not closed, or is
// Close itself before the unmap).
func (c *conn) kickRecv() {
	if c.peer != nil && c.peer.mem != nil {
		c.peer.dataBell().ring()
	}
}

// spinWindow is how long a completion poller spins before it sleeps:
// Config.Spin, or spinFor. Past spinFor the spin yields the CPU at every
// poll (spinComp), so a long window costs little where a rank has a CPU of
// its own.
func (d *Device) spinWindow() time.Duration {
	if d.cfg.Spin > 0 {
		return d.cfg.Spin
	}
	return spinFor
}
