//go:build race

package engine

import "sync/atomic"

var fenceWord atomic.Uint32

// raceFence orders the stores before it ahead of the loads after it, which
// the race detector's atomics do not (see fence_norace.go): a locked
// read-modify-write is a full fence in the hardware.
func raceFence() { fenceWord.Add(1) }
