package reliability

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/gorun-hpc/gorun/comm"
)

// childShrink runs allreduces until one fails (a rank was killed), then
// shrinks the communicator and runs REL_ITERS allreduces on the survivors,
// checking each result. Its "done" event carries the new rank in Iter.
func childShrink(rank int) int {
	base := takeSnapshot()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := comm.Init(ctx)
	if err != nil {
		emit(event{Kind: "error", Rank: rank, Err: "init: " + err.Error(), ErrRank: errRank(err)})
		return after(rank, base, nil)
	}
	emit(event{Kind: "ready", Rank: rank})
	buf := make([]int64, 512)
	for it := 0; ; it++ {
		for i := range buf {
			buf[i] = int64(rank + i)
		}
		if err = comm.AllReduce(ctx, c, buf, buf, comm.Sum); err != nil {
			break
		}
	}
	emit(event{Kind: "error", Rank: rank, Err: err.Error(), ErrRank: errRank(err)})
	start := time.Now()
	s, err := c.Shrink(ctx)
	if err != nil {
		emit(event{Kind: "wrong", Rank: rank, Err: "shrink: " + err.Error()})
		return after(rank, base, c)
	}
	fmt.Fprintf(os.Stderr, "rank %d: shrink took %v: now rank %d of %d\n", rank, time.Since(start), s.Rank(), s.Size())
	n := s.Size()
	for it := range envInt("REL_ITERS", 20) {
		for i := range buf {
			buf[i] = int64(s.Rank()*1000 + i + it)
		}
		if err := comm.AllReduce(ctx, s, buf, buf, comm.Sum); err != nil {
			emit(event{Kind: "wrong", Rank: rank, Err: fmt.Sprintf("allreduce %d after shrink: %v", it, err)})
			return after(rank, base, s)
		}
		for i, v := range buf {
			if want := int64(1000*n*(n-1)/2 + n*(i+it)); v != want {
				emit(event{Kind: "wrong", Rank: rank, Err: fmt.Sprintf("after shrink [%d] = %d, want %d", i, v, want)})
				return 3
			}
		}
	}
	emit(event{Kind: "done", Rank: rank, Iter: s.Rank(), Err: fmt.Sprintf("size %d, shrink %v", n, time.Since(start).Round(time.Millisecond))})
	c.Close() // a no-op: s owns everything now
	return after(rank, base, s)
}
