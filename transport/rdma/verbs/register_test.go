//go:build linux && cgo && rdma

package verbs

import (
	"context"
	"errors"
	"os"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// TestRegisterOverMemlock: a registration refused for RLIMIT_MEMLOCK
// (ibv_reg_mr's ENOMEM) keeps its errno and is no ErrQueueFull: "work
// queue full" sent users of Register to their queue depths. ENOMEM means
// a full work queue only for a post (post.go).
func TestRegisterOverMemlock(t *testing.T) {
	d := openDev(t, rdma.Config{})
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &old); err != nil {
		t.Fatal(err)
	}
	low := unix.Rlimit{Cur: 64 << 10, Max: old.Max}
	if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &low); err != nil {
		t.Fatal(err)
	}
	defer unix.Setrlimit(unix.RLIMIT_MEMLOCK, &old)
	// ib_umem_get ignores the limit for CAP_IPC_LOCK, which the VM's root
	// has: drop it from the effective set of a thread of its own, which
	// the registration's cgo call runs on. The thread ends with its
	// goroutine (locked, never unlocked): with credentials other than
	// those the rdma_cm and uverbs files were opened with, their write()
	// commands fail with EACCES from it.
	type result struct {
		mr  *rdma.MR
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		if err := dropIPCLock(); err != nil {
			done <- result{err: err}
			return
		}
		mr, err := d.Register(make([]byte, 4<<20), rdma.AccessLocalWrite)
		done <- result{mr, err}
	}()
	r := <-done
	if r.mr != nil {
		t.Skip("a 4 MiB registration passed a 64 KiB RLIMIT_MEMLOCK without CAP_IPC_LOCK")
	}
	err := r.err
	t.Logf("register over RLIMIT_MEMLOCK: %v", err)
	if errors.Is(err, rdma.ErrQueueFull) || !errors.Is(err, syscall.ENOMEM) {
		t.Fatalf("register over RLIMIT_MEMLOCK: %v; want ENOMEM, not ErrQueueFull", err)
	}
}

// dropIPCLock clears CAP_IPC_LOCK from the calling thread's effective
// capabilities.
func dropIPCLock() error {
	const capIPCLock = 14
	hdr := struct {
		version uint32
		pid     int32
	}{version: 0x20080522} // _LINUX_CAPABILITY_VERSION_3
	var data [2]struct{ effective, permitted, inheritable uint32 }
	capset := func(nr uintptr) error {
		if _, _, e := syscall.RawSyscall(nr, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
			return os.NewSyscallError("capget/capset", e)
		}
		return nil
	}
	if err := capset(syscall.SYS_CAPGET); err != nil {
		return err
	}
	data[0].effective &^= 1 << capIPCLock
	return capset(syscall.SYS_CAPSET)
}

// holdRegistration arms hook (testHookRegister or testHookRegistered) to
// stop the registration of a buffer of n bytes there until the returned
// release is called (the test's cleanup calls it too); entered is closed
// when it stops.
func holdRegistration(t *testing.T, hook *func([]byte), n int) (entered chan struct{}, release func()) {
	entered, held := make(chan struct{}), make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(held) }) }
	*hook = func(buf []byte) {
		if len(buf) == n {
			close(entered)
			<-held
		}
	}
	t.Cleanup(func() { release(); *hook = nil }) // before openDev's Close
	return entered, release
}

// connectClose listens, dials, accepts and closes both ends on d.
func connectClose(d rdma.Device, ip string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ln, err := d.Listen(ctx, ip+":0")
	if err != nil {
		return err
	}
	defer ln.Close()
	accepted := make(chan error, 1)
	go func() {
		c, err := ln.Accept(ctx)
		if err == nil {
			err = c.Close()
		}
		accepted <- err
	}()
	c, err := d.Dial(ctx, ln.Addr().String())
	if err != nil {
		return err
	}
	if err := c.Close(); err != nil {
		return err
	}
	return <-accepted
}

