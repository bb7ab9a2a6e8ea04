//go:build race

package engine

// raceFence orders the stores before it ahead of the loads after it, which
// the race detector's atomics do not (see fence_norace.go): a locked
// read-modify-write is a full fence in the hardware.
func raceFence() { fullFence() }
