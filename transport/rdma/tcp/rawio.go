//go:build linux

package tcp

import (
	"syscall"
	"unsafe"
)

// The system calls of the message path are non-blocking (the sockets are
// O_NONBLOCK, epoll is asked with a zero timeout), so they go in as raw
// system calls: through syscall.Syscall the runtime marks the P as in a
// system call, and a loopback write that wakes a rank on the same CPU is
// often preempted inside the call, for as long as that rank runs. Go's
// sysmon then takes the P back and, having found work, keeps polling
// every 20 µs instead of backing off to 10 ms: with 4 ranks on 2 CPUs over
// tcp each rank's sysmon woke about 1,000 times a second (a sched_switch
// trace), each wake-up a context switch on a CPU two ranks share.

// writevRaw is writev(2) on a non-blocking descriptor.
func writevRaw(fd uintptr, iov *syscall.Iovec, n int) (int, syscall.Errno) {
	r, _, e := syscall.RawSyscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(iov)), uintptr(n))
	return int(r), e
}

// epollPoll is epoll_wait(2) with a zero timeout, as epoll_pwait with no
// signal mask (arm64 has no epoll_wait).
func epollPoll(epfd int, evs unsafe.Pointer, n int) (int, syscall.Errno) {
	r, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(evs), uintptr(n), 0, 0, 0)
	return int(r), e
}
