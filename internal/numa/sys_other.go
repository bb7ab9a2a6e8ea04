//go:build !linux

package numa

import "unsafe"

func notSupported(op string) error { return opErr(op, "", ErrNotSupported) }

// Mbind is not supported off Linux.
func Mbind(b []byte, mode Policy, nodes ...int) error { return notSupported("mbind") }

// SetThreadPolicy is not supported off Linux.
func SetThreadPolicy(mode Policy, nodes ...int) error { return notSupported("set_mempolicy") }

// PolicyOf is not supported off Linux.
func PolicyOf(p unsafe.Pointer) (Policy, []int, error) {
	return 0, nil, notSupported("get_mempolicy")
}

// NodeOfAddr is not supported off Linux.
func NodeOfAddr(p unsafe.Pointer) (int, error) { return -1, notSupported("get_mempolicy") }

// Lock is not supported off Linux.
func Lock(b []byte) error { return notSupported("mlock") }

// DontFork is not supported off Linux.
func DontFork(b []byte) error { return notSupported("madvise") }

// BindThread is not supported off Linux.
func BindThread(cpus []int) error { return notSupported("bind thread") }

// ThreadAffinity is not supported off Linux.
func ThreadAffinity() ([]int, error) { return nil, notSupported("sched_getaffinity") }

// Affinity is not supported off Linux.
func Affinity(tid int) ([]int, error) { return nil, notSupported("sched_getaffinity") }

// BindProcess is not supported off Linux.
func BindProcess(cpus []int) error { return notSupported("bind process") }

// CurrentCPU is not supported off Linux.
func CurrentCPU() (int, error) { return -1, notSupported("getcpu") }

// CurrentNode is not supported off Linux.
func CurrentNode() (int, error) { return -1, notSupported("getcpu") }
