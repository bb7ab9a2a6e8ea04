//go:build !linux

package tcp

import (
	"syscall"
	"unsafe"
)

func readRaw(fd int, p []byte) (int, error) { return syscall.Read(fd, p) }

func writevRaw(fd uintptr, iov *syscall.Iovec, n int) (int, syscall.Errno) {
	r, _, e := syscall.Syscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(iov)), uintptr(n))
	return int(r), e
}
