package ddp

import (
	"context"
	"fmt"
	"testing"

	"github.com/gorun-hpc/gorun/comm"
)

// SetNoSync during a step (its first bucket in flight, or a parameter
// marked in no-sync mode) is an error and changes nothing: Wait completes
// the step in the mode it began in, so a step begun syncing reduces every
// bucket, and one begun in no-sync mode reduces none.
func TestNoSyncDuringStep(t *testing.T) {
	errs := ranks(t, 2, func(ctx context.Context, c *comm.Comm) error {
		ps := params(8, 8)
		b, err := NewBucketer(c, ps, Config{OpSet: true, Op: comm.Sum, FirstBucketBytes: 32, BucketBytes: 32})
		if err != nil {
			return err
		}
		if b.Buckets() != 2 {
			return fmt.Errorf("%d buckets, want 2", b.Buckets())
		}
		fill := func() {
			for _, p := range ps {
				for j := range p.Grad {
					p.Grad[j] = float32(c.Rank() + 1)
				}
			}
		}
		fill()
		if err := b.MarkReady(ctx, 1); err != nil { // bucket 0 starts
			return err
		}
		if err := b.SetNoSync(true); err == nil {
			return fmt.Errorf("SetNoSync(true) with a bucket in flight: nil error")
		}
		if err := b.MarkReady(ctx, 0); err != nil {
			return err
		}
		if err := b.Wait(ctx); err != nil {
			return err
		}
		for i, p := range ps {
			if p.Grad[0] != 3 || p.Grad[7] != 3 {
				return fmt.Errorf("step begun syncing: p%d's gradient %v, want the sum 3", i, p.Grad)
			}
		}

		if err := b.SetNoSync(true); err != nil { // between steps
			return err
		}
		fill()
		if err := b.MarkReady(ctx, 1); err != nil {
			return err
		}
		if err := b.SetNoSync(false); err == nil {
			return fmt.Errorf("SetNoSync(false) after MarkReady in no-sync mode: nil error")
		}
		if err := b.SetNoSync(true); err != nil {
			return fmt.Errorf("SetNoSync to the mode in force during a step: %v", err)
		}
		if err := b.MarkReady(ctx, 0); err != nil {
			return err
		}
		if err := b.Wait(ctx); err != nil {
			return err
		}
		for i, p := range ps {
			if want := float32(c.Rank() + 1); p.Grad[0] != want {
				return fmt.Errorf("step begun in no-sync mode: p%d's gradient %v, want this rank's own %v", i, p.Grad[0], want)
			}
		}
		return b.SetNoSync(false)
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}
