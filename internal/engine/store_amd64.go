//go:build amd64 && !race

package engine

import (
	"sync/atomic"
	"unsafe"
)

// storeRelease64 stores v at p with release order, all that a value
// another goroutine only reads needs: x86 makes stores visible in
// program order and the compiler keeps stores in order, where atomic's
// Store is a locked exchange, a full barrier that waits for the store
// buffer (on the hot path, for cache lines the peer polls). Under the
// race detector it is atomic's Store (store_other.go).
func storeRelease64(p *atomic.Uint64, v uint64) { *(*uint64)(unsafe.Pointer(p)) = v }
