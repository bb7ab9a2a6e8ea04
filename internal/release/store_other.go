//go:build !amd64 || race

package release

import "sync/atomic"

// Store64 stores v at p with release order (store_amd64.go). Under the
// race detector, which watches the heap, and off x86 it is atomic's Store.
func Store64(p *atomic.Uint64, v uint64) { p.Store(v) }
