//go:build !amd64 || race

package engine

import "sync/atomic"

// storeRelease64 stores v at p with release order (store_amd64.go).
func storeRelease64(p *atomic.Uint64, v uint64) { p.Store(v) }
