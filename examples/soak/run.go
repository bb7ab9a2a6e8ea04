package main

import (
	"context"
	"fmt"

	"github.com/gorun-hpc/gorun/comm"
)

// runT runs step s with element type T and checks every element this rank
// received against the reference computed from all ranks' inputs.
func runT[T comm.Number](ctx context.Context, c *comm.Comm, s step) (int, error) {
	me, n, k := c.Rank(), c.Size(), s.count
	var check []T // what this rank must verify
	var want func(i int) float64
	var err error
	elem := int(comm.DTypeOf[T]().Size())
	switch s.coll {
	case "allreduce", "iallreduce":
		buf := fill[T](s, me, k, n, 0)
		if s.coll == "allreduce" {
			err = comm.AllReduce(ctx, c, buf, buf, s.op)
		} else {
			err = comm.IAllReduce(ctx, c, buf, buf, s.op).Wait(ctx)
		}
		check, want = buf, func(i int) float64 { return reduced(s, i, n) }
	case "reduce":
		send := fill[T](s, me, k, n, 0)
		recv := make([]T, k)
		err = comm.Reduce(ctx, c, send, recv, s.op, s.root)
		if me == s.root {
			check, want = recv, func(i int) float64 { return reduced(s, i, n) }
		}
	case "broadcast":
		buf := make([]T, k)
		if me == s.root {
			buf = fill[T](s, me, k, n, 0)
		}
		err = comm.Broadcast(ctx, c, buf, s.root)
		check, want = buf, func(i int) float64 { return input(s, s.root, i, n) }
	case "allgather":
		recv := make([]T, n*k)
		err = comm.AllGather(ctx, c, fill[T](s, me, k, n, 0), recv)
		check, want = recv, func(i int) float64 { return input(s, i/k, i%k, n) }
	case "reducescatter":
		recv := make([]T, k)
		err = comm.ReduceScatter(ctx, c, fill[T](s, me, n*k, n, 0), recv, s.op)
		check, want = recv, func(i int) float64 { return reduced(s, me*k+i, n) }
	case "gather":
		var recv []T
		if me == s.root {
			recv = make([]T, n*k)
		}
		err = comm.Gather(ctx, c, fill[T](s, me, k, n, 0), recv, s.root)
		if me == s.root {
			check, want = recv, func(i int) float64 { return input(s, i/k, i%k, n) }
		}
	case "scatter":
		var send []T
		if me == s.root {
			send = fill[T](s, me, n*k, n, 0)
		}
		recv := make([]T, k)
		err = comm.Scatter(ctx, c, send, recv, s.root)
		check, want = recv, func(i int) float64 { return input(s, s.root, me*k+i, n) }
	case "alltoall":
		// Block b of rank r's send is input(s, r, b*k+i); this rank's
		// block from rank r is r's block me.
		recv := make([]T, n*k)
		err = comm.AllToAll(ctx, c, fill[T](s, me, n*k, n, 0), recv)
		check, want = recv, func(i int) float64 { return input(s, i/k, me*k+i%k, n) }
	case "barrier":
		return 0, c.Barrier(ctx)
	default:
		return 0, fmt.Errorf("unknown collective %q", s.coll)
	}
	if err != nil {
		return 0, err
	}
	for i, v := range check {
		w := comm.ToFloat64(fromF[T](want(i)))
		if got := comm.ToFloat64(v); !same(s.dtype, got, w) {
			return 0, &wrongResult{step: s, index: i, got: got, want: w}
		}
	}
	return k * elem, nil
}

// wrongResult is a result that differs from the reference.
type wrongResult struct {
	step      step
	index     int
	got, want float64
}

func (e *wrongResult) Error() string {
	return fmt.Sprintf("WRONG RESULT at %v: element %d = %v, want %v", e.step, e.index, e.got, e.want)
}
