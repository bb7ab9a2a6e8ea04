//go:build unix && !linux

package launcher

import (
	"os"
	"os/exec"
	"syscall"
)

func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

func signalGroup(p *os.Process, sig syscall.Signal) error { return syscall.Kill(-p.Pid, sig) }

func startBound(cmd *exec.Cmd, cpus []int) error { return cmd.Start() }

func cpuSets(slots []Slot, mode string) (map[int][]int, error) { return nil, nil }
