//go:build linux

package shm

import (
	"encoding/binary"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Sleeping: each side of a connection has an eventfd of its own, and
// hands the peer a copy at setup (with the segment's memfd). A process
// sleeps on its own eventfd through Go's netpoller, and whoever wakes it
// (its peer, or itself on close and cancellation) writes to it.
//
// Not a futex: a goroutine in FUTEX_WAIT keeps its P for as long as it
// sleeps, until Go's sysmon thread takes the P back, and with one P per
// rank (GOMAXPROCS=1 from the launcher) every other goroutine of the rank
// waits for that: the engine, memberlist's replies, tcp handshakes. Each
// take-back also wakes sysmon from its deep sleep into a round every 20 µs
// for the next 50 rounds or more, and each such round preempts a spinning
// rank (README, "Go's sysmon thread"). A goroutine that sleeps in the
// netpoller gives its P up at once, and nothing wakes sysmon.
//
// The cost: while another goroutine of the process spins with
// runtime.Gosched (an engine polling its CQ), Go's scheduler finds it on
// the global run queue before it polls the network, so a sleeper whose
// eventfd was written runs only when the spinner sleeps or sysmon polls
// the network (every 10 ms at most). The spinner drains the rings itself
// (cq.Poll), so only the send-queue goroutine's waits for the peer's
// receives or ring space (exec.go) could lag that way; allreduce_perf
// from 8 B to 16 MiB made 0-2 such waits per rank in a whole job (counted
// 2026-11-25, 2 and 4 ranks).

// spinFor is how long a waiter polls before it sleeps in the kernel. It is
// short because the machine this runs on may have fewer cores than ranks:
// a few microseconds catch a ping-pong reply, longer only steals the core
// the peer needs. The spin yields (runtime.Gosched) between polls.
const spinFor = 4 * time.Microsecond

// spinAfterWake is the receive poller's spin right after a wait that had
// to sleep. A wake-up across vCPUs costs 13-20µs here, longer than
// spinFor: once one side sleeps, the reply to its wake-up would find the
// other side asleep too, and a ping-pong would pay a wake-up per message
// for ever. One longer spin after a sleep lets the pair fall back into
// spinning; it yields the CPU to other processes (sched_yield) as it goes.
// (A variable only so that the latency benchmark can compare.)
var spinAfterWake = 25 * time.Microsecond

// doorbell is a "somebody sleeps" flag in shared memory plus the eventfd
// of the process that sleeps on it: the waiter sets the flag, checks its
// condition and sleeps only if it is false; the ringer, having published
// its condition with a sequentially consistent store, takes the flag (an
// atomic swap to zero), and only if it was set writes to the sleeper's
// eventfd. A ringer that finds no flag touches nothing: the waiter that
// sets it later sees the condition. So a wake-up cannot be lost (x86
// atomics: the stores are XCHG; an eventfd keeps its count until it is
// read), and a busy connection makes no syscall and no locked write beyond
// its own data.
//
// The ringer clears the flag, not the sleeper: a sleeper that is woken
// but cannot run at once (its thread waits for a CPU) would otherwise
// leave the flag set, and every message in the meantime would cost its
// sender a write. A sleeper that wakes and must sleep again sets the flag
// again; one that set it and then found its condition true leaves it set,
// which costs the next ringer one needless write, and the count it leaves
// costs the next sleep one turn.
type doorbell struct {
	waiters *atomic.Uint32 // 1: a sleeper may be waiting
	efd     *bellFd        // the sleeper's eventfd
}

// ring wakes the sleepers, if any, after a condition was published with
// conn.ringStore (a release store where both processes fence their sleeps
// with membarrier, fence.go; else storeSC64).
func (d doorbell) ring() {
	if d.waiters.Load() != 0 && d.waiters.Swap(0) != 0 {
		d.efd.signal()
	}
}

// wake wakes every sleeper unconditionally (close, cancellation). Only the
// sleeping process calls it.
func (d doorbell) wake() {
	d.waiters.Store(0)
	d.efd.signal()
}

// wait returns when ready reports true, or after timeout (0: none), or on
// a ring. It spins briefly first. It reports ready's last value.
func (d doorbell) wait(ready func() bool, timeout time.Duration) bool {
	if spin(ready) {
		return true
	}
	ok, _ := d.waitNoSpin(ready, timeout)
	return ok
}

// waitNoSpin is wait without the spin (the caller has spun), and also
// reports whether it slept. It may return early (a ring meant for another
// bell of the same eventfd, a count left by an earlier ring): callers
// re-check.
func (d doorbell) waitNoSpin(ready func() bool, timeout time.Duration) (ok, slept bool) {
	// The eventfd's read generation before the flag: a ring after the
	// flag is set writes a count that a read ending after this load takes,
	// so sleep returns at once if any read ended since (another sleeper
	// of the eventfd may have taken this ring's count).
	gen := d.efd.reads.Load()
	d.waiters.Swap(1) // then ready's loads: a locked exchange (storeSC64)
	sleepFence()      // and the ringers' CPUs too (fence.go)
	if afterFlag != nil {
		afterFlag(d)
	}
	if ready() {
		return true, false
	}
	d.efd.sleep(timeout, gen)
	return ready(), true
}

// bellFd is an eventfd that doorbells ring. A process's own (own) is read
// through the netpoller by one sleeper at a time; the others wait for
// that read to end, so one write wakes every sleeper of the connection.
// A peer's copy is only written.
type bellFd struct {
	fd  int      // for writes
	f   *os.File // own: the same descriptor, read in the netpoller
	buf [8]byte

	mu      sync.Mutex
	reading bool          // a sleeper is in f.Read
	woke    chan struct{} // closed when that read returns
	reads   atomic.Uint64 // reads ended; written under mu
}

// newBellFd makes this side's eventfd of a connection.
func newBellFd() (*bellFd, error) {
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("eventfd", err)
	}
	return &bellFd{fd: fd, f: os.NewFile(uintptr(fd), "gorun-shm-bell"), woke: make(chan struct{})}, nil
}

