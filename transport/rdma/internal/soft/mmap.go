package soft

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"

	"github.com/gorun-hpc/gorun/internal/numa"
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
	dontFork(m)
	_ = unix.Mlock(m)
	return m[:n], nil
}

// MmapNode is Mmap with the memory placed on NUMA node node: its policy is
// set (mbind, MPOL_PREFERRED: the node first, another only when it is full)
// before the pages are first touched. A negative node is Mmap. A kernel or
// sandbox without mbind leaves the memory unplaced, as Mmap's (placement is
// a hint, like mlock); a node that does not exist is an error.
// Providers' Alloc call it with rdma.Config.NUMANode.
func MmapNode(n, node int) ([]byte, error) {
	if node < 0 {
		return Mmap(n)
	}
	m, err := unix.Mmap(-1, 0, RoundPage(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, os.NewSyscallError("mmap", err)
	}
	if err := numa.Mbind(m, numa.PolicyPreferred, node); err != nil && !errors.Is(err, numa.ErrNotSupported) {
		_ = unix.Munmap(m)
		return nil, err
	}
	dontFork(m)
	_ = unix.Mlock(m) // faults the pages in, on the node
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
