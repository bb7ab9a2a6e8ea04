package comm_test

import (
	"context"
	"errors"
	"log"
	"os"

	"github.com/gorun-hpc/gorun/comm"
)

// An elastic training loop, run under gorun --elastic --max-restarts N: the
// survivors of a failure Shrink and redo the step; a restarted rank joins
// through Init, and the others admit it with Grow at a point they agree on
// and send it the state from a rank that was there. A rank the others
// declared dead while it was frozen or starved gets ErrExpelled from
// Shrink: its state is stale, so it exits and gorun starts it afresh. (No
// output: it needs a job that gorun launched; examples/soak -elastic and
// examples/train are complete programs.)
func ExampleComm_Grow() {
	ctx := context.Background()
	c, err := comm.Init(ctx) // a restarted rank waits here until the others Grow
	if err != nil {
		log.Fatal(err)
	}
	defer func() { c.Close() }()
	params := make([]float32, 1024)
	step := []int64{0}
	// share sends the step and the parameters from the lowest rank that
	// was there before (fresh: this rank was not).
	share := func(fresh bool) error {
		root := []int64{int64(c.Rank())}
		if fresh {
			root[0] = int64(c.Size())
		}
		if err := comm.AllReduce(ctx, c, root, root, comm.Min); err != nil {
			return err
		}
		if err := comm.Broadcast(ctx, c, step, int(root[0])); err != nil {
			return err
		}
		return comm.Broadcast(ctx, c, params, int(root[0]))
	}
	fresh := os.Getenv("GORUN_RESTART") != ""
	if err := share(fresh); err != nil {
		log.Fatal(err)
	}
	// A restarted rank joined at the others' control point: its first
	// step starts after it (they are past it, in the step's allreduce).
	check := !fresh
	for step[0] < 1000 {
		err := error(nil)
		if check && step[0]%16 == 0 {
			// A control point every rank reaches: admit the waiting ranks.
			k := []int64{int64(c.Joiners())}
			if err = comm.AllReduce(ctx, c, k, k, comm.Max); err == nil && k[0] > 0 {
				var grown *comm.Comm
				if grown, err = c.Grow(ctx); err == nil {
					c = grown
					err = share(false)
				}
			}
		}
		check = true // a redo after a failure passes the control point again, as the others do
		if err == nil {
			err = comm.AllReduce(ctx, c, params, params, comm.Avg) // the step
		}
		if err != nil {
			shrunk, err := c.Shrink(ctx)
			if errors.Is(err, comm.ErrExpelled) {
				log.Fatal("the job went on without this rank: ", err) // gorun restarts it
			} else if err != nil {
				log.Fatal(err)
			}
			c = shrunk
			continue // redo the step on the survivors
		}
		step[0]++
	}
}
