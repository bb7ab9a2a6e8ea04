package engine

// Waiting: what Run does when nothing can move. It polls the devices' CQs
// for WaitPolicy.Spin (handling every completion itself), giving the CPU
// to other processes between polls when ranks outnumber CPUs (Yield, as
// Open MPI's mpi_yield_when_idle), then arms the CQs, looks once more, and
// sleeps until a completion's dispatch, an abort, its context or its
// timeout wakes it, or strayEvery has passed.

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	"github.com/gorun-hpc/gorun/collectives"
)

// WaitPolicy says how Run waits for its peers.
type WaitPolicy struct {
	// Spin is how long Run polls before it sleeps; 0 sleeps at once.
	Spin time.Duration
	// Yield gives the CPU to other processes (sched_yield) between polls.
	Yield bool
	// InProcess says the ranks are goroutines of this process sharing its
	// threads (comm.NewLocal): an idle poll hands the thread to them
	// (runtime.Gosched) instead. A sched_yield would keep the P, and the
	// rank it waits for could not run until this Run slept or reached
	// its next Gosched, 16 idle polls (16 system calls) later. With it
	// against without (comm's BenchmarkAllReduce, mem, ring, 3 interleaved
	// rounds, 2026-11-27, quiet machine, µs): 4 ranks 8 B 39-52 -> 6.4-7.0,
	// 64 KiB 56-69 -> 20-21; 8 ranks 8 B 144-151 -> 17-18, 64 KiB 223-226
	// -> 63-66; 4 ranks 1 MiB 174-193 -> 113-116; 2 ranks level or faster.
	InProcess bool
}

// DefaultSpin is the polling time before a sleep. A wake-up across CPUs
// costs 13–20 µs on the machines measured, so a wait shorter than this is
// cheaper spent polling; a longer one costs one wake-up besides.
const DefaultSpin = time.Millisecond

// DefaultWait is the policy for localRanks ranks on this host: poll for
// DefaultSpin, yielding the CPU between polls when the ranks outnumber the
// CPUs.
func DefaultWait(localRanks int) WaitPolicy {
	return WaitPolicy{Spin: DefaultSpin, Yield: localRanks > runtime.NumCPU()}
}

// yieldAfter is how many idle polls a Run makes before it yields the CPU
// where ranks outnumber CPUs (Yield): there the peer it waits for is as
// likely to wait for this CPU as to be about to answer from another, and an
// idle poll costs as much as a yield (a tcp poll is a read per connection).
// With 32, 4 ranks on 2 CPUs held a CPU ~220 us between switches (tcp,
// sched_switch trace); 1 against 32, interleaved (allreduce_perf 8 B, -n
// 1000, 5-6 rounds, 2026-11-24): tcp allreduce 350 -> 253 us and barrier
// 298 -> 210 us, shm barrier 25.9 -> 18.4 us and allreduce 30 -> 27 us
// (medians). Open MPI's mpi_yield_when_idle yields at every idle poll.
var yieldAfter = 1

// shareAfter is how long a Run polls before it yields the CPU, and then
// how often, even where every rank has a CPU of its own. A peer on another
// CPU answers within a few microseconds; one that has not answered by now
// may be waiting for this CPU: the scheduler can put two ranks on one CPU
// for a while (at start, or when other work keeps the others busy), and a
// spin that never yields then costs each operation the whole Spin. A
// system call costs 1.1-1.5 us on the machine measured: at 10 us a 1 MiB
// allreduce lost 5-20% to yields between its chunks.
const shareAfter = 100 * time.Microsecond

// A rank that sleeps and is woken by its peer is often put on the peer's
// CPU by the scheduler (it wakes a task near its waker), and two ranks
// that then spin on one CPU take a whole shareAfter per operation until
// the load balancer parts them, 10-20 ms later: 60-200 calls of 110-120 µs
// each after every idle stretch (2 ranks on shm, the first 200 allreduces
// after a 1 s pause, in buckets of 10; 2026-11-24). A small operation
// (Plan.small) that waits past shareAfter, a hundred round trips, is most
// likely in that state, so it moves its thread to another CPU (leaveCPU),
// at most once per leaveAfter. Only odd ranks move: two ranks that both
// moved would swap CPUs and share one again. A large operation is not
// moved: its peer may be busy on the other CPU.
const leaveAfter = time.Millisecond

