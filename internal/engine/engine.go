package engine

// The executor.
//
// An Engine owns the links of one communicator and runs one Plan (a
// compiled Schedule) at a time on the caller's goroutine. For every peer
// the plan lists its sends and receives in program order. The run loop,
// for each peer:
//   - marks sends complete whose last header write has completed (or
//     whose payload was copied when it was posted, or the peer consumed);
//   - posts the next send's pieces (one message per staging slot of the
//     peer) while its deps are done and the peer has credits;
//   - applies arrived messages to the next receive while its deps are done
//     (reduce with internal/kernels, or copy);
//
// then polls the devices' completion queues itself (dispatching each
// completion to its link, device.go), and when nothing moved, waits as its WaitPolicy says (wait.go): polls,
// then arms the CQs and sleeps until a dispatch wakes it, the context
// ends, the timeout passes or the engine fails. No goroutine sits between
// a completion and the engine on that path. A Run returns as soon as its
// own ops are done: it does not wait for its last messages to be consumed.
// Every message header carries the call's signature (sequence number,
// collective, element type, op, root, count); a receiver that finds a
// different one fails with ErrMismatch naming the sender and aborts the
// communicator: abort notices go to every peer, whose pending and later
// operations then fail with the same attribution (a rank that finished
// the mismatched call fails its next one). The loop allocates nothing once
// its state has grown to the largest plan run so far.

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorun-hpc/gorun/collectives"
	"github.com/gorun-hpc/gorun/internal/kernels"
	"github.com/gorun-hpc/gorun/internal/release"
	"github.com/gorun-hpc/gorun/transport/rdma"
)

// Plan is a Schedule compiled for execution: its ops grouped per peer.
type Plan struct {
	S      *collectives.Schedule
	peers  []planPeer
	linked bool // every peer has a link (Missing); links are never removed
	small  bool // no op moves more than smallOp elements (wait.go: leaveCPU)
}

// smallOp is the most elements of an op in a small plan: 64 KiB of 8-byte
// elements.
const smallOp = 8 << 10

type planPeer struct {
	peer         int
	sends, recvs []int32
}

