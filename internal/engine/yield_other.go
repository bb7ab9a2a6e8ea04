//go:build !linux

package engine

import "runtime"

// yieldCPU yields to other goroutines where sched_yield is not at hand.
func yieldCPU() { runtime.Gosched() }