// unstarted counts the goroutines started through Go that have not run
// yet. A Run that finds one idles by handing its thread to it
// (runtime.Gosched) rather than polling: with one P per rank (the
// launcher's GOMAXPROCS), a new goroutine waits in the P's run queue
// until the running one stops, and a Run stops only at every 16th idle
// look (or once per shareAfter with Ps to spare). Where ranks outnumber
// CPUs, the looks between are sched_yields that may each run another
// process for a while. The hierarchical allreduce between two hosts
// (comm's hierExchange: an ISend on one communicator, its goroutine
// started by the flush, then a Recv on another) waited 70-100 µs for its
// send to start: 2 namespace hosts x 2 ranks on 2 CPUs, unshaped veth,
// 2026-11-30, the exchange of 16 KiB took a median 124-201 µs before and
// 41-91 µs after (8 medians of 400 each way), and the 64 KiB allreduce
// on the 2 Gbit/s cluster 268-380 µs before and 189-272 after (Open MPI
// 195-285; bench/compare/CLUSTER.md). Handing the thread over at every
// idle look while two Runs of the process wait (a count of them) was
// tried as well: the exchange of 64 KiB took 215-286 µs with it and
// 236-307 without, no clear gain for a count on every Run's idle path.
var unstarted atomic.Int32

// Procs is the GOMAXPROCS the engine's wait policy was set under
// (SetWait).
func (e *Engine) Procs() int { return e.procs }

// Go runs f on a goroutine of its own, as a go statement does, and has
// every idle Run hand its thread to it until it runs. For the goroutines
// that run operations a caller may wait for from another communicator's
// Run: a non-blocking request, a group of point-to-point messages.
func Go(f func()) {
	unstarted.Add(1)
	go func() {
		unstarted.Add(-1)
		f()
	}()
}

// Task is an operation Start runs on a goroutine of its own.
type Task interface{ Run() }

// startQ carries the tasks of Start to the goroutines it starts for them:
// each such goroutine runs one task from it, whichever it finds first.
// Its capacity bounds only the tasks not yet picked up; past it Start
// falls back on a closure.
var startQ = make(chan Task, 256)

// Start runs t on a goroutine of its own, as Go does, but without
// allocating (Go's f is a closure the caller allocated, and Go's go
// statement another): the goroutine runs a function that captures
// nothing and takes t from startQ. For the non-blocking collectives,
// whose Task is their Request.
func Start(t Task) {
	unstarted.Add(1)
	select {
	case startQ <- t:
		go runStarted()
	default:
		go func() {
			unstarted.Add(-1)
			t.Run()
		}()
	}
}

// runStarted runs a task of startQ; Start sent one before it started this.
func runStarted() {
	t := <-startQ
	unstarted.Add(-1)
	t.Run()
}

// waiter is one Run's waiting state.
type waiter struct {
	e        *Engine
	ctx      context.Context
	p        *Plan
	call     *Call
	timeout  time.Duration
	deadline int64 // monoNow; 0 none

	idleN int   // consecutive idle steps
	since int64 // when the current idle stretch was first timed; 0 not yet
	share int64 // when this Run last yielded past shareAfter
	armed bool  // the CQs are armed and sleeping is set
	owed  bool  // flushOwed has not run in this idle stretch

	idleFrom int64 // when this Run last stopped moving (monoNow); 0 moving
	strayAt  int64 // when it last looked for strays (Engine.stray)
	told     []int // the peers it has told it waits for them (tellWaiting), once each
	// toldDirect: the messages it has told their receivers it waits to
	// send (checkDirect), once each.
	toldDirect []directTold
	// toldBlocked: the words this point-to-point Run has sent its peers
	// that it waits for them (tellBlocked), each once.
	toldBlocked []blockedTold
	// label: the highest rank this point-to-point Run has heard of down
	// the chain of Runs it waits for (passLabels), once labeled;
	// labelSent: the last label it sent each rank that waits for it.
	label     p2pLabel
	labeled   bool
	labelSent []labelSent
	waitsOn   []int // the peers it waited for at its last passLabels
}

// strayAfter is how long a Run waits without progress before it looks for
// a message of its call from another call on links it is not reading
// (Engine.stray), and then how often; a sleep lasts at most strayEvery,
// so that a message that came while it slept on another link is looked
// at too. Only waits this long pay for the look.
const (
	strayAfter = 5 * time.Millisecond
	strayEvery = 100 * time.Millisecond
)

// suspectAfter is how long a Run whose caller's deadline passes must have
// waited without progress to name the peer it waits for rather than
// itself (ctxDone): longer than a loaded machine keeps a working peer
// off its CPU.
const suspectAfter = 100 * time.Millisecond

