//go:build linux && cgo && rdma

package verbs

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// Asynchronous events (ibv_get_async_event). The device reports on its
// context's async_fd what no completion says: a CQ that overran
// (IBV_EVENT_CQ_ERR), a QP that went to the error state by itself
// (IBV_EVENT_QP_FATAL, QP_REQ_ERR, QP_ACCESS_ERR), a port that went down
// (IBV_EVENT_PORT_ERR), a device that died (IBV_EVENT_DEVICE_FATAL). One
// reader goroutine per ibv_context sleeps on a dup of async_fd in the
// netpoller, reads each event (non-blocking), copies out what names its
// object and acks it at once (ibv_destroy_qp and ibv_destroy_cq wait for
// the acks of their events), then fails that object:
//
//   - a QP event fails its connection (asyncFail): the first error, named
//     after the event, is kept in Conn.Err; the QP is moved to the error
//     state with rdma_disconnect, so the device flushes what it holds and
//     the peer hears of it; what the device does not flush the provider
//     does after flushGrace; and once nothing is outstanding, GetSendComp
//     and GetRecvComp on a private CQ return that error rather than wait
//     for their context. (Posts keep the contract: in the error state they
//     complete flushed.)
//   - a CQ error fails every connection bound to the CQ, as above, and,
//     since the CQEs it lost will never come, flushes their outstanding
//     requests into it at once; a waiter on the CQ (GetSendComp and
//     GetRecvComp of a connection bound to it) gets those, then the
//     error; Arm sends its token at once; CQ.Err reports it.
//   - a port error fails every connection on that port unless the port
//     comes back (IBV_EVENT_PORT_ACTIVE) within portGrace; a device fatal
//     error fails every connection and every shared CQ of the device,
//     and refuses what is asked of it from then on (Dial, Listen,
//     Accept, CreateCQ, Register, Alloc fail at once, an Accept that
//     waits returns), with an error that names the event and the device.
//
// Other events (COMM_EST, SQ_DRAINED, LAST_WQE_REACHED, LID_CHANGE,
// GID_CHANGE, ...) are informational and ignored; so are
// events of SRQs and WQs, which the provider does not make.
//
// An event names its QP or CQ by the qp_context or cq_context the
// provider gave it: a token, never reused, looked up in asyncs.targets.
// Contexts are shared by every Device opened on them (rdma_get_devices
// keeps them for the process), so the reader belongs to the context: the
// first Device opened on it starts it, the last one closed stops it.

// asyncTarget is what an event's token names: a *conn or a *cq.
type asyncTarget interface{ asyncFail(err error) }

var asyncs struct {
	mu      sync.Mutex
	readers map[*C.struct_ibv_context]*asyncReader
	devs    map[*C.struct_ibv_context]map[*device]struct{}
	targets map[uint64]asyncTarget
	down    map[portKey]*time.Timer // ports that went down, in their grace (portDown)
}

var lastAsyncToken atomic.Uint64

// testHookAsyncEvent, unset outside tests, sees every event a reader
// reads, after it is acked and before it is dispatched.
var testHookAsyncEvent atomic.Pointer[func(typ, port int)]

// Event types the tests name (they cannot use cgo).
const (
	eventCQErr       = int(C.IBV_EVENT_CQ_ERR)
	eventQPFatal     = int(C.IBV_EVENT_QP_FATAL)
	eventQPAccessErr = int(C.IBV_EVENT_QP_ACCESS_ERR)
	eventCommEst     = int(C.IBV_EVENT_COMM_EST)
	eventPortErr     = int(C.IBV_EVENT_PORT_ERR)
	eventPortActive  = int(C.IBV_EVENT_PORT_ACTIVE)
	eventDevFatal    = int(C.IBV_EVENT_DEVICE_FATAL)
)

// addAsyncTarget registers t under a new token, to be given to the QP or
// CQ it makes.
func addAsyncTarget(t asyncTarget) uint64 {
	tok := lastAsyncToken.Add(1)
	asyncs.mu.Lock()
	if asyncs.targets == nil {
		asyncs.targets = map[uint64]asyncTarget{}
	}
	asyncs.targets[tok] = t
	asyncs.mu.Unlock()
	return tok
}

func dropAsyncTarget(tok uint64) {
	asyncs.mu.Lock()
	delete(asyncs.targets, tok)
	asyncs.mu.Unlock()
}

// asyncReader reads one context's events.
type asyncReader struct {
	ctx  *C.struct_ibv_context
	w    *fdWaiter
	done chan struct{}
}