// Compile groups s's ops by peer.
func Compile(s *collectives.Schedule) *Plan {
	p := &Plan{S: s, small: true}
	idx := map[int]int{}
	for i, o := range s.Ops {
		p.small = p.small && o.Len <= smallOp
		j, ok := idx[o.Peer]
		if !ok {
			j = len(p.peers)
			idx[o.Peer] = j
			p.peers = append(p.peers, planPeer{peer: o.Peer})
		}
		if o.Kind == collectives.Send {
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
	Coll  collectives.Collective
	DType kernels.DType
	Op    kernels.Op
	Root  int // root, or the tag of a point-to-point message
	Count int
	Seq   uint32 // per-communicator sequence number (per pair for point-to-point)
	Work  []byte
	Input []byte
	Stats *OpStats // nil, or filled in by Run (stats.go)
	// Sigs are the per-message signatures that ops with Op.Sig name (only
	// Coll, DType, Op, Root, Count and Seq are read); nil for a call whose
	// messages all carry its own.
	Sigs []Call
}

// Engine runs plans over a set of links; see the file comment.
type Engine struct {
	Rank, Size int
	links      []atomic.Pointer[Link]  // by rank; nil for self and unconnected (AddLink)
	linkList   atomic.Pointer[[]*Link] // the links made, in the order they came (stray); copied on AddLink
	devs       []*Device

	wake     chan struct{}
	dead     chan struct{}
	sleeping atomic.Bool // Run is about to block: dispatch pokes wake
	wait     WaitPolicy
	procs    int // GOMAXPROCS when the policy was set (wait.go)

	mu     sync.Mutex
	err    error
	from   uint64 // the failure's notice (abort)
	closed bool
	failed atomic.Bool
	timer  *time.Timer
	runMu  sync.Mutex // held by Run; Close waits for it

	// next is 1<<32 | the number of the collective after the last one Run
	// completed; 0 before the first. pending is a peer's withdrawal that
	// fails a later call (failure.go).
	next    atomic.Uint64
	pending atomic.Pointer[withdrawal]

	mm mismatchState
	// lastCall and prevCall are the last two collective calls Run
	// started, each packCall(opOf(call), its hash) (0: none), kept
	// after they return: a rank reports them while ranks decide who
	// called differently (mismatch.go).
	lastCall, prevCall atomic.Uint64
	// waits are the peers' words that they wait for this rank in an
	// operation (ctrlWaiting), the last per peer, until this rank's Run
	// of that operation compares them (checkWaits); waited: there are
	// some.
	waitsMu sync.Mutex
	waits   map[int][2]uint32
	waited  atomic.Bool
	// p2pWaits are the peers' words that a point-to-point Run of theirs
	// waits for this rank (ctrlP2PWaiting), the last per peer, under
	// waitsMu; p2pWaited: there are some (checkBlockedPeers).
	p2pWaits  map[int]p2pWaitWord
	p2pWaited atomic.Bool
	// p2pLabels are the peers' labels (ctrlP2PLabel), the last per peer,
	// under waitsMu, until a point-to-point Run takes them (passLabels);
	// p2pWaited is set for them too.
	p2pLabels map[int]p2pLabelMsg
	// labelSeq is the number of the last label sent each peer, labelAck
	// that of the last taken from each (passLabels); Run only.
	labelSeq, labelAck map[int]uint8
	// labelsDue: a label or a word came since passLabels last looked.
	labelsDue atomic.Bool
	// waitWords counts the words taken (waitedOn), for tests.
	waitWords atomic.Int64
	// runs is twice the Runs ended, plus one while a Run is in progress:
	// written by Run alone (under runMu), read by the devices' watchers.
	runs atomic.Uint64

	st runState

	leftCPU int64 // monoNow of the last leaveCPU (wait.go); Run only

	// names is what the engine's texts call each rank (NameRanks); nil:
	// the rank itself. Read only where a text is built, on failure.
	names atomic.Pointer[[]int]
}

type runState struct {
	done     []bool
	sendLast []uint64
	pp       []peerState
}

type peerState struct {
	sendCur, sendFin, recvCur int
	sendPiece, recvPiece      int
	ctsCur                    int    // next receive (index in recvs) to clear ahead
	sendRead                  uint64 // the current send's last piece posted from its buffer, +1 (post)
	refused                   bool   // the current send is direct, and its receiver cleared another message (refuseDirect)
}

// DirectMin is the smallest op (in bytes) sent directly into the receiver's
// buffer rather than through its staging slots, but for point-to-point
// messages and broadcasts on tcp (Link.directMinOf).
const DirectMin = 64 << 10

// tcpDirectMin is DirectMin for point-to-point messages and broadcasts on
// tcp. A direct message costs a round trip more (the receiver's
// clear-to-send) and saves the receiver's copy out of its staging slot;
// over TCP the round trip is tens of microseconds, and the payload is read
// from the socket either way. Measured over TCP loopback, 2026-11-30,
// rotated rounds, medians, builds with a higher threshold against
// DirectMin:
//   - 2 ranks, an ISend+IRecv exchange of 64 KiB: 44-47 µs staged against
//     68-73 direct (3 rounds); at 256 and 512 KiB, staged against direct,
//     neither ahead;
//   - 2 ranks, a broadcast of 64 KiB: 25-26 against 37-47;
//   - 4 ranks, broadcasts in 64 KiB pieces (below 4 MiB; 4 rounds):
//     64 KiB 142-203 against 210-360, 256 KiB 273-441 against 452-615,
//     1 MiB 903-2,011 against 1,577-2,235; in 256 KiB pieces (4 MiB and
//     more) staging was the slower (4 MiB 3,907-5,247 against
//     3,610-6,453, slower in 4 of 6 rounds), hence 128 KiB;
//   - but 4 ranks, allreduce: with its 64 and 128 KiB pieces staged, 256
//     KiB took 479-620 against 456-482 and 512 KiB 867-1,233 against
//     753-836. A ring's later pieces are cleared while earlier steps run,
//     which hides the trip, where a lone message or a broadcast's waits
//     for it. So the other collectives keep DirectMin.
//
// Both ends of a link run one provider and one call, so they still agree
// without negotiation.
const tcpDirectMin = 128 << 10

// directMinFor is the smallest direct point-to-point message or broadcast
// on a link of provider (Link.directMinOf).
func directMinFor(provider string) int {
	if provider == "tcp" {
		return tcpDirectMin
	}
	return DirectMin
}

// directMinOf is the smallest direct message of call on l.
func (l *Link) directMinOf(call *Call) int {
	if call.Coll == collectives.SendRecv || call.Coll == collectives.Broadcast {
		return l.directMin
	}
	return DirectMin
}

// maxWrite bounds one posted write of a direct message.
const maxWrite = 4 << 20

// NewEngine makes the engine of links (indexed by rank), whose devices
// are devs, with DefaultWait.
func NewEngine(rank, size int, links []*Link, devs []*Device) *Engine {
	e := &Engine{Rank: rank, Size: size, links: make([]atomic.Pointer[Link], size),
		wake: make(chan struct{}, 1), dead: make(chan struct{}), wait: DefaultWait(1)}
	list := make([]*Link, 0, len(links))
	for r, l := range links {
		e.links[r].Store(l)
		if l != nil {
			list = append(list, l)
		}
	}
	e.linkList.Store(&list)
	// Only the devices that carry links are polled (a rank whose peers
	// are all on shm does not poll its tcp device).
	for _, d := range devs {
		for _, l := range links {
			if l != nil && l.dev == d {
				e.devs = append(e.devs, d)
				d.watchEngine(e)
				break
			}
		}
	}
	e.timer = time.NewTimer(time.Hour)
	e.timer.Stop()
	for _, l := range links {
		if l != nil {
			l.attach(e)
		}
	}
	return e
}

// NameRanks makes every text the engine builds (a mismatch's, a
// timeout's, a cycle's, a connection's) call rank r names[r]: a
// sub-communicator's engine names the ranks of the communicator the user
// called on. Ranks outside names, and nil, are called by their own
// number. Ranks in fields (PeerError.Rank, abort notices) stay the
// engine's. Safe at any time; call it before connecting so that every
// text has it.
func (e *Engine) NameRanks(names []int) {
	if names == nil {
		e.names.Store(nil)
		return
	}
	names = slices.Clone(names)
	e.names.Store(&names)
}

// Name is what the engine's texts call rank r (NameRanks).
func (e *Engine) Name(r int) int {
	if n := e.names.Load(); n != nil && r >= 0 && r < len(*n) {
		return (*n)[r]
	}
	return r
}

// SetWait sets how Run waits; call it before the first Run.
//
// Go's sysmon thread is left at its normal priority, though its wake-ups
// preempt a spinning rank in a job's first milliseconds (README, "Go's
// sysmon thread"). From 2026-11-24 to 11-25 a spinning policy put it in
// SCHED_IDLE, and that froze ranks whenever other processes kept the
// CPUs busy: with one P per rank, a goroutine blocked in a system call
// (a provider's futex wait while the engine sleeps) keeps the P until
// sysmon takes it back, and a compute loop runs on until sysmon preempts
// it, so memberlist's probes went unanswered and tcp handshakes timed
// out. Live ranks were declared dead: CI's TestCluster/nnodes-2x2, and
// 8 of 9 runs beside four CPU-bound loops (nice 19 instead: 3 of 3; at
// normal priority 6 of 6 passed).
//
// A policy that spins without yielding (every local rank has a CPU)
// raises the timer slack of sysmon instead, so that it wakes less often
// (slowSysmon, sysmon_linux.go).
func (e *Engine) SetWait(p WaitPolicy) {
	e.wait = p
	e.procs = runtime.GOMAXPROCS(0)
	if p.Spin > 0 && !p.Yield {
		slowSysmon()
	}
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

// Run executes plan p for call; timeout > 0 bounds it, counted from its
// first wait (wait.go: a Run that never waits reads no clock). Errors are
// *PeerError values naming the rank at fault (or being waited for).
func (e *Engine) Run(ctx context.Context, p *Plan, call *Call, timeout time.Duration) error {
	e.runMu.Lock()
	defer e.runMu.Unlock()
	if e.failed.Load() || e.pending.Load() != nil {
		if err := e.admit(call); err != nil {
			return err
		}
	}
	if statsBuilt && call.Stats != nil {
		call.Stats.begin()
	}
	if len(p.S.Ops) == 0 {
		e.completed(call)
		return nil
	}
	if call.Coll != collectives.SendRecv {
		release.Store64(&e.prevCall, e.lastCall.Load())
		release.Store64(&e.lastCall, packCall(opOf(call), callHash(call)))
		if e.waited.Load() {
			e.checkWaits(opOf(call), callHash(call))
		}
		if e.mm.open.Load() {
			e.reportCalls() // a mismatch is being decided: this call counts
		}
	}
	for _, d := range e.devs {
		// Registered on first use (bufMR): a call whose messages all
		// travel copied needs no registration.
		d.cur = [2]*rdma.MR{}
	}
	release.Store64(&e.runs, e.runs.Load()+1) // odd: in a Run (Device.runs)
	defer e.idle()
	e.st.reset(len(p.S.Ops), len(p.peers))
	w := waiter{e: e, ctx: ctx, p: p, call: call, timeout: timeout} // the deadline is set at its first look at the clock (wait.go)
	remaining := len(p.S.Ops)
	for {
		// Step first: the sends whose deps are met go out before this
		// rank spends a poll on messages that may not be there yet.
		progress, n, err := e.step(p, call)
		if err != nil {
			e.revokeDirect(call)
			return err
		}
		remaining -= n
		if remaining == 0 {
			e.completed(call)
			return nil
		}
		if e.poll() > 0 {
			progress = true
		}
		if progress {
			w.reset()
			continue
		}
		if err := w.idle(); err != nil {
			e.revokeDirect(call)
			return err
		}
	}
}

// revokeWait bounds revokeDirect's wait for the writes into a buffer
// already under way: a peer stopped in the middle of one (SIGSTOP) holds
// it as long as it is stopped.
const revokeWait = time.Second

// revokeDirect deregisters call's work buffer, for a Run that failed, on
// each device where a clear-to-send for it is outstanding: the peer may
// not have seen this rank's abort yet, and would write the buffer's
// address and rkey after Run returned, into memory the caller has back.
// Deregistration refuses such a write (a remote access error on the
// peer's link) and waits for one under way. A write held past revokeWait
// by a stopped peer may still land; the buffer then stays registered.
func (e *Engine) revokeDirect(call *Call) {
	for _, d := range e.devs {
		if d.cur[collectives.Work] == nil || !e.clearedOn(d) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), revokeWait)
		_ = d.Cache.Revoke(ctx, call.Work) // the call failed already; a failure here is the case above
		cancel()
		d.cur[collectives.Work] = nil
	}
}

// clearedOn reports whether a link of d has clear-to-sends outstanding:
// sent, and the direct message each asked for not received.
func (e *Engine) clearedOn(d *Device) bool {
	for i := range e.links {
		if l := e.links[i].Load(); l != nil && l.dev == d && l.ctsSent > l.directDone {
			return true
		}
	}
	return false
}

// completed notes that Run completed call (Withdraw's notice).
func (e *Engine) completed(call *Call) {
	if call.Coll != collectives.SendRecv {
		release.Store64(&e.next, 1<<32|uint64(call.Seq+1))
	}
}

// bufMR returns the registration of the running call's buffer b on d,
// registering it on first use in this Run.
func (e *Engine) bufMR(d *Device, call *Call, b collectives.Buf) (*rdma.MR, error) {
	if mr := d.cur[b]; mr != nil {
		return mr, nil
	}
	buf := call.Work
	if b == collectives.Input {
		buf = call.Input
	}
	mr, err := d.Cache.Get(buf)
	if err != nil {
		return nil, &localError{err}
	}
	d.cur[b] = mr
	return mr, nil
}

// localError is a failure of this rank's own (registration), not of the
// link it happened on.
type localError struct{ err error }

func (e *localError) Error() string { return e.err.Error() }
func (e *localError) Unwrap() error { return e.err }

// ownError is err as this rank's PeerError if it is a localError, else nil.
func (e *Engine) ownError(err error) error {
	if le, ok := err.(*localError); ok {
		return &PeerError{Rank: e.Rank, Err: le.err}
	}
	return nil
}

// idle ends a Run on the engine's devices.
func (e *Engine) idle() {
	if e.sleeping.Load() { // a locked exchange only when it was set
		e.sleeping.Store(false)
	}
	release.Store64(&e.runs, e.runs.Load()+1)
}

// poll handles the completions waiting on every device.
func (e *Engine) poll() int {
	n := 0
	for _, d := range e.devs {
		n += d.tryPoll(e)
	}
	return n
}

// drain handles the completions the devices hold, waiting for a poll
// that another goroutine (the watcher, another engine on the device) has
// under way, where poll would give up: for a failure path, where a notice
// among them decides whom the failure names. A withdrawal's notice comes
// before the withdrawing rank's bye on its link, so a send that failed
// because that rank closed finds the notice handled once this returns.
// Bounded: new completions may keep arriving.
func (e *Engine) drain() {
	for _, d := range e.devs {
		d.pollMu.Lock()
		for range 64 {
			if d.pollLocked(e) == 0 {
				break
			}
		}
		d.pollMu.Unlock()
	}
}

// step moves every peer of p as far as it can; it reports whether
// anything moved and how many ops completed.
func (e *Engine) step(p *Plan, call *Call) (progress bool, completed int, err error) {
	st := &e.st
	es := call.DType.Size()
	for i := range p.peers {
		pp, ps := &p.peers[i], &st.pp[i]
		l := e.links[pp.peer].Load()
		if l == nil {
			return false, 0, &PeerError{Rank: pp.peer, Err: fmt.Errorf("no connection: %w", ErrPeerFailed)}
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
			completed++
			progress = true
		}
		for ps.sendCur < len(pp.sends) {
			op := pp.sends[ps.sendCur]
			o := &p.S.Ops[op]
			if !st.ready(o) {
				break
			}
			moved, complete, last, err := e.post(l, o, call, ps, es)
			if err != nil {
				if own := e.ownError(err); own != nil {
					return false, 0, own
				}
				// A withdrawal this call reaches comes first: the peer may
				// have closed or failed because of it (idle). Its notice
				// may be among the completions not yet handled, or in a
				// batch another goroutine is dispatching (drain).
				e.drain()
				if err := e.admit(call); err != nil {
					return false, 0, err
				}
				if l.closed.Load() {
					e.Abort(l.Peer, ErrPeerClosed)
				} else {
					e.blameLink(l, err)
				}
				return false, 0, e.Err()
			}
			progress = progress || moved
			if !complete {
				break
			}
			st.sendLast[op] = last
			ps.sendCur++
			ps.sendPiece = 0
		}
		if moved, err := e.clearAhead(l, p, pp, ps, call, es); err != nil {
			if own := e.ownError(err); own != nil {
				return false, 0, own
			}
			return false, 0, e.Err()
		} else if moved {
			progress = true
		}
		for ps.recvCur < len(pp.recvs) {
			op := pp.recvs[ps.recvCur]
			o := &p.S.Ops[op]
			if !st.ready(o) {
				break
			}
			moved, complete, err := e.consume(l, o, call, ps, es)
			if err != nil {
				return false, 0, e.Err()
			}
			progress = progress || moved
			if !complete {
				break
			}
			st.done[op] = true
			completed++
			ps.recvCur++
			ps.recvPiece = 0
		}
	}
	return progress, completed, nil
}

// needsClosedPeer names a peer that has closed the communicator while p
// still needs it: data it never sent, credits for messages it never
// consumed, or sends p has yet to post to it. A peer's bye follows all it
// sent, in order, so once closed is seen every message it sent is counted
// in arrived; a receive that has consumed them all can get no more.
func (e *Engine) needsClosedPeer(p *Plan) (int, bool) {
	for i := range p.peers {
		pp, ps := &p.peers[i], &e.st.pp[i]
		l := e.links[pp.peer].Load()
		if !l.closed.Load() {
			continue
		}
		awaitsData := ps.recvCur < len(pp.recvs) && l.consumed >= l.arrived.Load() && l.mb.next() == nil
		if awaitsData || ps.sendCur < len(pp.sends) || l.credits.Load() < l.posted {
			return pp.peer, true
		}
	}
	return 0, false
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
		if l := e.links[pp.peer].Load(); l.credits.Load() < l.posted || ps.sendFin < ps.sendCur {
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

func (st *runState) ready(o *collectives.Op) bool {
	for _, d := range o.Deps {
		if !st.done[d] {
			return false
		}
	}
	return true
}
