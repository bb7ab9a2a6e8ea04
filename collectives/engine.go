package collectives

// The executor.
//
// An Engine owns the links of one communicator and runs one Plan (a
// compiled Schedule) at a time on the caller's goroutine. For every peer
// the plan lists its sends and receives in program order. The run loop
// repeatedly, for each peer:
//   - marks sends complete whose last header write has completed;
//   - posts the next send's pieces (one message per staging slot of the
//     peer) while its deps are done and the peer has credits;
//   - applies arrived messages to the next receive while its deps are done
//     (reduce with internal/kernels, or copy) and returns a credit;
//
// and when nothing moved, sleeps until a progress goroutine pokes it, the
// context ends, the timeout fires or the engine fails. Every message header
// carries the call's signature (sequence number, collective, element type,
// op, root, count); a receiver that finds a different one fails with
// ErrMismatch naming the sender and aborts the communicator: abort notices
// go to every peer, whose pending and later operations then fail with the
// same attribution. The loop allocates nothing once its state has grown to
// the largest plan run so far.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorun-hpc/gorun/internal/kernels"
	"github.com/gorun-hpc/gorun/transport/rdma"
)

// Plan is a Schedule compiled for execution: its ops grouped per peer.
type Plan struct {
	S     *Schedule
	peers []planPeer
}

type planPeer struct {
	peer         int
	sends, recvs []int32
}

// Compile groups s's ops by peer.
func Compile(s *Schedule) *Plan {
	p := &Plan{S: s}
	idx := map[int]int{}
	for i, o := range s.Ops {
		j, ok := idx[o.Peer]
		if !ok {
			j = len(p.peers)
			idx[o.Peer] = j
			p.peers = append(p.peers, planPeer{peer: o.Peer})
		}
		if o.Kind == Send {
			p.peers[j].sends = append(p.peers[j].sends, int32(i))
		} else {
			p.peers[j].recvs = append(p.peers[j].recvs, int32(i))
		}
	}
	return p
}

// Call describes one operation: its signature, which every rank must agree
// on, and its buffers.
type Call struct {
	Coll  Collective
	DType kernels.DType
	Op    kernels.Op
	Root  int // root, or the tag of a point-to-point message
	Count int
	Seq   uint32 // per-communicator sequence number (per pair for point-to-point)
	Work  []byte
	Input []byte
}

// Engine runs plans over a set of links; see the file comment.
type Engine struct {
	Rank, Size int
	links      []*Link // by rank; nil for self and unconnected
	devs       []*Device

	ctx    context.Context
	cancel context.CancelFunc
	wake   chan struct{}
	dead   chan struct{}

	mu     sync.Mutex
	err    error
	closed bool
	failed atomic.Bool
	timer  *time.Timer
	loops  sync.WaitGroup // the links' progress goroutines
	runMu  sync.Mutex     // held by Run; Close waits for it

	st runState
}

type runState struct {
	done     []bool
	sendLast []uint64
	pp       []peerState
}

type peerState struct {
	sendCur, sendFin, recvCur int
	sendPiece, recvPiece      int
	ctsSent                   bool
}

// DirectMin is the smallest op (in bytes) sent directly into the receiver's
// buffer rather than through its staging slots.
const DirectMin = 64 << 10

// maxWrite bounds one posted write of a direct message.
const maxWrite = 4 << 20

// NewEngine starts the progress goroutines of links (indexed by rank).
func NewEngine(rank, size int, links []*Link, devs []*Device) *Engine {
	ctx, cancel := context.WithCancel(context.Background())
	e := &Engine{Rank: rank, Size: size, links: links, devs: devs, ctx: ctx, cancel: cancel,
		wake: make(chan struct{}, 1), dead: make(chan struct{})}
	e.timer = time.NewTimer(time.Hour)
	e.timer.Stop()
	for _, l := range links {
		if l != nil {
			e.loops.Add(2)
			go l.recvLoop(ctx, e)
			go l.sendLoop(ctx, e)
		}
	}
	return e
}

