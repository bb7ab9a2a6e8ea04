//go:build linux

package shm

import (
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/gorun-hpc/gorun/internal/jobenv"
)

// Asymmetric fences: the doorbells' Dekker protocol (bell.go) with the
// full barrier on the sleeper's side only.
//
// A doorbell needs, on each side, a store and then a load that the store
// may not pass: the ringer publishes its condition (a ring's head or
// tail, the receives posted) and loads the sleeper's flag; the sleeper
// sets its flag and loads the condition. With a locked exchange for the
// ringer's store (storeSC64) every message pays that barrier, and on the
// hot path it also waits for the record's cache line to be taken from the
// peer, which polls it. Sleeps are rare and already cost a wake-up of
// 13-20 µs, so the barrier moves to them: a sleeper sets its flag and then
// calls membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED), which runs a full
// barrier on every CPU that is running a thread of a registered process
// (and a thread not running has passed a context switch, itself a full
// barrier). The ringer's store and load are then plain (a release store,
// an ordinary load). Either the ringer's program point lies before that
// barrier, and its load of the flag comes after the sleeper's flag was
// stored, so it rings; or after, and its store is globally visible before
// membarrier returns, so the sleeper's load of the condition sees it. This
// is liburcu's and folly's asymmetric fence, across processes.
//
// Both processes of a connection must be registered for it: the ringer so
// that its CPU gets the barrier, the sleeper so that it fences. Each side
// says in its segment's header (offFences) whether it is; a connection
// uses plain stores only when both are (conn.plainRing), else every ring
// is a locked exchange as before. A process registers once, at its first
// connection; a kernel without the command (before 4.16, or a seccomp
// filter that refuses it) leaves the process unregistered, and so does
// GORUN_SHM_MEMBARRIER=0.

// Commands of membarrier(2).
const (
	membarrierQuery                          = 0
	membarrierGlobalExpedited                = 1 << 1
	membarrierRegisterGlobalExpedited        = 1 << 2
	membarrierWantGlobal                     = membarrierGlobalExpedited | membarrierRegisterGlobalExpedited
	membarrierFenceFlag               uint32 = 1 // offFences: the owner fences its sleeps
)

var (
	fenceOnce sync.Once
	// fencing: this process is registered and fences every doorbell sleep.
	fencing atomic.Bool

	// The process's membarrier calls, one at a time (sleepFence): begun
	// counts those begun, ended is the number of the last that returned.
	fenceMu    sync.Mutex
	fenceBegun atomic.Uint64
	fenceEnded atomic.Uint64
	// fenceWait, when set by a test, runs in sleepFence once the sleeper
	// knows which call it needs, before it waits for one.
	fenceWait atomic.Pointer[func()]
)

// registerFences registers the process for global expedited membarriers,
// once; it reports whether the process fences its sleeps.
func registerFences() bool {
	fenceOnce.Do(func() {
		if os.Getenv(jobenv.ShmFence) == "0" {
			return
		}
		mask, _, errno := unix.Syscall(unix.SYS_MEMBARRIER, membarrierQuery, 0, 0)
		if errno != 0 || mask&membarrierWantGlobal != membarrierWantGlobal {
			return
		}
		if _, _, errno := unix.Syscall(unix.SYS_MEMBARRIER, membarrierRegisterGlobalExpedited, 0, 0); errno != 0 {
			return
		}
		fencing.Store(true)
	})
	return fencing.Load()
}

// sleepFence is the sleeper's barrier, between its flag and its last look
// at the condition. Once the process is registered the command does not
// fail (membarrier(2)), so its result is not looked at.
//
// A call interrupts every CPU that runs a thread of a registered process,
// and a rank arming its completion queue puts a sleeper on each of its
// connections at once, so the sleepers of a process share calls: any
// call begun after a sleeper's flag was stored (its number is above what
// the sleeper read of begun, after its flag's locked exchange) serves it
// as well as its own would. A sleeper that finds one under way waits for
// it, and starts its own only if that one began too early.
func sleepFence() {
	if !fencing.Load() {
		return
	}
	need := fenceBegun.Load() + 1
	if f := fenceWait.Load(); f != nil {
		(*f)()
	}
	for fenceEnded.Load() < need {
		fenceMu.Lock()
		if fenceEnded.Load() < need {
			n := fenceBegun.Add(1)
			unix.Syscall(unix.SYS_MEMBARRIER, membarrierGlobalExpedited, 0, 0)
			fenceEnded.Store(n)
		}
		fenceMu.Unlock()
	}
}

// plainRing reports whether a connection between the owners of segments
// local and peer may publish with release stores: both fence their sleeps.
func plainRing(local, peer *segment) bool { return local.fences() && peer.fences() }

// ringStore publishes a doorbell's condition before ring loads the flag:
// a release store where the connection fences asymmetrically, else a
// locked exchange (storeSC64).
func (c *conn) ringStore(p *atomic.Uint64, v uint64) {
	if c.plainRing {
		storeRelease64(p, v)
		return
	}
	storeSC64(p, v)
}
