package comm

import (
	"testing"
)

// TestAllReduceAllocs: after the first call (which registers the buffer and
// builds the schedule), AllReduce on the same slice allocates nothing —
// counted over the whole process, so the peer rank, the progress
// goroutines and the mem provider are included.
func TestAllReduceAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, algo := range []string{"ring", "tree", "rd", "hd"} {
		t.Run(algo, func(t *testing.T) {
			cs := newLocal(t, 2, WithAlgorithm("allreduce:"+algo))
			ctx := testCtx(t)
			bufs := [][]float32{make([]float32, 4096), make([]float32, 4096)}
			start, done := make(chan struct{}), make(chan error)
			go func() {
				for range start {
					done <- AllReduce(ctx, cs[1], bufs[1], bufs[1], Sum)
				}
			}()
			defer close(start)
			step := func() {
				start <- struct{}{}
				if err := AllReduce(ctx, cs[0], bufs[0], bufs[0], Sum); err != nil {
					t.Fatal(err)
				}
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			}
			step()
			if a := testing.AllocsPerRun(50, step); a > 0 {
				t.Errorf("%s: %v allocations per AllReduce", algo, a)
			}
			if h := cs[0].devs[0].Cache; h.Misses != 1 {
				t.Errorf("%s: %d registrations, want 1", algo, h.Misses)
			}
		})
	}
}
