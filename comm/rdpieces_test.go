package comm

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// Recursive doubling reduces into the range it sends from, so a send must
// count as done once its buffer is no longer read. An op of several
// staging slots whose last piece is small goes out last as an unsignaled
// send, copied at post time, which never completes: both ranks waited for
// the other to consume it and stalled until the timeout (512 KiB on
// 8 × 128 KiB slots, found at 1 MiB on tcp's larger slots).
func TestRecursiveDoublingSmallLastPiece(t *testing.T) {
	cs := newLocal(t, 2, WithAlgorithm("allreduce:rd"), WithStaging(8, 128<<10))
	for _, n := range []int{512 << 10, 393216, 393120, 3 << 20} {
		t.Run(fmt.Sprintf("bytes=%d", n), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			errs := make([]error, len(cs))
			bufs := make([][]float32, len(cs))
			for r, c := range cs {
				bufs[r] = make([]float32, n/4)
				for i := range bufs[r] {
					bufs[r][i] = float32(r + 1)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[r] = AllReduce(ctx, c, bufs[r], bufs[r], Sum)
				}()
			}
			wg.Wait()
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
				for i, v := range bufs[r] {
					if v != 3 {
						t.Fatalf("rank %d: [%d] = %v, want 3", r, i, v)
					}
				}
			}
		})
	}
}

// The same stall in a 2-rank ReduceScatter of 256 KiB (found by the hier
// helper; it also hung the hierarchical allreduce, which composes one).
func TestReduceScatterSmallLastPiece(t *testing.T) {
	cs := newLocal(t, 2, WithStaging(8, 128<<10))
	for _, n := range []int{64 << 10, 128 << 10} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		runAll(t, cs, func(c *Comm) error {
			send := make([]float32, n)
			for i := range send {
				send[i] = float32(c.Rank() + i%7)
			}
			recv := make([]float32, n/2)
			if err := ReduceScatter(ctx, c, send, recv, Max); err != nil {
				return err
			}
			for i, v := range recv {
				if want := float32(1 + (c.Rank()*n/2+i)%7); v != want {
					return fmt.Errorf("rank %d: [%d] = %v, want %v", c.Rank(), i, v, want)
				}
			}
			return nil
		})
		cancel()
	}
}