func (e *Engine) poke() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Err is the error that broke the engine, or nil.
func (e *Engine) Err() error {
	if !e.failed.Load() {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

// fail records err (the first one wins) and wakes the run loop.
func (e *Engine) fail(err error) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err != nil {
		return false
	}
	e.err = err
	e.failed.Store(true)
	close(e.dead)
	return true
}

// Abort fails the engine with a *PeerError{culprit, err} and sends an abort
// notice to every peer, whose operations then fail with the same culprit.
func (e *Engine) Abort(culprit int, err error) {
	if !e.fail(&PeerError{Rank: culprit, Err: err}) {
		return
	}
	code := reasonOf(err)
	for _, l := range e.links {
		if l != nil && !l.closed.Load() {
			l.sendCtrl(ctrlAbort, uint32(int32(culprit)), uint64(code)) // best effort
		}
	}
}

// PeerFailed reports from outside (the bootstrap) that rank died.
func (e *Engine) PeerFailed(rank int, err error) {
	if err == nil {
		err = ErrPeerFailed
	} else if !errors.Is(err, ErrPeerFailed) {
		err = fmt.Errorf("%w: %w", ErrPeerFailed, err)
	}
	e.Abort(rank, err)
}

// remoteAbort handles a peer's abort notice. It is passed on to every
// peer (once: only the first failure is), so that all ranks agree on the
// culprit even if the notifier's own notices are cut short.
func (e *Engine) remoteAbort(l *Link, culprit int, code uint32) {
	e.Abort(culprit, reasonErr(code))
}

func (e *Engine) linkFailed(l *Link, err error) {
	l.broken.Store(true)
	// A peer that closed gracefully said bye after everything else it sent;
	// if the send queue noticed the closed connection first, give the
	// receive loop a moment to get there.
	for i := 0; i < 50 && !l.closed.Load() && !l.recvOut.Load(); i++ {
		time.Sleep(2 * time.Millisecond)
	}
	if l.closed.Load() {
		// The peer said bye: it finished every call it made, and all it
		// sent before the bye has arrived (in order). That is no failure;
		// only an operation that still needs this peer fails (Run).
		e.poke()
		return
	}
	e.Abort(l.Peer, fmt.Errorf("%w: %w", ErrPeerFailed, err))
}

// Close says bye to every peer, stops the progress goroutines and closes
// the connections and the links' memory. It does not close the devices.
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	e.mu.Unlock()
	// Stop a running operation (it returns at its next wakeup) and wait for
	// it: Run uses the links' memory, which Close frees.
	failedBefore := e.Err()
	e.fail(&PeerError{Rank: e.Rank, Err: ErrClosed})
	e.runMu.Lock()
	defer e.runMu.Unlock()
	// A rank that failed before closing passes the failure on ahead of its
	// bye (in order on each link), so that a peer still waiting on this
	// rank blames the culprit, not this rank's departure.
	var pe *PeerError
	if errors.As(failedBefore, &pe) && pe.Rank != e.Rank {
		for _, l := range e.links {
			if l != nil && !l.closed.Load() && !l.broken.Load() {
				l.sendCtrl(ctrlAbort, uint32(int32(pe.Rank)), uint64(reasonOf(pe.Err))) // best effort
			}
		}
	}
	// Say bye on every link and wait (briefly) until the byes have gone
	// out: an abort notice posted before must reach the peers before the
	// connections close, or they would blame this rank instead.
	var sent []chan struct{}
	for _, l := range e.links {
		if l != nil && !l.broken.Load() && l.conn.Err() == nil && l.sendCtrl(ctrlBye, 0, 0) == nil {
			sent = append(sent, l.byeSent)
		}
	}
	// One deadline for all byes (a timer's channel fires once, and a bye to
	// a peer that already closed never completes).
	grace, stop := context.WithTimeout(context.Background(), 500*time.Millisecond)
	for _, ch := range sent {
		select {
		case <-ch:
		case <-grace.Done():
		}
	}
	stop()
	e.cancel()
	var first error
	for _, l := range e.links {
		if l != nil {
			if err := l.conn.Close(); err != nil && first == nil {
				first = err
			}
		}
	}
	e.loops.Wait() // nothing touches the links' memory any more
	for _, l := range e.links {
		if l != nil {
			l.free()
		}
	}
	return first
}

