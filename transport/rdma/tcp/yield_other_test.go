//go:build !linux

package tcp

import "runtime"

// schedYield: no sched_yield off Linux; yield to other goroutines.
func schedYield() { runtime.Gosched() }
