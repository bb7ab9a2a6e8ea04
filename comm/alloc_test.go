package comm

import (
	"fmt"
	"testing"
)

// TestAllReduceAllocs: after the first call (which registers the buffer and
// builds the schedule), AllReduce on the same slice allocates nothing —
// counted over the whole process, so the peer rank, the progress
// goroutines and the mem provider are included. A buffer whose messages
// are all copied behind their headers (16 KiB: the engine's smallMax) is
// never registered; a larger one is, once.
func TestAllReduceAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, tc := range []struct{ n, regs int }{{4096, 0}, {1 << 16, 1}} {
		for _, algo := range []string{"ring", "tree", "rd", "hd"} {
			t.Run(fmt.Sprintf("%s/%d", algo, tc.n), func(t *testing.T) {
				allReduceAllocs(t, algo, tc.n, tc.regs)
			})
		}
	}
}

// allReduceAllocs runs one case of TestAllReduceAllocs: n floats, regs
// registrations of the buffer expected.
func allReduceAllocs(t *testing.T, algo string, n, regs int) {
	cs := newLocal(t, 2, WithAlgorithm("allreduce:"+algo))
	step := allReduceStep(t, cs, n)
	step()
	if a := testing.AllocsPerRun(50, step); a > 0 {
		t.Errorf("%s, %d floats: %v allocations per AllReduce", algo, n, a)
	}
	if h := cs[0].devs[0].Cache; h.Misses != regs {
		t.Errorf("%s, %d floats: %d registrations, want %d", algo, n, h.Misses, regs)
	}
}

// allReduceStep returns a step that runs one in-place AllReduce of n
// floats on both ranks of cs, the same slices every time (rank 1 on a
// goroutine that ends with the test).
func allReduceStep(t *testing.T, cs []*Comm, n int) func() {
	ctx := testCtx(t)
	bufs := [][]float32{make([]float32, n), make([]float32, n)}
	start, done := make(chan struct{}), make(chan error)
	go func() {
		for range start {
			done <- AllReduce(ctx, cs[1], bufs[1], bufs[1], Sum)
		}
	}()
	t.Cleanup(func() { close(start) })
	return func() {
		start <- struct{}{}
		if err := AllReduce(ctx, cs[0], bufs[0], bufs[0], Sum); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
