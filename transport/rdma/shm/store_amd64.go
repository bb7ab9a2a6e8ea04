//go:build linux && amd64

package shm

import (
	"sync/atomic"
	"unsafe"
)

// storeRelease64 stores v at p with release order: what this goroutine
// stored before is visible before it. On x86 every store is a release
// (stores become visible in program order) and the compiler keeps stores
// in program order, so a plain store does, where atomic's Store is a
// locked exchange (a full barrier). p is in a shared mapping outside the
// Go heap: the race detector neither sees nor needs this store, so unlike
// internal/release it stays plain under -race, and the race builds CI
// runs exercise the protocol that ships.
func storeRelease64(p *atomic.Uint64, v uint64) { *(*uint64)(unsafe.Pointer(p)) = v }
