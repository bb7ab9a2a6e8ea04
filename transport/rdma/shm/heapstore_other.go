//go:build linux && (!amd64 || race)

package shm

import "sync/atomic"

// storeReleaseHeap stores v at p with release order (heapstore_amd64.go).
func storeReleaseHeap(p *atomic.Uint64, v uint64) { p.Store(v) }
