//go:build linux

package shm

import (
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func testBell(t *testing.T) doorbell {
	mem, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	efd, err := newBellFd()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(mem); efd.close() })
	return doorbell{waiters: (*atomic.Uint32)(unsafe.Pointer(&mem[64])), efd: efd}
}

func TestDoorbellSkipsWakeWithoutSleepers(t *testing.T) {
	d := testBell(t)
	before := bellCalls[bellWake].Load()
	for i := 0; i < 1000; i++ {
		d.ring()
	}
	// The counter is process-wide: no test here runs in parallel, and the
	// earlier tests' connections are closed.
	if n := bellCalls[bellWake].Load() - before; n != 0 {
		t.Fatalf("%d doorbell writes with nobody sleeping", n)
	}
}

func TestDoorbellWakesSleeper(t *testing.T) {
	d := testBell(t)
	var flag atomic.Bool
	done := make(chan time.Duration)
	go func() {
		start := time.Now()
		for !d.wait(flag.Load, 0) {
		}
		done <- time.Since(start)
	}()
	// Let the waiter get past its spin into its sleep.
	for d.waiters.Load() == 0 {
		time.Sleep(100 * time.Microsecond)
	}
	wakes := bellCalls[bellWake].Load()
	flag.Store(true)
	d.ring()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("sleeper not woken")
	}
	if bellCalls[bellWake].Load() == wakes {
		t.Fatal("ring did not write the eventfd of a sleeper")
	}
	// A timed wait returns by itself (it may also return early: a signal
	// or a count left by an earlier ring ends a sleep, and callers re-check).
	start := time.Now()
	if d.wait(func() bool { return false }, 2*time.Millisecond) {
		t.Fatal("wait reported ready")
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("timed wait took %v", el)
	}
}

// TestDoorbellWakesOnce: a ring takes the sleeper's flag, so a sleeper that
// was woken but has not run yet (its thread waits for a CPU) costs the
// rings after the first no write.
func TestDoorbellWakesOnce(t *testing.T) {
	d := testBell(t)
	d.waiters.Store(1) // as waitNoSpin leaves it while asleep
	wakes := bellCalls[bellWake].Load()
	for range 100 {
		d.ring()
	}
	if n := bellCalls[bellWake].Load() - wakes; n != 1 {
		t.Fatalf("100 rings after one sleep made %d doorbell writes, want 1", n)
	}
}

// TestDoorbellRingWhileFallingAsleep: a ringer that takes the flag just
// after a sleeper set it (the sleeper lost its CPU there) leaves no
// sleeper behind that the next ring cannot wake. (When the doorbells
// were futex words, a sleeper that read the word after the flag took the
// ringer's bump for the current value and slept with no flag set: a lost
// wake-up. The eventfd keeps the ringer's count for the sleep.)
func TestDoorbellRingWhileFallingAsleep(t *testing.T) {
	d := testBell(t)
	var cond atomic.Bool
	var once atomic.Bool
	hooked := make(chan struct{})
	afterFlag = func(b doorbell) {
		if b == d && once.CompareAndSwap(false, true) {
			b.ring() // takes the flag: nothing is ready yet
			close(hooked)
		}
	}
	defer func() { afterFlag = nil }()
	done := make(chan struct{})
	go func() {
		for {
			if ok, _ := d.waitNoSpin(cond.Load, 0); ok {
				break
			}
		}
		close(done)
	}()
	<-hooked
	// Let the sleeper fall asleep, then publish and ring once.
	time.Sleep(20 * time.Millisecond)
	cond.Store(true)
	d.ring()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("lost wake-up: a ring while the sleeper fell asleep left it asleep with no flag")
	}
}

// TestDoorbellWakesEverySleeper: the sleepers of one eventfd (a
// connection's progress goroutine and a receive poller, or a sender
// waiting for room) all wake on one ring, though one read takes the count.
func TestDoorbellWakesEverySleeper(t *testing.T) {
	d := testBell(t)
	other := doorbell{waiters: new(atomic.Uint32), efd: d.efd} // another bell of the same eventfd
	var flag atomic.Bool
	done := make(chan struct{}, 3)
	sleeps := bellCalls[bellSleep].Load()
	for _, b := range []doorbell{d, d, other} {
		go func() {
			for {
				if ok, _ := b.waitNoSpin(flag.Load, 0); ok {
					break
				}
			}
			done <- struct{}{}
		}()
	}
	// Let them fall asleep, then publish and ring one bell once.
	for bellCalls[bellSleep].Load()-sleeps < 3 {
		time.Sleep(100 * time.Microsecond)
	}
	time.Sleep(10 * time.Millisecond)
	flag.Store(true)
	d.ring()
	for i := range 3 {
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("%d of 3 sleepers woken", i)
		}
	}
}

// TestDoorbellRingTakenByAnotherSleeper: a ring that comes after a
// sleeper's last check but before it sleeps, whose count another sleeper
// of the same eventfd reads, still wakes it. (Before the read generation
// the late sleeper became the next reader, found the count taken and
// slept through its ring: CI's TestProcessRing hung once so.)
func TestDoorbellRingTakenByAnotherSleeper(t *testing.T) {
	x := testBell(t)
	y := doorbell{waiters: new(atomic.Uint32), efd: x.efd} // another bell of the same eventfd
	var stopA atomic.Bool
	aDone := make(chan struct{})
	go func() { // A sleeps on x and reads the eventfd
		for {
			if ok, _ := x.waitNoSpin(stopA.Load, 0); ok {
				break
			}
		}
		close(aDone)
	}()
	for {
		x.efd.mu.Lock()
		reading := x.efd.reading
		x.efd.mu.Unlock()
		if reading {
			break
		}
		time.Sleep(100 * time.Microsecond)
	}
	var condB, checked atomic.Bool
	readyB := func() bool {
		if condB.Load() {
			return true
		}
		if checked.CompareAndSwap(false, true) {
			// After B's check: the ringer publishes and rings y, and A's
			// read takes the count before B sleeps.
			reads := x.efd.reads.Load()
			condB.Store(true)
			y.ring()
			for x.efd.reads.Load() == reads {
				time.Sleep(100 * time.Microsecond)
			}
		}
		return false
	}
	bDone := make(chan bool)
	go func() {
		ok, _ := y.waitNoSpin(readyB, 0)
		bDone <- ok
	}()
	select {
	case ok := <-bDone:
		if !ok {
			t.Error("B woke without its condition")
		}
	case <-time.After(5 * time.Second):
		t.Error("lost wake-up: B slept through a ring whose count A read")
	}
	stopA.Store(true)
	x.wake()
	<-aDone
}