// watchAsync adds d to its context's devices, starting the context's
// reader if d is the first.
func (d *device) watchAsync() error {
	asyncs.mu.Lock()
	defer asyncs.mu.Unlock()
	if asyncs.readers == nil {
		asyncs.readers = map[*C.struct_ibv_context]*asyncReader{}
		asyncs.devs = map[*C.struct_ibv_context]map[*device]struct{}{}
	}
	if asyncs.readers[d.ctx] == nil {
		if r, err := C.gorun_set_nonblock(d.ctx.async_fd); r != 0 {
			return fmt.Errorf("async_fd: %w", errnoErr(err))
		}
		w, err := newFDWaiter(int(d.ctx.async_fd), "ibv_async_fd")
		if err != nil {
			return err
		}
		r := &asyncReader{ctx: d.ctx, w: w, done: make(chan struct{})}
		asyncs.readers[d.ctx] = r
		asyncs.devs[d.ctx] = map[*device]struct{}{}
		go r.run()
	}
	asyncs.devs[d.ctx][d] = struct{}{}
	return nil
}

// unwatchAsync removes d; the last device of a context stops its reader
// and waits for it to end.
func (d *device) unwatchAsync() {
	asyncs.mu.Lock()
	delete(asyncs.devs[d.ctx], d)
	var r *asyncReader
	if len(asyncs.devs[d.ctx]) == 0 {
		r = asyncs.readers[d.ctx]
		delete(asyncs.readers, d.ctx)
		delete(asyncs.devs, d.ctx)
	}
	asyncs.mu.Unlock()
	if r != nil {
		r.w.close()
		<-r.done
	}
}

// run reads events until the reader is closed, or reading fails (a
// device that is gone: every Device on the context fails).
func (r *asyncReader) run() {
	defer close(r.done)
	for {
		var ev C.struct_gorun_async_event
		var cerr error
		err := r.w.raw.Read(func(uintptr) bool {
			rc, err := C.gorun_get_async_event(r.ctx, &ev)
			if rc == 0 {
				return true
			}
			if err == syscall.EAGAIN || err == syscall.EINTR {
				return false
			}
			cerr = err
			return true
		})
		if err != nil {
			return // closed
		}
		if cerr != nil {
			failDevices(r.ctx, localErr{fmt.Errorf("%w: reading the device's events failed: %w", ErrAsyncEvent, cerr)}, 0)
			return
		}
		typ, port := int(ev.typ), int(ev.port)
		if h := testHookAsyncEvent.Load(); h != nil {
			(*h)(typ, port)
		}
		dispatchAsync(r.ctx, typ, port, uint64(ev.token))
	}
}

// asyncEventNames are the events that fail something.
var asyncEventNames = map[int]string{
	C.IBV_EVENT_CQ_ERR:        "IBV_EVENT_CQ_ERR",
	C.IBV_EVENT_QP_FATAL:      "IBV_EVENT_QP_FATAL",
	C.IBV_EVENT_QP_REQ_ERR:    "IBV_EVENT_QP_REQ_ERR",
	C.IBV_EVENT_QP_ACCESS_ERR: "IBV_EVENT_QP_ACCESS_ERR",
	C.IBV_EVENT_PORT_ERR:      "IBV_EVENT_PORT_ERR",
	C.IBV_EVENT_DEVICE_FATAL:  "IBV_EVENT_DEVICE_FATAL",
}

// asyncEventError is the error an event fails its objects with, or nil
// for an informational event.
func asyncEventError(typ, port int) error {
	name, ok := asyncEventNames[typ]
	if !ok {
		return nil
	}
	what := C.GoString(C.ibv_event_type_str(uint32(typ)))
	switch typ {
	case C.IBV_EVENT_CQ_ERR:
		what += ", the CQ overran and lost completions"
	case C.IBV_EVENT_PORT_ERR:
		what = fmt.Sprintf("%s, port %d", what, port)
	}
	err := fmt.Errorf("%w: %s (%s)", ErrAsyncEvent, name, what)
	switch typ {
	case C.IBV_EVENT_CQ_ERR, C.IBV_EVENT_PORT_ERR, C.IBV_EVENT_DEVICE_FATAL:
		err = localErr{err}
	}
	return err
}

// localErr is the failure of this side's device (a CQ, a port, the whole
// device), which is no peer's doing: it is rdma.ErrDeviceFailed, in its
// own words. A QP's event may be the peer's (a remote access error), so
// it is not.
type localErr struct{ error }

func (e localErr) Is(target error) bool { return target == rdma.ErrDeviceFailed }
func (e localErr) Unwrap() error        { return e.error }

// dispatchAsync fails what the event names.
func dispatchAsync(ctx *C.struct_ibv_context, typ, port int, tok uint64) {
	if typ == C.IBV_EVENT_PORT_ACTIVE {
		portUp(ctx, port)
		return
	}
	err := asyncEventError(typ, port)
	if err == nil {
		return
	}
	switch typ {
	case C.IBV_EVENT_PORT_ERR:
		portDown(ctx, port, err)
	case C.IBV_EVENT_DEVICE_FATAL:
		failDevices(ctx, err, 0)
	default: // a QP's or a CQ's
		asyncs.mu.Lock()
		t := asyncs.targets[tok]
		asyncs.mu.Unlock()
		if t != nil {
			t.asyncFail(err)
		}
	}
}

