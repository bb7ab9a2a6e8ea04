package comm_test

import (
	"context"

	"github.com/gorun-hpc/gorun/comm"
)

// A training step marks its compute on the timeline (gorun --timeline or
// GORUN_TIMELINE), beside the collectives comm records itself. With the
// timeline off, StartSpan and End cost a nil check.
func ExampleComm_StartSpan() {
	ctx := context.Background()
	c, err := comm.Init(ctx)
	if err != nil {
		return
	}
	defer c.Close()
	grads := make([]float32, 1024)
	for step := range 10 {
		sp := c.StartSpan("compute", "backward", int64(step))
		// ... compute grads ...
		sp.End()
		if err := comm.AllReduce(ctx, c, grads, grads, comm.Avg); err != nil {
			return
		}
	}
}