// peerBellFd wraps the peer's eventfd, received at setup; it is only
// written.
func peerBellFd(fd int) *bellFd { return &bellFd{fd: fd} }

// signal adds one to the eventfd's count.
func (b *bellFd) signal() {
	bellCalls[bellWake].Add(1)
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	// EAGAIN means the count is at its maximum: a sleeper wakes anyway.
	_, _ = unix.Write(b.fd, one[:])
}

// sleep returns after a signal, or after timeout (0: none), or when the
// descriptor is closed, or at once if a read ended since gen (reads).
func (b *bellFd) sleep(timeout time.Duration, gen uint64) {
	bellCalls[bellSleep].Add(1)
	b.mu.Lock()
	if b.reads.Load() != gen {
		b.mu.Unlock()
		return
	}
	if b.reading {
		woke := b.woke
		b.mu.Unlock()
		if timeout <= 0 {
			<-woke
			return
		}
		t := time.NewTimer(timeout)
		select {
		case <-woke:
		case <-t.C:
		}
		t.Stop()
		return
	}
	b.reading = true
	b.mu.Unlock()
	var dl time.Time
	if timeout > 0 {
		dl = time.Now().Add(timeout)
	}
	if b.f.SetReadDeadline(dl) == nil {
		b.f.Read(b.buf[:]) // resets the count; an error (deadline, close) ends the sleep too
	}
	b.mu.Lock()
	b.reading = false
	b.reads.Add(1)
	close(b.woke)
	b.woke = make(chan struct{})
	b.mu.Unlock()
}

// close closes the descriptor; no doorbell may use it after.
func (b *bellFd) close() {
	if b == nil {
		return
	}
	if b.f != nil {
		b.f.Close()
		return
	}
	unix.Close(b.fd)
}

// storeSC64 publishes a doorbell's condition before ring loads the flag.
// The protocol is Dekker's: each side stores its word (the condition, the
// flag), then loads the other's, and neither load may pass its own store.
// Go's atomic Store is an XCHG on amd64 and gives that, as the memory model
// says; under the race detector it is ThreadSanitizer's release store, a
// plain MOV that a later load passes (golang/go#58020), and CI's -race runs
// lost wake-ups that way: TestSharedCQArmStress caught a sleeper on the
// flag, the record published, and no wake-up. Swap is a locked exchange
// in both builds, the same instruction as Store in the normal one.
func storeSC64(p *atomic.Uint64, v uint64) { p.Swap(v) }

// afterFlag, when set by a test, runs in waitNoSpin just after the flag
// is set: where a sleeper that lost its CPU lets a ringer in.
var afterFlag func(doorbell)

// yieldCPU lets another process run on this CPU (runtime.Gosched only
// yields to this process's goroutines). A raw system call: sched_yield
// never blocks, and through syscall.Syscall the runtime would count the
// time the thread spends off the CPU, while the other process runs, as a
// blocking call: sysmon retakes the P (a thread hand-off) and, seeing
// such work every round, polls every 20 µs instead of every 10 ms, a
// context switch each time on a host whose CPUs are already shared.
func yieldCPU() { unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }

// spin polls ready for up to spinFor, yielding between polls.
func spin(ready func() bool) bool {
	if ready() {
		return true
	}
	start := time.Now()
	for i := 0; ; i++ {
		runtime.Gosched()
		if ready() {
			return true
		}
		if i&3 == 3 && time.Since(start) > spinFor {
			return false
		}
	}
}

// bellCalls counts the sleeps on and the writes to doorbell eventfds made
// by this process, for tests and benchmarks (wakes/op).
var bellCalls [2]atomic.Uint64

const (
	bellSleep = 0
	bellWake  = 1
)
