//go:build unix && !linux

package launcher

import (
	"os"
	"syscall"
)

func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

func signalGroup(p *os.Process, sig syscall.Signal) error { return syscall.Kill(-p.Pid, sig) }
