package ddp

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/gorun-hpc/gorun/comm"
)

// Join is for uneven inputs (Config.UnevenInputs): a rank that has run out
// of batches calls Join instead of training further. Until every rank has
// called Join, it takes part in each step of the ranks still training
// (the step's allreduces, of zero gradients), and Avg averages over the
// ranks still training. Join returns when every rank has called it, with
// the rank that joined last: the one with the most steps since NewBucketer
// or the previous Join (of several, the highest-numbered). The ranks that
// joined earlier have not stepped their optimizers since, so copy its
// parameters (BroadcastParameters from last) and any optimizer state.
//
// Join leaves every gradient zero (gradients accumulated in no-sync mode
// and not yet reduced are dropped) and the Bucketer ready for the next
// epoch. Call it between steps, after Wait: on a Bucketer without
// UnevenInputs, or after MarkReady in a step not yet waited for, it fails
// on every rank, naming this one, and aborts the communicator
// (Comm.Refuse), so that no rank waits for the others until its timeout.
func (b *Bucketer[T]) Join(ctx context.Context) (last int, err error) {
	if b.count == nil {
		return -1, fmt.Errorf("ddp: %w", b.c.Refuse("join", errors.New("Join needs Config.UnevenInputs")))
	}
	if b.next > 0 || slices.Contains(b.ready, true) {
		return -1, fmt.Errorf("ddp: %w", b.c.Refuse("join", errors.New("Join during a step (after MarkReady): call Wait first")))
	}
	sp := b.c.StartSpan(b.readyLane, "join", int64(b.steps))
	defer sp.End() // after the bucket spans in it have ended
	defer b.reset()
	defer b.waitTraced(ctx)
	joinedAt := b.steps
	// One round per step of the ranks still training, paired with theirs:
	// the count first (0 from here), then every bucket, of zeros.
	for {
		b.count[0] = 0
		if err := comm.AllReduce(ctx, b.c, b.count, b.count, comm.Sum); err != nil {
			return -1, fmt.Errorf("ddp: Join: count of ranks training: %w", err)
		}
		if b.count[0] == 0 { // every rank is in Join
			break
		}
		b.ZeroGrad()
		for _, bk := range b.buckets {
			b.launch(ctx, bk)
		}
		if err := b.finish(&stepWait{ctx: ctx, c: b.c}, 0); err != nil {
			return -1, fmt.Errorf("ddp: Join: %w", err)
		}
	}
	b.ZeroGrad()
	b.steps = 0
	n := int64(b.c.Size())
	b.count[0] = int64(joinedAt)*n + int64(b.c.Rank())
	if err := comm.AllReduce(ctx, b.c, b.count, b.count, comm.Max); err != nil {
		return -1, fmt.Errorf("ddp: Join: agreeing on the rank that joined last: %w", err)
	}
	return int(b.count[0] % n), nil
}
