//go:build linux

package shm

import (
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The futex operations on MAP_SHARED memory. FUTEX_PRIVATE_FLAG must not be
// set: the word is shared with another process, and the kernel keys it by
// (inode, offset).
const (
	futexWait = 0
	futexWake = 1
)

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

// doorbell is a futex word plus a "somebody sleeps" flag, both in shared
// memory: the waiter reads the word, sets the flag, checks its condition
// and sleeps only if the word is unchanged; the ringer, having published
// its condition with a sequentially consistent store, takes the flag (an
// atomic swap to zero), and only if it was set bumps the word and calls
// FUTEX_WAKE for every sleeper. A ringer that finds no flag touches
// nothing: the waiter that sets it later sees the condition. So a wake-up
// cannot be lost (x86 atomics: the stores are XCHG), and a busy connection
// makes no syscall and no locked write beyond its own data.
//
// The ringer clears the flag, not the sleeper: a sleeper that is woken
// but cannot run at once (its thread waits for a CPU, or for a P held by a
// goroutine that spins) would otherwise leave the flag set, and every
// message in the meantime would cost its sender a FUTEX_WAKE. A sleeper
// that wakes and must sleep again sets the flag again; one that set it and
// then found its condition true leaves it set, which costs the next ringer
// one needless FUTEX_WAKE.
type doorbell struct {
	seq     *atomic.Uint32
	waiters *atomic.Uint32 // 1: a sleeper may be waiting on seq
}

// ring wakes the sleepers, if any, after a condition was published with
// storeSC64.
func (d doorbell) ring() {
	if d.waiters.Load() != 0 && d.waiters.Swap(0) != 0 {
		d.seq.Add(1)
		futex(d.seq, futexWake, 1<<30, nil)
	}
}

// wake wakes every sleeper unconditionally (close, cancellation).
func (d doorbell) wake() {
	d.waiters.Store(0)
	d.seq.Add(1)
	futex(d.seq, futexWake, 1<<30, nil)
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
// reports whether it slept in the kernel.
func (d doorbell) waitNoSpin(ready func() bool, timeout time.Duration) (ok, slept bool) {
	// The word before the flag: a ringer that takes the flag set here
	// bumps the word after this read, so the futex wait below returns at
	// once. (Read after the flag, a ringer's bump between the two would
	// be taken for the current value: asleep with no flag set, the next
	// record would not wake us.)
	s := d.seq.Load()
	d.waiters.Swap(1) // then ready's loads: a locked exchange (storeSC64)
	if afterFlag != nil {
		afterFlag(d)
	}
	if ready() {
		return true, false
	}
	var ts *unix.Timespec
	if timeout > 0 {
		t := unix.NsecToTimespec(int64(timeout))
		ts = &t
	}
	futex(d.seq, futexWait, s, ts)
	return ready(), true
}

// storeSC64 publishes a doorbell's condition before ring loads the flag.
// The protocol is Dekker's: each side stores its word (the condition, the
// flag), then loads the other's, and neither load may pass its own store.
// Go's atomic Store is an XCHG on amd64 and gives that, as the memory model
// says; under the race detector it is ThreadSanitizer's release store, a
// plain MOV that a later load passes (golang/go#58020), and CI's -race runs
// lost wake-ups that way: TestSharedCQArmStress caught a sleeper on the
// flag, the record published, and no FUTEX_WAKE. Swap is a locked exchange
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

// futexCalls counts FUTEX_WAIT and FUTEX_WAKE system calls made by this
// process, for tests and benchmarks (wakes/op).
var futexCalls [2]atomic.Uint64

func futex(word *atomic.Uint32, op int, val uint32, ts *unix.Timespec) {
	futexCalls[op].Add(1)
	// Errors are EAGAIN (the word changed: re-check), EINTR or ETIMEDOUT;
	// every caller re-checks its condition, so none matters.
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(word)), uintptr(op), uintptr(val), uintptr(unsafe.Pointer(ts)), 0, 0)
}
