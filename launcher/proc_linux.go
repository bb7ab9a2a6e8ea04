package launcher

import (
	"errors"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
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

// endGroup waits until p, a group leader gorun started, has exited, then
// kills what is left of its group: a helper the rank started (and that
// ignored the SIGINT or SIGTERM the group got) must not outlive it, and
// Pdeathsig reaches the rank only. p is not reaped yet, so its pid, the
// group's id, cannot have been reused. The caller reaps p (Wait).
func endGroup(p *os.Process) {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, p.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EINTR) {
			return // not ours to wait for: leave the group alone
		}
	}
	syscall.Kill(-p.Pid, syscall.SIGKILL)
}
