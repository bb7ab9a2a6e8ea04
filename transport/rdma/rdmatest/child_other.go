//go:build !linux

package rdmatest

import "syscall"

// childAttr: without Pdeathsig the child relies on EOF on its control
// pipe and on its lifetime bound.
func childAttr() *syscall.SysProcAttr { return nil }