// portGrace is how long a port may stay down (IBV_EVENT_PORT_ERR) before
// its connections fail. A link that flaps comes back within it, and an
// RC QP rides out the gap by itself: its sends are retransmitted
// (retry_count 7, each after the ACK timeout, about a second on RoCE by
// rdma_cm's default), so failing them at the event, as before, turned a
// flap into a failed job. NCCL treats the event as a warning and leaves
// it to the QP's retries; a port that stays down fails its connections
// here after portGrace, which may come before the QP's own retry error.
// A variable for the tests.
var portGrace = 2 * time.Second

// portDown starts the grace of a port that went down: unless it comes
// back (portUp) within portGrace, its connections on every Device of
// ctx fail with err.
func portDown(ctx *C.struct_ibv_context, port int, err error) {
	asyncs.mu.Lock()
	defer asyncs.mu.Unlock()
	k := portKey{ctx, port}
	if asyncs.down[k] != nil {
		return
	}
	if asyncs.down == nil {
		asyncs.down = map[portKey]*time.Timer{}
	}
	grace := portGrace
	err = fmt.Errorf("%w; the port stayed down for %v", err, grace)
	var t *time.Timer
	t = time.AfterFunc(grace, func() {
		asyncs.mu.Lock()
		current := asyncs.down[k] == t
		if current {
			delete(asyncs.down, k)
		}
		asyncs.mu.Unlock()
		if current {
			failDevices(ctx, err, port)
		}
	})
	asyncs.down[k] = t
}

// portUp ends the grace of a port that came back (IBV_EVENT_PORT_ACTIVE).
func portUp(ctx *C.struct_ibv_context, port int) {
	asyncs.mu.Lock()
	defer asyncs.mu.Unlock()
	k := portKey{ctx, port}
	if t := asyncs.down[k]; t != nil {
		t.Stop()
		delete(asyncs.down, k)
	}
}

type portKey struct {
	ctx  *C.struct_ibv_context
	port int
}

// failDevices fails the connections on port (0: every connection and
// shared CQ) of every Device on ctx.
func failDevices(ctx *C.struct_ibv_context, err error, port int) {
	asyncs.mu.Lock()
	var devs []*device
	for d := range asyncs.devs[ctx] {
		devs = append(devs, d)
	}
	asyncs.mu.Unlock()
	for _, d := range devs {
		d.asyncFail(err, port)
	}
}

// asyncFail fails d's connections on port, or with port 0 everything:
// then the device is dead (fatal), its error names it, and new work is
// refused; an Accept or a Dial in progress is woken to return that error.
func (d *device) asyncFail(err error, port int) {
	d.mu.Lock()
	if port == 0 {
		if p := d.fatal.Load(); p != nil {
			err = *p
		} else {
			err = fmt.Errorf("device %s: %w", d.name, err)
			d.fatal.Store(&err)
		}
		for l := range d.lns {
			l.ch.w.kick()
		}
		d.kickDialsLocked()
	}
	var conns []*conn
	for c := range d.conns {
		if port == 0 || c.port == port {
			conns = append(conns, c)
		}
	}
	var cqs []*cq
	if port == 0 {
		for q := range d.cqs {
			cqs = append(cqs, q)
		}
	}
	d.mu.Unlock()
	for _, c := range conns {
		c.asyncFail(err)
	}
	for _, q := range cqs {
		q.asyncFail(err)
	}
}

// asyncFail fails the connection: its QP can complete nothing more than
// the device's flushes. It moves the QP to the error state
// (rdma_disconnect: the device flushes, the peer sees DISCONNECTED) and
// wakes waiters.
func (c *conn) asyncFail(err error) {
	c.hwErr.CompareAndSwap(nil, &err)
	c.fail(err)
	c.disconnect()
	c.kick()
}

// asyncFail fails the CQ: its lost CQEs will not come, so the
// outstanding requests of every queue bound to it are flushed now, after
// their connections failed (their QPs in the error state first, as Close
// does); waiters get those, then err. CQ.Err reports err only once they
// are in (failShown), as rdma.CQ asks.
func (q *cq) asyncFail(err error) {
	q.mu.Lock()
	if q.hw == nil || q.failErr != nil {
		q.mu.Unlock()
		return
	}
	q.failErr = err
	seen := map[*conn]bool{}
	var conns []*conn
	for _, qu := range q.queues {
		if qu != nil && !seen[qu.c] {
			seen[qu.c] = true
			conns = append(conns, qu.c)
		}
	}
	q.mu.Unlock()
	for _, c := range conns {
		c.asyncFail(err)
	}
	q.mu.Lock()
	q.pollLocked()
	for _, qu := range q.queues {
		if qu != nil && !qu.closed {
			qu.flushLocked()
		}
	}
	q.failShown = true
	q.mu.Unlock()
	q.stop()
	q.token()
}
