//go:build !linux

package engine

import "runtime"

// yieldCPU yields to other goroutines where sched_yield is not at hand.
func yieldCPU() { runtime.Gosched() }

// leaveCPU is a no-op where the affinity mask is not at hand.
func leaveCPU() {}
