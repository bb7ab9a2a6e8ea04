package bootstrap

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkBootstrap measures the time for size ranks in this process to
// start, join the seed and agree on the world (not the time to close it),
// reported as s/world. All ranks run in one process on 127.0.0.1, so on a
// small machine it also measures how well gossip copes with CPU
// contention; ranks of a real job run in their own processes.
//
//	go test -run XXX -bench Bootstrap -benchtime 5x ./bootstrap/
func BenchmarkBootstrap(b *testing.B) {
	for _, size := range []int{4, 16, 64} {
		b.Run(fmt.Sprintf("ranks=%d", size), func(b *testing.B) {
			var formed time.Duration
			for i := range b.N {
				start := time.Now()
				nodes := startWorld(b, fmt.Sprintf("bench-%d-%d", size, i), size, nil)
				formed += time.Since(start)
				closeAll(nodes)
			}
			b.ReportMetric(formed.Seconds()/float64(b.N), "s/world")
		})
	}
}