// smallCreditsAfter is how long a Run of a small plan waits before it
// returns the credits it owes in a message of their own (flushOwed); a
// large plan returns them at once, to keep its peers' pipelines full. A
// small plan's peers seldom wait for them (the next data message carries
// them), and each such message is a packet and a look at the queue for a
// peer that may not be running: 4 namespace hosts x 1 rank on 2 CPUs,
// tcp, 8 B allreduce, about 2 of the 8 packets per call at each host. It
// never sleeps before it has returned them: a peer may wait for them.
const smallCreditsAfter = 50 * time.Microsecond

// flush returns the credits owed (flushOwed), once per idle stretch.
func (w *waiter) flush() error {
	w.owed = false
	return w.e.flushOwed(w.p)
}

// reset is called after progress.
func (w *waiter) reset() {
	if w.armed {
		w.e.sleeping.Store(false)
		w.e.lowerFlags(w.p)
		w.armed = false
	}
	w.idleN = 0
	w.idleFrom = 0
}

// heard says whether the Run has taken a message from a peer: that peer
// worked on the call.
func (w *waiter) heard() bool {
	for i := range w.p.peers {
		if ps := &w.e.st.pp[i]; ps.recvCur > 0 || ps.recvPiece > 0 {
			return true
		}
	}
	return false
}

// idle is called after a step that moved nothing; it returns an error that
// ends the Run.
func (w *waiter) idle() error {
	e := w.e
	if w.idleN == 0 {
		w.since = 0
		w.owed = true
		if !w.p.small {
			if err := w.flush(); err != nil {
				return err
			}
		} else {
			e.tellRead(w.p) // a mailbox writer may be waiting for cells
		}
	}
	w.idleN++
	if w.idleN&15 != 0 && !w.armed {
		switch {
		case e.wait.InProcess || unstarted.Load() > 0:
			runtime.Gosched()
		case e.wait.Yield && w.idleN > yieldAfter:
			yieldCPU()
		default:
			spinPause() // pause_amd64.go
		}
		return nil
	}
	// A withdrawal this call reaches first: a peer that closed may have
	// closed because of it, and its notice came before its bye.
	if e.pending.Load() != nil {
		if err := e.admit(w.call); err != nil {
			return err
		}
	}
	if peer, ok := e.needsClosedPeer(w.p); ok {
		e.Abort(peer, ErrPeerClosed) // the others may wait on this rank
		return e.Err()
	}
	select {
	case <-e.dead:
		return e.Err()
	case <-w.ctx.Done():
		return w.ctxDone()
	default:
	}
	// The clock is read here first, 16 idle polls into a stretch: most
	// small operations end sooner, and a clock read costs 25-50 ns in a
	// VM. The stretch's spin and the Run's deadline count from here.
	now := monoNow()
	if w.since == 0 {
		w.since = now
		if w.deadline == 0 && w.timeout > 0 {
			w.deadline = now + int64(w.timeout)
		}
	}
	if w.deadline > 0 && now >= w.deadline {
		return w.timedOut()
	}
	if w.idleFrom == 0 {
		w.idleFrom = now
	}
	if w.owed && (now-w.since >= int64(smallCreditsAfter) || now-w.since >= int64(e.wait.Spin)) {
		if err := w.flush(); err != nil {
			return err
		}
	}
	if now-w.since < int64(e.wait.Spin) {
		share := now-w.since >= int64(shareAfter) && now-w.share >= int64(shareAfter)
		if share {
			w.share = now
		}
		if share || e.procs == 1 {
			// Other goroutines of this process (a provider's, the
			// devices' watchers) may need this thread: at every
			// 16th look where there is one P, else once per
			// shareAfter (for when every P is busy). With a P idle,
			// Gosched wakes an idle thread (wakep), which finds the
			// Run's goroutine or nothing and sleeps again, a futex
			// wake and a context switch on a CPU a peer rank needs:
			// shm, 2 ranks, 8 B allreduce, 10 interleaved pairs,
			// near placement: 0.328 -> 0.300 us, faster in 10 of
			// 10; far: 0.565 -> 0.550, 9 of 10. Where ranks
			// outnumber CPUs (Yield) with Ps to spare: 4 namespace
			// hosts x 1 rank on 2 CPUs, GOMAXPROCS 2, tcp, 8 B,
			// 2026-11-27, 3 pairs: 126-147 -> 102-124 us, 30 -> 0.15
			// futex calls per operation. (With one P, the common
			// case there, nothing changes: 4 ranks on 2 CPUs on shm
			// had measured both faster and slower without it.)
			runtime.Gosched()
		}
		if e.wait.Yield {
			yieldCPU()
		} else if share {
			// Once per shareAfter: one yield hands the CPU to a peer
			// that waits for it, and a long wait for a peer on
			// another CPU (a large message) pays few system calls.
			yieldCPU()
			if w.p.small && e.Rank&1 == 1 && now-e.leftCPU >= int64(leaveAfter) {
				e.leftCPU = now
				leaveCPU()
			}
		}
		return nil
	}
	if now-w.idleFrom >= int64(strayAfter) && now-w.strayAt >= int64(strayAfter) {
		w.strayAt = now
		if e.stray(w.call) != nil || e.checkDirect(w) != nil {
			return e.Err() // ErrMismatch naming the rank the vote found
		}
		// Once per peer and Run: a peer that does not run (stopped,
		// swapped out) reposts no control receives, and a notice every
		// few milliseconds would fill them and fail the link.
		if peer := e.waitingFor(w.p); !slices.Contains(w.told, peer) {
			w.told = append(w.told, peer)
			e.tellWaiting(peer, w.call)
		}
		if e.p2pWaited.Load() {
			e.checkBlockedPeers(w) // a peer's point-to-point call that waits for this Run's
		}
		if w.call.Coll == collectives.SendRecv {
			if e.p2pWaited.Load() && e.passLabels(w) != nil {
				return e.Err() // ErrMismatch: a cycle of point-to-point calls
			}
			e.tellBlocked(w) // after passLabels: its words say which labels it took
		}
	} else if w.call.Coll == collectives.SendRecv && now-w.idleFrom >= int64(strayAfter) && e.labelsDue.Load() {
		// A label, or a word that may take one, came since the last
		// look: passed on now, not at the next look (a cycle's label
		// takes a step per rank, and each waits for the last to be
		// taken), at most one label per peer outstanding.
		if e.passLabels(w) != nil {
			return e.Err()
		}
		e.tellBlocked(w)
	}
	if !w.armed {
		// Arm, then look once more before sleeping: a completion that
		// came before the arm is found by that look, one after it sends
		// a notification, and dispatch wakes a sleeping engine.
		e.sleeping.Store(true)
		raceFence()
		for _, d := range e.devs {
			d.CQ.Arm()
		}
		e.raiseFlags(w.p) // mailbox writers send a wake-up (mailbox.go)
		w.armed = true
		return nil
	}
	return w.sleep(now)
}

