package ddp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/comm"
)

// A Wait whose context ends before the step's allreduces do (rank 1 has
// not begun the step) aborts the communicator and returns only when they
// have ended: when rank 1 then runs the step, nothing writes rank 0's
// gradients (or its count) after its Wait returned, and rank 1's
// collectives fail naming rank 0. Before, Wait returned with the
// allreduces still running, and rank 1's step completed them, writing the
// sums into gradients that rank 0 had taken back.
func TestWaitContextEndsMidStep(t *testing.T) {
	for _, uneven := range []bool{false, true} {
		t.Run(fmt.Sprintf("uneven=%v", uneven), func(t *testing.T) {
			waited := make(chan struct{})
			var inFlight []*comm.Request // rank 0's allreduces, read once rank 1 is done
			stepped := make(chan struct{})
			errs := ranks(t, 2, func(ctx context.Context, c *comm.Comm) error {
				ps := params(8, 8)
				b, err := NewBucketer(c, ps, Config{OpSet: true, Op: comm.Sum, FirstBucketBytes: 32, BucketBytes: 32, UnevenInputs: uneven})
				if err != nil {
					return err
				}
				for _, p := range ps {
					for j := range p.Grad {
						p.Grad[j] = float32(c.Rank() + 1)
					}
				}
				step := func(wctx context.Context) error {
					for i := range ps {
						if err := b.MarkReady(ctx, i); err != nil {
							return err
						}
					}
					if c.Rank() == 0 {
						for _, bk := range b.buckets {
							inFlight = append(inFlight, bk.req)
						}
						if b.countReq != nil {
							inFlight = append(inFlight, b.countReq)
						}
					}
					return b.Wait(wctx)
				}
				if c.Rank() == 1 {
					<-waited
					defer close(stepped)
					sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
					defer cancel()
					return failsNaming0(sctx, c, step(sctx))
				}
				wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
				defer cancel()
				err = step(wctx)
				close(waited)
				var re *comm.RankError
				if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &re) || re.Rank != 0 {
					return fmt.Errorf("Wait with rank 1 not in the step: %v, want a *comm.RankError naming rank 0 wrapping context.DeadlineExceeded", err)
				}
				var grads [][]float32
				for _, p := range ps {
					grads = append(grads, slices.Clone(p.Grad))
				}
				count := slices.Clone(b.count)
				for i, r := range inFlight {
					if done, _ := r.Test(); !done {
						return fmt.Errorf("allreduce %d still in flight after Wait returned", i)
					}
				}
				<-stepped
				for _, r := range inFlight { // they may have completed with rank 1's step
					r.Wait(ctx)
				}
				for i, p := range ps {
					if !slices.Equal(p.Grad, grads[i]) {
						return fmt.Errorf("p%d's gradient written after Wait returned: %v, then %v", i, grads[i], p.Grad)
					}
				}
				if !slices.Equal(b.count, count) {
					return fmt.Errorf("count written after Wait returned: %v, then %v", count, b.count)
				}
				return nil
			})
			for r, err := range errs {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
		})
	}
}

// failsNaming0 checks rank 1's step after rank 0 aborted the
// communicator: stepErr names rank 0, or is nil (the abort notice came
// after rank 0's part of the step, which rank 1 could complete), and the
// next collective fails naming rank 0.
func failsNaming0(ctx context.Context, c *comm.Comm, stepErr error) error {
	var re *comm.RankError
	if stepErr != nil && (!errors.As(stepErr, &re) || re.Rank != 0) {
		return fmt.Errorf("the step after rank 0 gave up: %v, want an error naming rank 0", stepErr)
	}
	if err := c.Barrier(ctx); !errors.As(err, &re) || re.Rank != 0 {
		return fmt.Errorf("a barrier after rank 0 gave up: %v, want an error naming rank 0", err)
	}
	return nil
}
