//go:build linux

package engine

import (
	"context"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/collectives"
	"github.com/gorun-hpc/gorun/internal/kernels"
)

// A rank that waits long for its peer tells it so once in the Run
// (tellWaiting), not at each look for strays: a peer that does not run
// reposts no control receives, and a word every few milliseconds would
// fill them. Rank 0 waits a second in each of three allreduces for rank
// 1, which starts late; rank 1 takes one word per allreduce.
func TestWaitingToldOncePerRun(t *testing.T) {
	e := shmEngines(t, LinkParams{Slots: 4, SlotBytes: 4096})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const runs, late = 3, time.Second // late: 10 looks for strays (strayEvery)
	for i := range runs {
		var p [2]*Plan
		var c [2]*Call
		for r := range 2 {
			b := f32([]float32{float32(r), 1})
			p[r] = Compile(collectives.RecursiveDoublingAllReduce(r, 2, 2, 1<<20))
			c[r] = &Call{Coll: collectives.AllReduce, DType: kernels.Float32, Op: kernels.Sum, Count: 2, Seq: uint32(i), Work: b, Input: b}
		}
		var errs [2]error
		done := make(chan struct{})
		go func() {
			time.Sleep(late)
			errs[1] = e[1].Run(ctx, p[1], c[1], 0)
			close(done)
		}()
		errs[0] = e[0].Run(ctx, p[0], c[0], 0)
		<-done
		if errs[0] != nil || errs[1] != nil {
			t.Fatalf("allreduce %d: %v", i, errs)
		}
	}
	if got := e[1].waitWords.Load(); got != runs {
		t.Errorf("rank 1 took %d words that rank 0 waits for it in %d Runs; want one a Run", got, runs)
	}
	if got := e[0].waitWords.Load(); got != 0 {
		t.Errorf("rank 0, which rank 1 never waited for long, took %d words", got)
	}
}
