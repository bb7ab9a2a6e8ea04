//go:build linux && !amd64

package shm

import "sync/atomic"

// storeRelease64 stores v at p with release order (store_amd64.go). Off
// x86 Go's atomic Store gives that without a locked exchange (arm64:
// STLR).
func storeRelease64(p *atomic.Uint64, v uint64) { p.Store(v) }
