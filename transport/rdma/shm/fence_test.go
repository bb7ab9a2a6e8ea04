//go:build linux

package shm

import (
	"encoding/binary"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// TestFencesNegotiated: a connection publishes with release stores only
// when both processes fence their doorbell sleeps (fence.go), and each
// side's segment says whether its process does.
func TestFencesNegotiated(t *testing.T) {
	a, b, _, _ := pair(t, rdma.Config{})
	fences := registerFences()
	for i, c := range []*conn{a.(*conn), b.(*conn)} {
		if c.local.fences() != fences || c.peer.fences() != fences {
			t.Errorf("conn %d: segments say fences %v (ours) and %v (peer's), the process %v", i, c.local.fences(), c.peer.fences(), fences)
		}
		if c.plainRing != fences {
			t.Errorf("conn %d: plainRing %v with both processes fencing %v", i, c.plainRing, fences)
		}
	}
	if !fences {
		t.Skip("membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) is not available here (kernel before 4.16, a seccomp filter, or GORUN_SHM_MEMBARRIER=0): the locked-exchange protocol is in use")
	}
	// A peer that does not fence (an earlier version, or
	// GORUN_SHM_MEMBARRIER=0) leaves the flag clear, and the connection
	// then publishes with locked exchanges.
	var segs [2]*segment
	for i := range segs {
		seg, fd, err := newSegment(4)
		if err != nil {
			t.Fatal(err)
		}
		defer seg.unmap()
		unix.Close(fd)
		segs[i] = seg
	}
	binary.LittleEndian.PutUint32(segs[1].mem[offFences:], 0)
	if !plainRing(segs[0], segs[0]) || plainRing(segs[0], segs[1]) || plainRing(segs[1], segs[0]) {
		t.Errorf("plainRing: both fencing %v, peer not %v, this side not %v; want true, false, false",
			plainRing(segs[0], segs[0]), plainRing(segs[0], segs[1]), plainRing(segs[1], segs[0]))
	}
}

// TestSleepFencesShared: sleepers that need a fence at the same time share
// one membarrier call: 50 sleepers that all read the call count before
// any call is made are served by the one call that the first of them
// makes, and the count of calls says so.
func TestSleepFencesShared(t *testing.T) {
	if !registerFences() {
		t.Skip("membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) is not available here")
	}
	const sleepers = 50
	var read sync.WaitGroup
	read.Add(sleepers)
	done := read.Done
	fenceWait.Store(&done)
	defer fenceWait.Store(nil)
	fenceMu.Lock() // no call can start until every sleeper has read begun
	before := fenceBegun.Load()
	var all sync.WaitGroup
	for range sleepers {
		all.Go(sleepFence)
	}
	read.Wait()
	fenceMu.Unlock()
	all.Wait()
	if calls := fenceBegun.Load() - before; calls != 1 {
		t.Errorf("%d sleepers made %d membarrier calls, want 1", sleepers, calls)
	}
	if fenceEnded.Load() != fenceBegun.Load() {
		t.Errorf("calls begun %d, last ended %d", fenceBegun.Load(), fenceEnded.Load())
	}
}
