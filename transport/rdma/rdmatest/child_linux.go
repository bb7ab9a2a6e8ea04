package rdmatest

import "syscall"

// childAttr makes the kernel kill the child when the parent dies.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
