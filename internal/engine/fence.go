package engine

import "sync/atomic"

var fenceWord atomic.Uint32

// fullFence orders the stores before it ahead of the loads after it: a
// locked read-modify-write is a full fence in the hardware.
func fullFence() { fenceWord.Add(1) }
