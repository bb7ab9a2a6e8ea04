package soft

import (
	"os"

	"golang.org/x/sys/unix"
)

// PageSize is the system page size.
var PageSize = os.Getpagesize()

// RoundPage rounds n up to a whole number of pages (at least one).
func RoundPage(n int) int {
	if n <= 0 {
		return PageSize
	}
	return (n + PageSize - 1) &^ (PageSize - 1)
}

// Mmap returns n bytes (rounded up to pages) of anonymous private memory
// outside the Go heap, locked in RAM where the limit allows (mlock failing
// is not an error: unprivileged users have a small RLIMIT_MEMLOCK) and not
// inherited by children (MADV_DONTFORK, as registered memory must be).
// The returned slice has length n.
func Mmap(n int) ([]byte, error) {
	m, err := unix.Mmap(-1, 0, RoundPage(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, os.NewSyscallError("mmap", err)
	}
	_ = unix.Madvise(m, unix.MADV_DONTFORK)
	_ = unix.Mlock(m)
	return m[:n], nil
}

// Munmap frees memory from Mmap (or any whole mapping).
func Munmap(b []byte) error {
	b = b[:cap(b)]
	if err := unix.Munmap(b); err != nil {
		return os.NewSyscallError("munmap", err)
	}
	return nil
}
