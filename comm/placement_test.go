package comm

import (
	"slices"
	"sync/atomic"
	"time"

	"github.com/gorun-hpc/gorun/internal/numa"
)

// placementNs is the vCPU placement probe of TestCostFit, as
// bench/compare's progs/pingpong.c: two threads pinned to CPUs 0 and 1
// bounce one cache line, and it returns the fastest batch's mean round
// trip in nanoseconds (0 if the threads cannot be pinned, as off Linux). The host moves
// this machine's two vCPUs between a near placement (round trip ~75-110
// ns) and a far one (~330-440 ns) on its own, and a point's time on mem
// and shm depends on it 1.5-3x; a point is recorded with the probe before
// and after it. It takes about 5 ms.
func placementNs() float64 {
	const rounds, batches = 1000, 9
	var line atomic.Int64
	var stop atomic.Bool
	pinned := make(chan bool, 1)
	go func() {
		// BindThread locks the goroutine to its thread, which ends with
		// the goroutine: its affinity is not handed back to the scheduler.
		if numa.BindThread([]int{1}) != nil {
			stop.Store(true)
			pinned <- false
			return
		}
		pinned <- true
		for v := int64(1); ; v += 2 {
			for line.Load() != v {
				if stop.Load() {
					return
				}
			}
			line.Store(v + 1)
		}
	}()
	if !<-pinned {
		return 0
	}
	res := make(chan float64)
	go func() {
		defer stop.Store(true)
		if numa.BindThread([]int{0}) != nil {
			res <- 0
			return
		}
		var rtt []float64
		v := int64(0)
		for range batches {
			t0 := time.Now()
			for range rounds {
				line.Store(v + 1)
				for line.Load() != v+2 {
				}
				v += 2
			}
			rtt = append(rtt, float64(time.Since(t0).Nanoseconds())/rounds)
		}
		res <- slices.Min(rtt)
	}()
	return <-res
}
