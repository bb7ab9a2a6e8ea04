package launcher

import (
	"fmt"
	"os/exec"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/gorun-hpc/gorun/internal/numa"
)

// startBound starts cmd with every thread restricted to cpus: it forks from
// an OS thread bound to cpus, so the child inherits the mask from its
// first instruction on (setting it on the child's pid afterwards would miss
// threads the Go runtime starts at once). The forking thread's old mask is
// restored before it returns to the scheduler.
func startBound(cmd *exec.Cmd, cpus []int) error {
	errc := make(chan error, 1)
	go func() {
		var old unix.CPUSet
		if err := unix.SchedGetaffinity(0, &old); err != nil {
			errc <- fmt.Errorf("sched_getaffinity: %w", err)
			return
		}
		if err := numa.BindThread(cpus); err != nil { // locks the OS thread
			errc <- err
			return
		}
		err := cmd.Start()
		if rerr := unix.SchedSetaffinity(0, &old); rerr == nil {
			runtime.UnlockOSThread()
		} // else the goroutine exits locked and the runtime ends the thread
		errc <- err
	}()
	return <-errc
}

// cpuSets returns each local rank's CPUs under mode ("core", "numa"), nil
// for "none" or when the topology cannot be read.
func cpuSets(slots []Slot, mode string) (map[int][]int, error) {
	m, err := numa.ParseBindMode(mode)
	if err != nil || m == numa.BindNone {
		return nil, err
	}
	topo, err := numa.System()
	if err != nil {
		return nil, err
	}
	sets := map[int][]int{}
	for _, s := range slots {
		if !isLocalHost(s.Host) {
			continue
		}
		cpus, err := topo.CPUSetFor(s.LocalRank, s.LocalSize, m)
		if err != nil {
			return nil, err
		}
		sets[s.Rank] = cpus
	}
	return sets, nil
}
