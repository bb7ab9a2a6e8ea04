//go:build linux && !race

package tcp

import (
	"syscall"
	"unsafe"
)

// readRaw is read(2) on a non-blocking descriptor, as a raw system call
// (rawio.go).
func readRaw(fd int, p []byte) (int, error) {
	var ptr unsafe.Pointer
	if len(p) > 0 {
		ptr = unsafe.Pointer(&p[0])
	}
	r, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(ptr), uintptr(len(p)))
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}