func (w *waiter) sleep(now int64) error {
	e := w.e
	// At most strayEvery, then a look for strays (idle); the deadline
	// if sooner.
	until := now + int64(strayEvery)
	if w.deadline > 0 {
		until = min(until, w.deadline)
	}
	e.timer.Reset(time.Duration(until - now))
	defer e.timer.Stop()
	select {
	case <-e.wake:
	case <-e.dead:
		return e.Err()
	case <-w.ctx.Done():
		return w.ctxDone()
	case <-e.timer.C:
		if w.deadline > 0 && until == w.deadline {
			return w.timedOut()
		}
		// Still armed: the Run looks again (and for strays) and sleeps
		// on, without a new stretch of polls.
		return nil
	}
	e.sleeping.Store(false)
	e.lowerFlags(w.p)
	w.armed = false
	w.idleN = 0
	return nil
}

func (w *waiter) ctxDone() error {
	e := w.e
	switch {
	case errors.Is(w.ctx.Err(), context.Canceled):
		// The caller gave up: this rank aborts the others.
		e.Withdraw(fmt.Errorf("%w: %w", ErrAborted, w.ctx.Err()))
	case w.heard() && (w.idleFrom == 0 || monoNow()-w.idleFrom < int64(suspectAfter)):
		// The deadline passed while the call still moved (it took a
		// message from a peer, and moved less than suspectAfter ago):
		// the peers work, and the deadline was too short for the call,
		// so this rank names itself, as a cancel does. (Naming the peer
		// it waited for told every rank that a working rank timed out.)
		// "Moved" counts any completion on the Run's devices, another
		// communicator's included. A Run that only sends (a broadcast's
		// root, a Send) takes no message, and names the peer.
		e.Withdraw(fmt.Errorf("%w: %w, while the call still moved (it waited for rank %d)", ErrTimeout, w.ctx.Err(), e.Name(e.waitingFor(w.p))))
	default:
		// Nothing came for suspectAfter or longer, or nothing at all:
		// the peer it waits for is the likelier cause (it never called,
		// or it is stuck).
		e.Abort(e.waitingFor(w.p), fmt.Errorf("%w: %w", ErrTimeout, w.ctx.Err()))
	}
	return e.Err()
}

func (w *waiter) timedOut() error {
	w.e.Abort(w.e.waitingFor(w.p), fmt.Errorf("%w after %v", ErrTimeout, w.timeout))
	return w.e.Err()
}
