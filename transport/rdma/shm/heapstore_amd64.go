//go:build linux && amd64 && !race

package shm

import "sync/atomic"

// storeReleaseHeap is storeRelease64 for a value on the Go heap that only
// this process reads. Under the race detector, which watches the heap, it
// is atomic's Store (heapstore_other.go).
func storeReleaseHeap(p *atomic.Uint64, v uint64) { storeRelease64(p, v) }
