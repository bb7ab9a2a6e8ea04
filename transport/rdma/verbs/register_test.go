//go:build linux && cgo && rdma

package verbs

import (
	"errors"
	"os"
	"runtime"
	"syscall"
	"testing"
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