// Run executes plan p for call; timeout > 0 bounds it. Errors are
// *PeerError values naming the rank at fault (or being waited for).
func (e *Engine) Run(ctx context.Context, p *Plan, call *Call, timeout time.Duration) error {
	e.runMu.Lock()
	defer e.runMu.Unlock()
	if err := e.Err(); err != nil {
		return err
	}
	if len(p.S.Ops) == 0 {
		return nil
	}
	for _, d := range e.devs {
		var err error
		if d.cur[Work], err = d.Cache.Get(call.Work); err != nil {
			return &PeerError{Rank: e.Rank, Err: err}
		}
		if d.cur[Input], err = d.Cache.Get(call.Input); err != nil {
			return &PeerError{Rank: e.Rank, Err: err}
		}
	}
	st := &e.st
	st.reset(len(p.S.Ops), len(p.peers))
	if timeout > 0 {
		e.timer.Reset(timeout)
		defer e.timer.Stop()
	}
	remaining := len(p.S.Ops)
	es := call.DType.Size()
	for {
		progress := false
		for i := range p.peers {
			pp, ps := &p.peers[i], &st.pp[i]
			l := e.links[pp.peer]
			if l == nil {
				return &PeerError{Rank: pp.peer, Err: fmt.Errorf("no connection: %w", ErrPeerFailed)}
			}
			for ps.sendFin < ps.sendCur {
				op := pp.sends[ps.sendFin]
				// Done once the transport completed it or the peer consumed
				// it (a peer that then closed may flush the completion).
				if l.sendDone.Load() < st.sendLast[op] && l.credits.Load() < st.sendLast[op] {
					break
				}
				st.done[op] = true
				ps.sendFin++
				remaining--
				progress = true
			}
			for ps.sendCur < len(pp.sends) {
				op := pp.sends[ps.sendCur]
				o := &p.S.Ops[op]
				if !st.ready(o) {
					break
				}
				moved, complete, err := e.post(l, o, call, ps, es)
				if err != nil {
					if l.closed.Load() {
						err = ErrPeerClosed
					} else {
						err = fmt.Errorf("%w: %w", ErrPeerFailed, err)
					}
					e.Abort(l.Peer, err)
					return e.Err()
				}
				progress = progress || moved
				if !complete {
					break
				}
				st.sendLast[op] = l.posted
				ps.sendCur++
				ps.sendPiece = 0
			}
			for ps.recvCur < len(pp.recvs) {
				op := pp.recvs[ps.recvCur]
				o := &p.S.Ops[op]
				if !st.ready(o) {
					break
				}
				moved, complete, err := e.consume(l, o, call, ps, es)
				if err != nil {
					return e.Err()
				}
				progress = progress || moved
				if !complete {
					break
				}
				st.done[op] = true
				remaining--
				ps.recvCur++
				ps.recvPiece = 0
				ps.ctsSent = false
			}
		}
		if remaining == 0 && e.acked(p) {
			return nil
		}
		if progress {
			continue
		}
		if peer, ok := e.needsClosedPeer(p); ok {
			e.Abort(peer, ErrPeerClosed) // the others may wait on this rank
			return e.Err()
		}
		select {
		case <-e.wake:
		case <-e.dead:
			return e.Err()
		case <-ctx.Done():
			e.Abort(e.waitingFor(p), fmt.Errorf("%w: %w", ErrTimeout, ctx.Err()))
			return e.Err()
		case <-e.timer.C:
			e.Abort(e.waitingFor(p), fmt.Errorf("%w after %v", ErrTimeout, timeout))
			return e.Err()
		}
	}
}

// needsClosedPeer names a peer that has closed the communicator while p
// still needs it: data it never sent, credits for messages it never
// consumed, or sends p has yet to post to it. A peer's bye follows all it
// sent, in order, so once closed is seen every message it sent is counted
// in arrived; a receive that has consumed them all can get no more.
func (e *Engine) needsClosedPeer(p *Plan) (int, bool) {
	for i := range p.peers {
		pp, ps := &p.peers[i], &e.st.pp[i]
		l := e.links[pp.peer]
		if !l.closed.Load() {
			continue
		}
		awaitsData := ps.recvCur < len(pp.recvs) && l.consumed >= l.arrived.Load()
		if awaitsData || ps.sendCur < len(pp.sends) || l.credits.Load() < l.posted {
			return pp.peer, true
		}
	}
	return 0, false
}

// acked reports whether every peer of p has consumed every message sent to
// it, so that a receiver that found the call mismatched has had the chance
// to fail the sender too before the sender returns.
func (e *Engine) acked(p *Plan) bool {
	for i := range p.peers {
		l := e.links[p.peers[i].peer]
		if len(p.peers[i].sends) > 0 && l.credits.Load() < l.posted {
			return false
		}
	}
	return true
}