// othersGoOn fails t unless a registration, a CQ's creation and a
// connection of d, and their undoing, all finish while held (a call of
// d's stopped by a test hook) is in progress.
func othersGoOn(t *testing.T, d rdma.Device, ip, held string) {
	t.Helper()
	others := make(chan error, 1)
	go func() {
		others <- func() error {
			mr, err := d.Register(make([]byte, 4096), rdma.AccessLocalWrite)
			if err != nil {
				return err
			}
			if err := mr.Deregister(); err != nil {
				return err
			}
			cq, err := d.CreateCQ(0)
			if err != nil {
				return err
			}
			if err := cq.Close(); err != nil {
				return err
			}
			return connectClose(d, ip)
		}()
	}()
	select {
	case err := <-others:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second): // a bound for a hang, not a measure
		t.Fatalf("registration, CQ and connection calls waited for %s in progress", held)
	}
}

// TestRegisterDoesNotBlock: while a large registration is inside
// ibv_reg_mr (stopped there by testHookRegister), a second, small
// registration and its deregistration, a shared CQ's creation and close,
// and a connection's setup and teardown all complete. They take the
// device's lock, which register held across ibv_reg_mr: pinning GiBs
// stalled them for as long. (Posts and polls never took it.)
func TestRegisterDoesNotBlock(t *testing.T) {
	d := openDev(t, rdma.Config{})
	ip := vmIP(t)
	big := make([]byte, 16<<20)
	entered, release := holdRegistration(t, &testHookRegister, len(big))
	bigDone := make(chan error, 1)
	go func() {
		mr, err := d.Register(big, rdma.AccessLocalWrite)
		if err == nil {
			err = mr.Deregister()
		}
		bigDone <- err
	}()
	<-entered
	othersGoOn(t, d, ip, "a registration")
	select {
	case err := <-bigDone:
		t.Fatalf("the held registration ended early: %v", err)
	default:
	}
	release()
	if err := <-bigDone; err != nil {
		t.Fatal("the large registration:", err)
	}
}

// TestCloseDuringRegister: Device.Close while a registration is between
// ibv_reg_mr and publishing its MR (stopped there by testHookRegistered)
// waits for it; the registration fails with ErrClosed, its MR deregistered,
// and Close frees the protection domain without error (ibv_dealloc_pd
// fails with EBUSY while an MR of it exists). Run it with -race.
func TestCloseDuringRegister(t *testing.T) {
	d := openDev(t, rdma.Config{})
	big := make([]byte, 16<<20)
	entered, release := holdRegistration(t, &testHookRegistered, len(big))
	type result struct {
		mr  *rdma.MR
		err error
	}
	regDone := make(chan result, 1)
	go func() {
		mr, err := d.Register(big, rdma.AccessLocalWrite)
		regDone <- result{mr, err}
	}()
	<-entered
	closeDone := make(chan error, 1)
	go func() { closeDone <- d.Close() }()
	// Close has begun once a new registration fails with ErrClosed.
	closing := make(chan error, 1)
	go func() {
		for {
			mr, err := d.Register(make([]byte, 64), rdma.AccessLocalWrite)
			if errors.Is(err, rdma.ErrClosed) {
				closing <- nil
				return
			}
			if err != nil {
				closing <- err
				return
			}
			_ = mr.Deregister() // Close may have taken it already
			runtime.Gosched()
		}
	}()
	select {
	case err := <-closing:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second): // a bound for a hang, not a measure
		t.Fatal("Close did not begin while a registration was in progress")
	}
	var closeErr error
	closeReturned := false
	select {
	case closeErr = <-closeDone:
		closeReturned = true
		t.Errorf("Close returned (%v) during a registration", closeErr)
	default:
	}
	release()
	r := <-regDone
	if r.mr != nil || !errors.Is(r.err, rdma.ErrClosed) {
		t.Errorf("registration overtaken by Close: MR %t, %v; want ErrClosed", r.mr != nil, r.err)
	}
	if !closeReturned {
		closeErr = <-closeDone
	}
	if closeErr != nil {
		t.Errorf("Close: %v", closeErr)
	}
	if r.mr != nil && r.mr.Valid() {
		t.Error("the MR is still registered after Close")
	}
}
