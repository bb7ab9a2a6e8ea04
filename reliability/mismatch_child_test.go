package reliability

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/gorun-hpc/gorun/comm"
)

// childMismatch runs one good allreduce, then a collective in which rank
// REL_ODD disagrees with the others on REL_MISMATCH (coll, count, type,
// root or op). Every rank must fail; the event's Err says whether the
// error was ErrMismatch.
func childMismatch(rank int) int {
	kind := os.Getenv("REL_MISMATCH")
	odd := envInt("REL_ODD", 1) == rank
	base := takeSnapshot()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := comm.Init(ctx)
	if err != nil {
		emit(event{Kind: "error", Rank: rank, Err: "init: " + err.Error(), ErrRank: errRank(err)})
		return after(rank, base, nil)
	}
	emit(event{Kind: "ready", Rank: rank})
	warm := []float32{1, 2, 3}
	if err := comm.AllReduce(ctx, c, warm, warm, comm.Sum); err != nil {
		emit(event{Kind: "error", Rank: rank, Err: "warm-up: " + err.Error(), ErrRank: errRank(err)})
		return after(rank, base, c)
	}
	const count = 1000
	f32 := make([]float32, count)
	for i := range f32 {
		f32[i] = 1
	}
	switch {
	case kind == "count" && odd:
		err = comm.AllReduce(ctx, c, f32[:count-1], f32[:count-1], comm.Sum)
	case kind == "type" && odd:
		f64 := make([]float64, count)
		err = comm.AllReduce(ctx, c, f64, f64, comm.Sum)
	case kind == "type-same-bytes" && odd:
		i32 := make([]int32, count)
		err = comm.AllReduce(ctx, c, i32, i32, comm.Sum)
	case kind == "op" && odd:
		err = comm.AllReduce(ctx, c, f32, f32, comm.Max)
	case kind == "coll" && odd:
		err = comm.Broadcast(ctx, c, f32, 0)
	case kind == "root":
		root := 0
		if odd {
			root = 1
		}
		err = comm.Broadcast(ctx, c, f32, root)
	default:
		err = comm.AllReduce(ctx, c, f32, f32, comm.Sum)
	}
	if err == nil {
		// Check for a silently wrong result: the reference is a sum of 1s.
		if kind != "root" && kind != "coll" && !odd {
			for i, v := range f32 {
				if v != float32(c.Size()) {
					emit(event{Kind: "wrong", Rank: rank, Err: fmt.Sprintf("[%d] = %v after a mismatched call", i, v)})
					return 3
				}
			}
		}
		// This rank's part completed: the abort must reach it by its next
		// operation.
		if err = c.Barrier(ctx); err == nil {
			emit(event{Kind: "done", Rank: rank})
			return after(rank, base, c)
		}
		err = fmt.Errorf("next op: %w", err)
	}
	msg := err.Error()
	if errors.Is(err, comm.ErrMismatch) {
		msg = "mismatch: " + msg
	}
	emit(event{Kind: "error", Rank: rank, Err: msg, ErrRank: errRank(err)})
	time.Sleep(time.Second) // as in childColl: do not race the abort notices
	return after(rank, base, c)
}