// waitingFor names the peer a stuck plan waits for: first one whose data
// a ready receive awaits, then one that owes credits, then any unfinished.
func (e *Engine) waitingFor(p *Plan) int {
	for i := range p.peers {
		pp, ps := &p.peers[i], &e.st.pp[i]
		if ps.recvCur < len(pp.recvs) && e.st.ready(&p.S.Ops[pp.recvs[ps.recvCur]]) {
			return pp.peer
		}
	}
	for i := range p.peers {
		pp, ps := &p.peers[i], &e.st.pp[i]
		if l := e.links[pp.peer]; l.credits.Load() < l.posted || ps.sendFin < ps.sendCur {
			return pp.peer
		}
	}
	for i := range p.peers {
		pp, ps := &p.peers[i], &e.st.pp[i]
		if ps.recvCur < len(pp.recvs) || ps.sendFin < len(pp.sends) {
			return pp.peer
		}
	}
	return e.Rank
}

func (st *runState) reset(nops, npeers int) {
	if cap(st.done) < nops {
		st.done = make([]bool, nops)
		st.sendLast = make([]uint64, nops)
	}
	st.done = st.done[:nops]
	st.sendLast = st.sendLast[:nops]
	clear(st.done)
	if cap(st.pp) < npeers {
		st.pp = make([]peerState, npeers)
	}
	st.pp = st.pp[:npeers]
	clear(st.pp)
}

func (st *runState) ready(o *Op) bool {
	for _, d := range o.Deps {
		if !st.done[d] {
			return false
		}
	}
	return true
}

func pieces(nbytes, payload int) int {
	if nbytes == 0 {
		return 1
	}
	return (nbytes + payload - 1) / payload
}

// post posts as many pieces of send o as the peer's credits allow.
func (e *Engine) post(l *Link, o *Op, call *Call, ps *peerState, es int) (moved, complete bool, err error) {
	nbytes := o.Len * es
	payload := l.payload()
	np := pieces(nbytes, payload)
	buf := call.Work
	if o.Buf == Input {
		buf = call.Input
	}
	rs := uint64(l.rSlots)
	direct := o.ToCopy && nbytes >= DirectMin
	if direct {
		np = 1
	}
	for ps.sendPiece < np {
		m := l.posted
		if m-l.credits.Load() >= rs || (m >= rs && l.sendDone.Load() < m-rs+1) {
			return moved, false, nil
		}
		if direct {
			if l.ctsArrived.Load() <= l.ctsUsed {
				return moved, false, nil
			}
			cts := l.cts[l.ctsUsed%ctsDepth]
			src := buf[o.Off*es : o.Off*es+nbytes]
			for off := 0; off < nbytes; off += maxWrite {
				part := src[off:min(nbytes, off+maxWrite)]
				if err := l.conn.PostWrite(0, part, l.dev.cur[o.Buf], 0, cts.addr+uint64(off), cts.rkey); err != nil {
					return moved, false, err
				}
			}
			slot := m % rs
			h := l.hdrs.Bytes()[slot*hdrSize : (slot+1)*hdrSize]
			putHeader(h, call, nbytes, true)
			if err := l.conn.PostWriteImm(m, h, l.hdrs, rdma.FlagSignaled, l.rAddr+slot*uint64(l.rSlotSize), l.rKey, uint32(m)); err != nil {
				return moved, false, err
			}
			l.ctsUsed++
			l.posted++
			ps.sendPiece++
			return true, true, nil
		}
		off := ps.sendPiece * payload
		n := min(payload, nbytes-off)
		slot := m % rs
		raddr := l.rAddr + slot*uint64(l.rSlotSize)
		if n > 0 {
			src := buf[o.Off*es+off : o.Off*es+off+n]
			if err := l.conn.PostWrite(0, src, l.dev.cur[o.Buf], 0, raddr+hdrSize, l.rKey); err != nil {
				return moved, false, err
			}
		}
		h := l.hdrs.Bytes()[slot*hdrSize : (slot+1)*hdrSize]
		putHeader(h, call, n, false)
		if err := l.conn.PostWriteImm(m, h, l.hdrs, rdma.FlagSignaled, raddr, l.rKey, uint32(m)); err != nil {
			return moved, false, err
		}
		l.posted++
		ps.sendPiece++
		moved = true
	}
	return moved, true, nil
}

