//go:build linux

package engine

import (
	"context"
	"encoding/binary"
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/collectives"
	"github.com/gorun-hpc/gorun/internal/kernels"
)

// A Run with one P hands its thread to a goroutine started by Go that has
// not run yet (wait.go, unstarted): rank 1's Run is started through Go
// just before rank 0's, on a single P, so rank 0 first waits for a
// goroutine that cannot start until it idles. Both must finish, and the
// count must be back to 0: one left behind would make every later idle
// look hand the thread over for good.
func TestGoHandoff(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	e := shmEngines(t, LinkParams{Slots: 4, SlotBytes: 4096})
	for r := range e {
		e[r].SetWait(DefaultWait(1)) // notes GOMAXPROCS 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range 20 {
		var p [2]*Plan
		var c [2]*Call
		var b [2][]byte
		for r := range 2 {
			b[r] = f32([]float32{float32(r), 1})
			p[r] = Compile(collectives.RecursiveDoublingAllReduce(r, 2, 2, 1<<20))
			c[r] = &Call{Coll: collectives.AllReduce, DType: kernels.Float32, Op: kernels.Sum, Count: 2, Seq: uint32(i), Work: b[r], Input: b[r]}
		}
		done := make(chan error, 1)
		Go(func() { done <- e[1].Run(ctx, p[1], c[1], 0) })
		if err := e[0].Run(ctx, p[0], c[0], 0); err != nil {
			t.Fatalf("allreduce %d, rank 0: %v", i, err)
		}
		if err := <-done; err != nil {
			t.Fatalf("allreduce %d, rank 1: %v", i, err)
		}
		for r := range 2 {
			for j, want := range []float32{1, 2} {
				if got := math.Float32frombits(binary.LittleEndian.Uint32(b[r][4*j:])); got != want {
					t.Fatalf("allreduce %d, rank %d, element %d: %v, want %v", i, r, j, got, want)
				}
			}
		}
	}
	if n := unstarted.Load(); n != 0 {
		t.Errorf("unstarted = %d after every goroutine ran, want 0", n)
	}
}
