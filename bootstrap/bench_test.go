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

// BenchmarkShrink measures the agreement on a world without one member
// after it was shut down (not a leave: its port closed, as a kill's), from
// every survivor's Suspect and Shrink to the last one's return, reported
// as ms/shrink; the victim cycles through the ranks. Before message.seq
// (msg.go), a stale proposal handed over after a fresh one made most
// shrinks wait for the 200 ms resend.
//
//	go test -run XXX -bench Shrink -benchtime 40x ./bootstrap/
func BenchmarkShrink(b *testing.B) {
	var took time.Duration
	for i := range b.N {
		nodes := startWorld(b, fmt.Sprintf("bench-shrink-%d", i), 4, nil)
		victim := i % 4
		nodes[victim].shutdown(false)
		var survivors []*Node
		for r, n := range nodes {
			if r != victim {
				survivors = append(survivors, n)
			}
		}
		start := time.Now()
		for _, n := range survivors {
			n.Suspect(victim)
		}
		shrinkAll(b, survivors, 10*time.Second)
		took += time.Since(start)
		closeAll(nodes)
	}
	b.ReportMetric(float64(took.Microseconds())/1e3/float64(b.N), "ms/shrink")
}