// consume applies arrived messages to receive o.
func (e *Engine) consume(l *Link, o *Op, call *Call, ps *peerState, es int) (moved, complete bool, err error) {
	nbytes := o.Len * es
	payload := l.slotSize - hdrSize
	np := pieces(nbytes, payload)
	direct := o.Kind == Recv && nbytes >= DirectMin
	if direct {
		np = 1
		if !ps.ctsSent {
			mr := l.dev.cur[Work]
			dst := call.Work[o.Off*es : o.Off*es+nbytes]
			if err := l.sendCtrl(ctrlCTS, mr.RKey(), rdma.AddrOf(dst)); err != nil && !l.closed.Load() {
				e.Abort(l.Peer, fmt.Errorf("%w: %w", ErrPeerFailed, err))
				return moved, false, err
			}
			ps.ctsSent = true
			moved = true
		}
	}
	stage := l.stage.Bytes()
	for ps.recvPiece < np {
		if l.consumed >= l.arrived.Load() {
			return moved, false, nil
		}
		base := int(l.consumed%uint64(l.slots)) * l.slotSize
		off := ps.recvPiece * payload
		want := min(payload, nbytes-off)
		if direct {
			want = nbytes
		}
		if why := checkHeader(stage[base:base+hdrSize], call, want, direct); why != "" {
			// The peer may have aborted after sending: its notice follows
			// its data on this connection. Give it a moment to land.
			select {
			case <-e.dead:
			case <-time.After(50 * time.Millisecond):
			}
			e.Abort(l.Peer, fmt.Errorf("%w: %s", ErrMismatch, why))
			return moved, false, ErrMismatch
		}
		if want > 0 && !direct {
			dst := call.Work[o.Off*es+off : o.Off*es+off+want]
			src := stage[base+hdrSize : base+hdrSize+want]
			if o.Kind == RecvReduce {
				kernels.ReduceBytes(call.DType, call.Op, dst, src)
			} else {
				copy(dst, src)
			}
		}
		l.consumed++
		ps.recvPiece++
		moved = true
		if err := l.sendCtrl(ctrlCredit, 1, 0); err != nil && !l.closed.Load() {
			e.Abort(l.Peer, fmt.Errorf("%w: %w", ErrPeerFailed, err))
			return moved, false, err
		}
	}
	return moved, true, nil
}

// Header layout (little endian): magic u32, seq u32, coll u8, dtype u8,
// op u8, direct u8, root i32, len u32, pad u32, count u64.
func putHeader(h []byte, c *Call, n int, direct bool) {
	binary.LittleEndian.PutUint32(h[0:], hdrMagic)
	binary.LittleEndian.PutUint32(h[4:], c.Seq)
	var d byte
	if direct {
		d = 1
	}
	h[8], h[9], h[10], h[11] = byte(c.Coll), byte(c.DType), byte(c.Op), d
	binary.LittleEndian.PutUint32(h[12:], uint32(int32(c.Root)))
	binary.LittleEndian.PutUint32(h[16:], uint32(n))
	binary.LittleEndian.PutUint64(h[24:], uint64(c.Count))
}

// checkHeader returns "" if h matches c and a payload of want bytes, or
// what differs.
func checkHeader(h []byte, c *Call, want int, direct bool) string {
	if binary.LittleEndian.Uint32(h[0:]) != hdrMagic {
		return "corrupt header"
	}
	coll := Collective(h[8])
	switch {
	case coll != c.Coll:
		return fmt.Sprintf("it called %s, this rank %s", coll, c.Coll)
	case binary.LittleEndian.Uint32(h[4:]) != c.Seq:
		return fmt.Sprintf("it is at operation %d, this rank at %d", binary.LittleEndian.Uint32(h[4:]), c.Seq)
	case kernels.DType(h[9]) != c.DType:
		return fmt.Sprintf("element type %s, this rank %s", kernels.DType(h[9]), c.DType)
	case kernels.Op(h[10]) != c.Op:
		return fmt.Sprintf("op %s, this rank %s", kernels.Op(h[10]), c.Op)
	case int(int32(binary.LittleEndian.Uint32(h[12:]))) != c.Root:
		what := "root"
		if c.Coll == SendRecv {
			what = "tag"
		}
		return fmt.Sprintf("%s %d, this rank %d", what, int32(binary.LittleEndian.Uint32(h[12:])), c.Root)
	case binary.LittleEndian.Uint64(h[24:]) != uint64(c.Count):
		return fmt.Sprintf("count %d, this rank %d", binary.LittleEndian.Uint64(h[24:]), c.Count)
	case (h[11] == 1) != direct:
		return "it sent a direct message where this rank expects a staged one, or the reverse"
	case int(binary.LittleEndian.Uint32(h[16:])) != want:
		return fmt.Sprintf("message of %d bytes, this rank expects %d", binary.LittleEndian.Uint32(h[16:]), want)
	}
	return ""
}
