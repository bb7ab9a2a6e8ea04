package launcher

import (
	"os"
	"syscall"
)

// sysProcAttr puts each rank in its own process group, so gorun alone
// decides which signals reach it, and kills it if gorun dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// signalGroup sends sig to the process group p leads.
func signalGroup(p *os.Process, sig syscall.Signal) error {
	return syscall.Kill(-p.Pid, sig)
}
