//go:build amd64 && !race

package release

import (
	"sync/atomic"
	"unsafe"
)

// Store64 stores v at p with release order: what this goroutine stored
// before is visible before it. x86 makes stores visible in program order
// and the compiler keeps stores in order, so a plain store does, where
// atomic's Store is a locked exchange, a full barrier that waits for the
// store buffer (on a hot path, for cache lines another CPU polls).
func Store64(p *atomic.Uint64, v uint64) { *(*uint64)(unsafe.Pointer(p)) = v }
