package comm_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/gorun-hpc/gorun/comm"
)

// Three ranks contribute 1, 2 and 3 elements; AllGatherV packs them, Scan
// gives each rank the running sum, and AllReduceLoc finds the largest
// value and the rank that holds it.
func ExampleAllGatherV() {
	ctx := context.Background()
	cs, err := comm.NewLocal(ctx, 3)
	if err != nil {
		fmt.Println(err)
		return
	}
	out := make([]string, 3)
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			r := c.Rank()
			send := make([]int32, r+1)
			for i := range send {
				send[i] = int32(10*r + i)
			}
			all := make([]int32, 6)
			if err := comm.AllGatherV(ctx, c, send, all, []int{1, 2, 3}, nil); err != nil {
				out[r] = err.Error()
				return
			}
			prefix := []int32{int32(r + 1)}
			if err := comm.Scan(ctx, c, prefix, prefix, comm.Sum); err != nil {
				out[r] = err.Error()
				return
			}
			loc := []comm.ValueIndex[float64]{{Value: float64(r % 2), Index: int64(r)}}
			if err := comm.AllReduceLoc(ctx, c, loc, loc, comm.MaxLoc); err != nil {
				out[r] = err.Error()
				return
			}
			out[r] = fmt.Sprintf("rank %d: %v scan %d max %g at rank %d", r, all, prefix[0], loc[0].Value, loc[0].Index)
		}()
	}
	wg.Wait()
	for _, s := range out {
		fmt.Println(s)
	}
	// Output:
	// rank 0: [0 10 11 20 21 22] scan 1 max 1 at rank 1
	// rank 1: [0 10 11 20 21 22] scan 3 max 1 at rank 1
	// rank 2: [0 10 11 20 21 22] scan 6 max 1 at rank 1
}
